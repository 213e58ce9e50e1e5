"""The errors of the config: :class:`ConfigError`, the one-line message every bad key or value
raises, and :func:`install_hint`, the command every missing optional package names; at the bottom of
the import graph (every layer imports it, it imports nothing of evorl)."""

from __future__ import annotations

import difflib
from pathlib import Path


class ConfigError(ValueError):
    """A configuration key or value that cannot be used."""


def close_matches(word: str, valid: list[str] | tuple[str, ...], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """The names of ``valid`` closest to ``word``, closest first: difflib's ratio, on the
    lowercased names when that finds more (``CartPole-v1`` is close to ``cartpole``)."""
    exact = difflib.get_close_matches(word, list(valid), n=n, cutoff=cutoff)
    by_lower = {name.lower(): name for name in valid}
    folded = [by_lower[m] for m in difflib.get_close_matches(word.lower(), list(by_lower), n=n, cutoff=cutoff)]
    return exact + [m for m in folded if m not in exact][:n - len(exact)]


def did_you_mean(word: str, valid: list[str] | tuple[str, ...], n: int = 3, cutoff: float = 0.6,
                 prefix: str = "") -> str:
    """`` Did you mean 'a' or 'b'?`` for the :func:`close_matches` of ``word`` (each written
    after ``prefix``), or "" when none is close: every "Did you mean" of evorl is this one."""
    close = close_matches(word, valid, n, cutoff)
    return f" Did you mean {' or '.join(repr(prefix + name) for name in close)}?" if close else ""


#: Keys other libraries have (SB3's ``total_timesteps``), by name in any section: what evorl
#: calls them.
FAMILIAR_KEYS = dict.fromkeys(
    ("total_timesteps", "num_timesteps", "total_steps", "timesteps", "num_env_steps", "total_env_steps"),
    "A run's length in env steps is 'training.total_env_steps' (in iterations: 'training.num_iterations').")


def unknown_key_error(key: str, valid: list[str], where: str) -> ConfigError:
    full = f"{where}.{key}" if where else key
    hint = did_you_mean(key, valid, n=1, cutoff=0.5, prefix=f"{where}." if where else "")
    if key in FAMILIAR_KEYS:
        hint = f" {FAMILIAR_KEYS[key]}"
    return ConfigError(f"Unknown config key '{full}'.{hint} Valid keys{' of ' + where if where else ''}: {', '.join(sorted(valid))}.")


def checkout_root() -> str | None:
    """The folder of the checkout evorl runs from (the one holding its ``pyproject.toml``), or
    None for an install without one (a wheel)."""
    root = Path(__file__).resolve().parents[2]
    pyproject = root / "pyproject.toml"
    if pyproject.is_file() and 'name = "evorl"' in pyproject.read_text(errors="replace"):
        return str(root)
    return None


def install_hint(extra: str) -> str:
    """The command that installs evorl's pip extra ``extra``: ``pip install -e "ROOT[extra]"``
    with ``ROOT`` the checkout evorl runs from, a command that works from any folder. Without
    a checkout (a wheel install), ``pip install -e ".[extra]"`` run in evorl's checkout. A hint
    never names the package by its name: the package index's ``evorl`` is another project."""
    root = checkout_root()
    if root is None:
        return f'pip install -e ".[{extra}]" (in the root folder of evorl\'s checkout)'
    return f'pip install -e "{root}[{extra}]"'


def require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)

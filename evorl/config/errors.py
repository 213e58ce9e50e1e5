"""The errors of the config: :class:`ConfigError`, the one-line message every bad key or value
raises, and :func:`install_hint`, the command every missing optional package names; at the bottom of
the import graph (every layer imports it, it imports nothing of evorl)."""

from __future__ import annotations

import difflib


class ConfigError(ValueError):
    """A configuration key or value that cannot be used."""


def unknown_key_error(key: str, valid: list[str], where: str) -> ConfigError:
    full = f"{where}.{key}" if where else key
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    hint = f" Did you mean '{(where + '.') if where else ''}{close[0]}'?" if close else ""
    return ConfigError(f"Unknown config key '{full}'.{hint} Valid keys{' of ' + where if where else ''}: {', '.join(sorted(valid))}.")


def install_hint(extra: str) -> str:
    """The command that installs evorl's pip extra ``extra``, run in the root folder of the
    checkout (the one that holds ``pyproject.toml``): ``pip install -e ".[extra]"``. A hint never
    names the package by its name: the package index's ``evorl`` is another project."""
    return f'pip install -e ".[{extra}]"'


def require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)

"""Every rule about a user's config lives in ``evorl/config/``: the layers below call its checks
and trust what passed. A ``require(...)`` or ``raise ConfigError`` anywhere else is a rule
written in a second place, unless its file is listed here with the reason it refuses input
itself. The app's refusals of files on disk and of API arguments are not config rules: they
raise :mod:`evorl.app.errors`' own types."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "evorl"
#: What states a rule: a ``require(...)`` call or a ConfigError raised.
RULE = re.compile(r"\brequire\(|raise ConfigError\b|raise unknown_key_error\(")

_ENV_ARGUMENT = ("an env adapter refusing an argument that only its library can judge (a name, backend, "
                 "keyword or space its library does not have), where the library is loaded")
#: Files outside ``evorl/config/`` that refuse input themselves, with why.
ALLOWED = {
    "envs/__init__.py": "create_env's own arguments, for a caller that builds an env without a config",
    "envs/brax_env.py": _ENV_ARGUMENT,
    "envs/envpool_env.py": _ENV_ARGUMENT,
    "envs/gymnasium_env.py": _ENV_ARGUMENT,
    "envs/gymnasium_vector.py": _ENV_ARGUMENT,
    "envs/gymnax_env.py": _ENV_ARGUMENT,
    "envs/jaxmarl_env.py": _ENV_ARGUMENT,
    "envs/jumanji_env.py": _ENV_ARGUMENT,
    "envs/multi_agent.py": _ENV_ARGUMENT,
    "envs/obs_fields.py": _ENV_ARGUMENT,
    "envs/playground_env.py": _ENV_ARGUMENT,
}


def rule_sites() -> dict[str, list[str]]:
    sites: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(("config/", "configs/")):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if RULE.search(line) and not line.lstrip().startswith(("#", "def ")):
                sites.setdefault(rel, []).append(f"evorl/{rel}:{number}: {line.strip()}")
    return sites


def test_config_rules_live_in_evorl_config():
    stray = [line for rel, lines in rule_sites().items() if rel not in ALLOWED for line in lines]
    assert not stray, ("config rules outside evorl/config/ (move each into the matching section's check "
                       "or a function there, and call it):\n" + "\n".join(stray))


def test_every_allowed_file_still_refuses_input():
    """An entry whose file no longer raises is removed, so the list stays the list of exceptions."""
    sites = rule_sites()
    stale = [rel for rel in ALLOWED if rel not in sites]
    assert not stale, f"ALLOWED lists files without a rule any more: {stale}"


def test_the_pattern_finds_a_rule():
    assert RULE.search('    require(x > 0, "x must be > 0")')
    assert RULE.search('        raise ConfigError(f"bad")')
    assert RULE.search("        raise unknown_key_error(key, valid, 'training')")
    assert not RULE.search("    required(x)") and not RULE.search("    raise ConfigErrors")

"""The one-line messages of ``evorl-train`` for what goes wrong before training starts: a
YAML syntax error, an interpolation that does not resolve, a config group option or config
file that does not exist, a config file that is not UTF-8 (see :mod:`evorl.app.cli`).

A misspelt or unknown key is not here: it is refused where its section is parsed, for the
Python API as for the command (:func:`evorl.config.errors.unknown_key_error`, raised by
:func:`evorl.config.parsing.parse_section` and the workflows' ``parse_config``), below every
layer that reads a config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evorl.config import ConfigError
from evorl.config.parsing import plain_config  # noqa: F401  (importable from here too)


def yaml_error_line(error: Any) -> str:
    """A YAML syntax error (``yaml.MarkedYAMLError``) in one line: file, line, column, problem."""
    mark, context = error.problem_mark, error.context_mark
    where = f"{mark.name}, line {mark.line + 1}, column {mark.column + 1}" if mark else "a YAML file"
    started = ""
    if error.context and context is not None:
        started = f" ({error.context} started at line {context.line + 1}, column {context.column + 1})"
    return f"YAML syntax error in {where}: {error.problem}{started}."


def raised_in(error: BaseException, function: str) -> bool:
    """Whether ``function`` is on the traceback of ``error``."""
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_name == function:
            return True
        tb = tb.tb_next
    return False


def missing_config_line(error: Any) -> str:
    """Hydra's ``MissingConfigException`` (its message lists the options and the search path)
    in one line: ``algo=ppo2: no such option. Did you mean 'algo=ppo'? Valid: a2c, impala, ppo.``"""
    from evorl.app.config_groups import unknown_option_text

    group, _, option = (error.missing_cfg_file or "").rpartition("/")
    if group and error.options is not None:
        return unknown_option_text(group, option, list(error.options))
    return str(error).splitlines()[0]


def undecodable_config_line(error: UnicodeDecodeError, folders: list[Path]) -> str:
    """A config file that is not UTF-8, named: Hydra's error does not say which file it read, so
    the config ``folders`` in use are searched for it (the one holding the bytes that failed first)."""
    from evorl.app.run_folder import utf8_text

    found = []
    for folder in folders:
        for path in sorted(folder.rglob("*.yaml")) if folder.is_dir() else []:
            try:
                utf8_text(path)
            except ConfigError as bad:
                found.append((bytes(error.object) not in path.read_bytes(), f"{bad}: save it as UTF-8."))
    if found:
        return min(found)[1]
    return f"a config file is not UTF-8 text ({error.reason}: byte 0x{error.object[error.start]:02x}): save it as UTF-8."


def hydra_error_line(message: str) -> str:
    """One of Hydra's own override errors in one line, in evorl's words where they mislead
    (Hydra's ``+group=`` hint; the ``++`` that :func:`~evorl.app.cli_args.allow_new_keys` put before
    a key the user typed plainly)."""
    lines = [line.strip() for line in message.replace("'++", "'").splitlines() if line.strip()]
    first = lines[0] if lines else message
    if first.startswith("Could not override '") and "No match in the defaults list" in first:
        group = first.split("'")[1]
        return (f"{group}= chooses a config group, which only the default config composes (evorl-train "
                f"{group}=... without --config-name); with --config-name set that config's own keys instead "
                f"({group}.<key>=...).")
    if first.startswith("Ambiguous value for argument '"):
        argument = first.split("'")[1]
        key, _, values = argument.partition("=")
        return (f"{argument}: a list is {key}=[{values}] (one agent per value, where the key allows it); a sweep of "
                f"runs is -m {key}={values}; a text with a comma is {key}='{values}'.")
    return " ".join(lines)

"""The one-line messages of ``evorl-train`` for what goes wrong before training starts: a
YAML syntax error, an interpolation that does not resolve, a config group option or config
file that does not exist, a config file that is not UTF-8 (see :mod:`evorl.cli`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evorl.config import ConfigError, to_plain


def plain_config(cfg: Any) -> Any:
    """``cfg`` as plain data, its ``${...}`` interpolations resolved; one that does not resolve
    is a ConfigError naming the key and its value."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        return to_plain(cfg)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None)
        raw = OmegaConf.to_container(cfg, resolve=False)
        for part in (key or "").split("."):
            raw = raw.get(part) if isinstance(raw, dict) else None
        problem = str(getattr(e, "msg", e)).splitlines()[0]
        what = f"'{key}' = {raw!r}" if key else "the config"
        raise ConfigError(f"{what} does not resolve: {problem}. An ${{...}} interpolation names another key "
                          f"of the config (e.g. ${{training.num_envs}}).") from None


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
    in one line: ``algo=ppo2: no such option; valid: a2c, impala, ppo.``"""
    group, _, option = (error.missing_cfg_file or "").rpartition("/")
    if group and error.options is not None:
        return f"{group}={option}: no such option; valid: {', '.join(error.options)}."
    return str(error).splitlines()[0]


def undecodable_config_line(error: UnicodeDecodeError, folders: list[Path]) -> str:
    """A config file that is not UTF-8, named: Hydra's error does not say which file it read, so
    the config ``folders`` in use are searched for it (the one holding the bytes that failed first)."""
    from evorl.run_folder import utf8_text

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

"""``evorl-train --help`` and ``evorl-train --list-envs [TYPE]``.

The help is generated, never written by hand: config names from ``configs/``, algorithms from
``evorl.workflows.WORKFLOWS`` (each module's first docstring line), env types from
``ENV_TYPES``, and each config section's keys with their defaults and the first sentence of
their ``#:`` comments in the typed config dataclasses.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import re
import textwrap
from typing import Any

from evorl.config_groups import GROUPS, config_names, group_options

LIST_ENVS_OPTION = "--list-envs"
WIDTH = 100


def field_comments(cls: type, markup: bool = False) -> dict[str, str]:
    """``{field: comment}`` from the ``#:`` comment lines right above each field of the
    dataclass ``cls`` (joined; RST markup removed unless ``markup``). A comment also covers
    the fields right below its own field (no blank line or comment between): they get
    "See <that field>.". Fields without a comment are absent."""
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):  # a dataclass made at run time (an algorithm's agent section)
        return {}
    comments, pending, group_head = {}, [], None
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#:"):
            pending.append(stripped[2:].strip())
            continue
        match = re.match(r"([A-Za-z_]\w*)\s*:(?!\s*$)", stripped)
        if match and not stripped.startswith(("def ", "class ", "return ")):
            if pending:
                comment = " ".join(pending)
                comments[match.group(1)] = comment if markup else plain(comment)
                group_head = match.group(1)
            elif group_head is not None:
                comments[match.group(1)] = f"See ``{group_head}``." if markup else f"See {group_head}."
        else:
            group_head = None
        pending = []
    return comments


def plain(text: str) -> str:
    """RST markup to plain text: ``code`` -> code, :class:`~a.B` -> B."""
    text = re.sub(r":\w+:`~?([^`]+)`", lambda m: m.group(1).rsplit(".", 1)[-1], text)
    return text.replace("``", "")


def first_sentence(text: str) -> str:
    """Up to the first ``.`` or ``;`` that ends a sentence outside parentheses."""
    depth = 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        ends = i + 1 == len(text) or text[i + 1].isspace()
        if depth == 0 and ch in ".;" and ends and not text[:i + 1].endswith(("e.g.", "i.e.")):
            return text[:i]
    return text


def describe_section(cls: type, indent: str = "    ") -> list[str]:
    """One line per field of the config dataclass ``cls``: ``key = default  description``."""
    comments = field_comments(cls)
    rows = [(f.name, default_text(f)) for f in dataclasses.fields(cls) if f.init]
    width = max(len(f"{name} = {default}") for name, default in rows)
    lines = []
    for name, default in rows:
        head = f"{indent}{name} = {default}".ljust(len(indent) + width) + "  "
        note = first_sentence(comments[name]) if name in comments else ""
        lines.append((head + shorten(note, WIDTH - len(head))).rstrip())
    return lines


def shorten(text: str, width: int) -> str:
    return textwrap.shorten(text, max(width, 20), placeholder=" ...") if text else ""


def default_text(f: dataclasses.Field) -> str:
    """A dataclass field's default as YAML writes it (``null``, ``true``, ``[64, 64]``);
    ``(required)`` when it has none."""
    if f.default is not dataclasses.MISSING:
        return yaml_text(f.default)
    if f.default_factory is not dataclasses.MISSING:
        return yaml_text(f.default_factory())
    return "(required)"


def yaml_text(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(map(yaml_text, value)) + "]"
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def workflow_classes() -> dict[str, type]:
    from evorl.workflows import WORKFLOWS, resolve_workflow_cls

    return {name: resolve_workflow_cls(f"evorl.workflows.{name}") for name in WORKFLOWS}


def algorithm_lines() -> list[str]:
    lines = []
    for name, cls in workflow_classes().items():
        doc = plain((inspect.getmodule(cls).__doc__ or cls.__doc__ or "").strip().splitlines()[0])
        head = f"  evorl.workflows.{name:<15} "
        lines.append(head + shorten(doc, WIDTH - len(head)))
    return lines


def help_text() -> str:
    from evorl.checkpoint import CheckpointConfig
    from evorl.config import DistributedConfig, TrainingConfig
    from evorl.envs.config import ENV_TYPES, EnvConfig
    from evorl.recorders import LoggingConfig
    from evorl.workflows.actor_learner import RunnerConfig
    from evorl.workflows.pbt import PBTConfig

    out = [
        "usage: evorl-train [--config-name=NAME] [algo=ALGO] [env=ENV] [key=value ...] [-m key=a,b ...]",
        "       evorl-train --list-envs [ENV_TYPE]      list the environments of each env type",
        "",
        "Trains an on-policy agent; each run writes its own folder (outputs/<date>/<time>, or",
        "hydra.run.dir=...). Any key below can be set on the command line (training.num_envs=16).",
        "",
        "Default config (config.yaml), composed from config groups:",
        *(f"  {group}=<{'|'.join(group_options(group))}>" for group in GROUPS if group != "tuned"),
        f"  (tuned/<algo>_<env>.yaml applies itself where it exists: {', '.join(group_options('tuned'))})",
        "",
        "Single-file configs (--config-name=NAME):",
        *textwrap.wrap(", ".join(n for n in config_names() if n != "config"), WIDTH,
                       initial_indent="  ", subsequent_indent="  "),
        "",
        "Algorithms (workflow_cls=..., or algo=...):",
        *algorithm_lines(),
        "",
        f"Env types (env.env_type): {', '.join(ENV_TYPES)}; evorl-train --list-envs names their envs.",
        "",
        "Config sections and their keys (key = default, meaning). Configs set some of them: the",
        "default job's values are in `evorl-train --cfg job` (algo: holds its algorithm's).",
        "  seed = 0   PRNG seed, in [0, 2**32)",
        "  env:", *describe_section(EnvConfig),
        "  training:", *describe_section(TrainingConfig),
    ]
    for name, cls in workflow_classes().items():
        keys = ", ".join(f"{f.name}={default_text(f)}" for f in dataclasses.fields(cls.agent_config_cls))
        out += textwrap.wrap(f"agent ({cls.name()}): {keys}", WIDTH, initial_indent="  ", subsequent_indent="    ")
        if cls.training_defaults:  # where the config does not set them
            own = ", ".join(f"{k}={v}" for k, v in cls.training_defaults.items())
            out += textwrap.wrap(f"training ({cls.name()}) defaults: {own}", WIDTH, initial_indent="  ",
                                 subsequent_indent="    ")
    from evorl.algorithms.es import ESConfig
    from evorl.workflows.es import ESTrainingConfig

    out += ["  es (ESWorkflow: evolution strategies; its training: keys are "
            f"{', '.join(f.name for f in dataclasses.fields(ESTrainingConfig))}):", *describe_section(ESConfig)]
    for section, cls in (("checkpoint", CheckpointConfig), ("logging", LoggingConfig),
                         ("distributed", DistributedConfig), ("runner", RunnerConfig), ("pbt", PBTConfig)):
        out += [f"  {section}:", *describe_section(cls)]
    out += ["", "More: README.md (Train, Experiments); Hydra's own help: --hydra-help."]
    return "\n".join(out)


# ----------------------------------------------------------------------------------------
# Environments of each env type
# ----------------------------------------------------------------------------------------
#: The env types that list their envs with a function of their adapter: ``(module, function)``.
SUITE_ENV_NAMES = {
    "playground": ("playground_env", "playground_env_names"),
    "craftax": ("craftax_env", "craftax_env_names"),
    "jumanji": ("jumanji_env", "jumanji_env_names"),
    "xminigrid": ("xminigrid_env", "xminigrid_env_names"),
}


def env_names(env_type: str) -> list[str] | None:
    """The environment names ``env_type`` knows, from its registry; None when its package is
    not installed. gymnasium's registry is listed without importing any env's own package
    (ale-py, mujoco)."""
    if env_type == "gymnax":
        from evorl.deferred_imports import import_gymnax

        return list(import_gymnax().registered_envs)
    if env_type == "brax":
        if importlib.util.find_spec("brax") is None:
            return None
        import contextlib
        import io

        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            envs = importlib.import_module("brax.envs")  # prints its optional backends' import failures
        return sorted(envs._envs)
    if env_type == "gymnasium":
        if importlib.util.find_spec("gymnasium") is None:
            return None
        import gymnasium

        return sorted(gymnasium.envs.registry)
    if env_type in SUITE_ENV_NAMES:
        from evorl.envs.config import ENV_TYPE_PACKAGES

        if importlib.util.find_spec(ENV_TYPE_PACKAGES[env_type][1].split(".")[0]) is None:
            return None
        module_name, function_name = SUITE_ENV_NAMES[env_type]
        return list(getattr(importlib.import_module(f"evorl.envs.{module_name}"), function_name)())
    raise ValueError(env_type)


def listable_env_types() -> tuple[str, ...]:
    """The env types whose environments have a registry to list."""
    from evorl.envs import config

    return tuple(t for t in config.ENV_TYPES if t in ("gymnax", "brax", "gymnasium", *SUITE_ENV_NAMES))


def list_envs_main(args: list[str]) -> int:
    """Prints the env names of each env type (or of the one named); returns the exit status."""
    types = listable_env_types()
    chosen = [a for a in args if not a.startswith("-")][:1] or list(types)
    unknown = [t for t in chosen if t not in types]
    if unknown:
        print(f"evorl: unknown env type {unknown[0]!r}; valid: {', '.join(types)}.", file=_stderr())
        return 2
    for env_type in chosen:
        names = env_names(env_type)
        if names is None:
            print(f"{env_type}: not installed (pip install -e \".[{env_type}]\")")
            continue
        print(f"{env_type} ({len(names)}, env.env_type={env_type} env.env_name=NAME):")
        print("\n".join(textwrap.wrap(", ".join(names), WIDTH, initial_indent="  ", subsequent_indent="  ",
                                     break_on_hyphens=False)))
    return 0


def _stderr() -> Any:
    import sys

    return sys.stderr

"""mkdocs hook: generates ``reference/config.md`` from the typed config dataclasses.

Every key of every config section is listed with its type, its default and its ``#:``
comment in the source, read at build time from the dataclasses ``evorl-train`` validates
against (``EnvConfig``, ``TrainingConfig``, ..., each algorithm's ``agent_config_cls``), so the
page cannot go stale: a new field appears, a removed one disappears, a changed default or
comment changes here. The shipped configs are listed from ``configs/`` with their header
comments. Run ``python docs/gen_config_reference.py`` to print the page.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import typing
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rst_markup import to_markdown  # noqa: E402

PAGE = "reference/config.md"


def field_comments(cls: type) -> dict[str, str]:
    """The ``#:`` comments of the fields of ``cls``, RST markup kept (what ``--help`` shows)."""
    from evorl.app.cli_help import field_comments as comments

    return comments(cls, markup=True)


def type_name(tp: Any) -> str:
    if typing.get_origin(tp) is typing.Annotated:
        return type_name(typing.get_args(tp)[0]) + " or .inf"
    if typing.get_origin(tp) in (typing.Union, __import__("types").UnionType):
        return " or ".join("null" if a is type(None) else type_name(a) for a in typing.get_args(tp))
    if typing.get_origin(tp) is tuple:
        return f"list of {type_name(typing.get_args(tp)[0])}"
    return getattr(tp, "__name__", str(tp).replace("typing.", ""))


def default_cell(f: dataclasses.Field) -> str:
    from evorl.app.cli_help import default_text

    if dataclasses.is_dataclass(f.default):
        return "(section)"
    text = default_text(f)
    return text if text == "(required)" else f"`{text}`"


def cell(text: str) -> str:
    """One table cell: one line; ``|`` and ``<`` escaped outside code spans."""
    parts = to_markdown(text).replace("\n", " ").split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;").replace("|", "\\|") for i, p in enumerate(parts))


def section_table(cls: type, comments: dict[str, str], prefix: str, keys: tuple[str, ...] | None = None) -> list[str]:
    hints = typing.get_type_hints(cls, include_extras=True)
    rows = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for f in dataclasses.fields(cls):
        if not f.init or (keys is not None and f.name not in keys):
            continue
        rows.append(f"| `{prefix}{f.name}` | {type_name(hints[f.name])} | {default_cell(f)} | "
                    f"{cell(comments.get(f.name, ''))} |")
    # md_in_html: the table inside a div whose class keeps keys on one line (stylesheets/extra.css)
    return ['<div class="config-keys" markdown>', "", *rows, "", "</div>"]


def agent_comments(workflow: type) -> dict[str, str]:
    """The comments of an algorithm's agent keys: its network keys (``agent_options_cls``), its
    loss hyperparameters (``hparams_cls``) and its agent class's own fields."""
    comments: dict[str, str] = {}
    agent_cls = inspect.signature(workflow.agent_factory).return_annotation
    module = sys.modules[workflow.agent_factory.__module__]
    if isinstance(agent_cls, str):
        agent_cls = getattr(module, agent_cls)
    for cls in (workflow.agent_options_cls, workflow.hparams_cls, agent_cls):
        if cls is not None:  # hparams_cls None: no loss hyperparameters (ES)
            comments.update(field_comments(cls))
    return comments


def config_header(path: Path) -> str:
    """The leading comment lines of a YAML file (before its first key), as one paragraph."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if not text.startswith("@package"):
            lines.append(text)
    return " ".join(t for t in lines if t)


def page() -> str:
    from evorl.config import CheckpointConfig, DistributedConfig, LoggingConfig, RunnerConfig, TrainingConfig
    from evorl.config.training import OffPolicyTrainingConfig
    from evorl.config.env import ENV_TYPES, EnvConfig
    from evorl.app.config_groups import CONFIG_DIR, GROUPS, config_names, group_options
    from evorl.workflows import WORKFLOWS
    from evorl.engine.rl_base import TOP_LEVEL_KEYS, ExperimentConfig, resolve_workflow_cls

    out = [
        "# Config reference",
        "",
        "Generated when the site is built, from the typed config dataclasses that `evorl-train` "
        "and `build_from_config` validate against (`docs/gen_config_reference.py`): every key, "
        "its type, its default and the comment above it in the source. A config file or the "
        "command line sets any of them (`training.num_envs=16`); the shipped configs set some "
        "(their values: `evorl-train --cfg job`). An unknown key, a wrong type or a value out "
        "of range is an error before anything is compiled.",
        "",
        "## Top level",
        "",
        *section_table(ExperimentConfig, field_comments(ExperimentConfig) | {
            "workflow_cls": "The algorithm: " + ", ".join(f"`evorl.workflows.{w}`" for w in WORKFLOWS)
                            + ", or your own subclass (`module.Class`). On the default config, `algo=...`.",
            "seed": "PRNG seed, in `[0, 2**32)`.",
            "env": "See [`env`](#env).", "agent": "See [`agent`](#agent).",
            "training": "See [`training`](#training).",
            "distributed": "See [`distributed`](#distributed).", "checkpoint": "See [`checkpoint`](#checkpoint).",
            "logging": "See [`logging`](#logging).", "runner": "See [`runner`](#runner).",
        }, "", TOP_LEVEL_KEYS),
        "",
        "## env",
        "",
        f"`EnvConfig`. `env_type` is one of {', '.join(f'`{t}`' for t in ENV_TYPES)}; "
        "`evorl-train --list-envs` lists the env names of each.",
        "",
        *section_table(EnvConfig, field_comments(EnvConfig), "env."),
        "",
        "## training",
        "",
        to_markdown(inspect.getdoc(TrainingConfig) or ""),
        "",
        *section_table(TrainingConfig, field_comments(TrainingConfig), "training."),
        "",
        "### training (off-policy)",
        "",
        "DQN, DDPG, TD3 and SAC read this `training:` section instead of the one above. "
        + to_markdown(inspect.getdoc(OffPolicyTrainingConfig) or "").replace("\n", " "),
        "",
        *section_table(OffPolicyTrainingConfig, field_comments(OffPolicyTrainingConfig), "training."),
        "",
        "## agent",
        "",
        "The `agent:` section is the algorithm's: exactly the keyword arguments of its agent "
        "factory after the network keys every factory shares (`evorl.rl.actor_critic.ActorCriticOptions`). "
        "A key of another algorithm is an error naming the algorithm that has it.",
        "",
    ]
    for name in WORKFLOWS:
        workflow = resolve_workflow_cls(f"evorl.workflows.{name}")
        factory = workflow.agent_factory
        out += [f"### {workflow.name()}", "",
                f"`workflow_cls: evorl.workflows.{name}`, factory `{factory.__module__}.{factory.__name__}`. "
                + "Loss hyperparameters taken from `training` (the same name in its hyperparameters): "
                + (", ".join(f"`training.{k}`" for k in workflow.training_hparams) or "none") + "."
                + (" Its own training defaults (where the config does not set them): "
                   + ", ".join(f"`training.{k}: {v}`" for k, v in workflow.training_defaults.items()) + "."
                   if workflow.training_defaults else ""),
                "",
                *section_table(workflow.agent_config_cls, agent_comments(workflow), "agent."), ""]
    for section, cls in (("checkpoint", CheckpointConfig), ("logging", LoggingConfig),
                         ("distributed", DistributedConfig), ("runner", RunnerConfig)):
        doc = inspect.getdoc(cls) or ""
        out += [f"## {section}", "", f"`{cls.__name__}`. " + to_markdown(doc).replace("\n", " "), "",
                *section_table(cls, field_comments(cls), f"{section}."), ""]
    out += ["## Shipped configs", "",
            "The default config, `config.yaml`, is composed from the config groups "
            + ", ".join(f"`{g}/`" for g in GROUPS) + " (see the [CLI tutorial](../tutorials/cli.md)). "
            "The header comment of each file:", "",
            "| group | option | header |", "| --- | --- | --- |"]
    for group in GROUPS:
        for option in group_options(group):
            out.append(f"| `{group}` | `{option}` | {cell(config_header(CONFIG_DIR / group / f'{option}.yaml'))} |")
    out += ["", "Single-file configs (`--config-name=NAME`):", "", "| name | header |", "| --- | --- |"]
    for name in config_names():
        out.append(f"| `{name}` | {cell(config_header(CONFIG_DIR / f'{name}.yaml')) or '(no header comment)'} |")
    return "\n".join(out) + "\n"


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=page()))
    return files


if __name__ == "__main__":
    print(page())

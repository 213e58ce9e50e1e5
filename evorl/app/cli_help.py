"""``evorl-train --help`` and ``evorl-train --list-envs [TYPE]``.

The help is generated, never written by hand: config names from ``configs/``, algorithms from
``evorl.workflows.WORKFLOWS`` (each module's first docstring sentence), env types from
``ENV_TYPES``, and each config section's keys with their values in the default job (the
composed ``config.yaml``: its ``algo`` and ``env`` groups, what ``evorl-train`` with no
arguments trains) and the whole first sentence of their ``#:`` comments in the typed config
dataclasses.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import textwrap
from typing import Any

from evorl.app.config_groups import GROUPS, config_names, group_options

LIST_ENVS_OPTION = "--list-envs"
WIDTH = 100


def field_comments(cls: type, markup: bool = False) -> dict[str, str]:
    """``{field: comment}`` from the ``#:`` comment lines right above each field of the
    dataclass ``cls`` or of its base classes (the nearest one's comment wins; joined; RST
    markup removed unless ``markup``). A comment also covers the fields right below its own
    field (no blank line or comment between): they get "See <that field>.". Fields without a
    comment are absent."""
    comments: dict[str, str] = {}
    for klass in reversed(cls.__mro__[:-1]):  # the bases first, then what a subclass says
        comments.update(own_field_comments(klass, markup))
    return comments


def own_field_comments(cls: type, markup: bool) -> dict[str, str]:
    """:func:`field_comments` of the fields written in ``cls``'s own source."""
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
    """RST markup to plain text: ``code`` -> code, :class:`~a.B` -> B, :mod:`a.b` -> a.b."""
    text = re.sub(r":mod:`~?([^`]+)`", r"\1", text)
    text = re.sub(r":\w+:`~?([^`]+)`", lambda m: m.group(1).rsplit(".", 1)[-1], text)
    return text.replace("``", "")


def first_sentence(text: str) -> str:
    """Up to the first ``.`` that ends a sentence outside parentheses (a ``;`` does not: the
    parts after it often say what the first leaves out, as ``runner.mode``'s ``auto``)."""
    depth = 0
    for i, ch in enumerate(text):  # brackets of either kind: half-open intervals, [0, n)
        depth = max(0, depth + (ch in "([") - (ch in ")]"))
        ends = i + 1 == len(text) or text[i + 1].isspace()
        if depth == 0 and ch == "." and ends and not text[:i + 1].endswith(("e.g.", "i.e.")):
            return text[:i]
    return text


def describe_section(cls: type, values: Any = None, indent: str = "    ") -> list[str]:
    """Lines per field of the config dataclass ``cls``: ``key = value  description`` with the
    value ``values`` (an instance of ``cls``) holds, else the field's default; the description,
    the whole first sentence of the field's comment, wraps under itself."""
    comments = field_comments(cls)
    rows = [(f.name, yaml_text(getattr(values, f.name)) if values is not None else default_text(f))
            for f in dataclasses.fields(cls) if f.init]
    width = max(len(f"{name} = {value}") for name, value in rows)
    lines = []
    for name, value in rows:
        head = f"{indent}{name} = {value}".ljust(len(indent) + width) + "  "
        lines += hanging(head, first_sentence(comments[name]) if name in comments else "")
    return lines


def hanging(head: str, text: str) -> list[str]:
    """``head`` then ``text`` wrapped to :data:`WIDTH`, its later lines indented under its first."""
    wrapped = textwrap.wrap(text, max(WIDTH - len(head), 40), break_on_hyphens=False) or [""]
    return [(head + wrapped[0]).rstrip(), *(" " * len(head) + line for line in wrapped[1:])]


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


def default_jobs() -> dict[str, Any]:
    """``{algo option: its parsed config}``: what ``evorl-train algo=<option>`` trains (the
    composed ``config.yaml`` with that option and the default env), every key filled in. The
    first is the default job's own option."""
    from evorl.app.config_groups import default_choices, default_config, group_options, select_algorithm
    from evorl.workflows import resolve_workflow_cls

    options = group_options("algo")
    first = default_choices()["algo"]
    jobs = {}
    for option in [first, *(o for o in options if o != first)]:
        cfg, _ = select_algorithm(default_config(option))
        jobs[option] = resolve_workflow_cls(cfg["workflow_cls"]).parse_config(cfg)
    return jobs


def algorithm_description(cls: type, shares_module: bool) -> str:
    """The first sentence that describes the workflow ``cls``: its module's docstring's, unless
    the module holds other workflows too (TD3 and DDPG, IPPO and MAPPO), where each class's own
    docstring says what sets it apart."""
    sources = (cls.__doc__, inspect.getmodule(cls).__doc__) if shares_module else \
        (inspect.getmodule(cls).__doc__, cls.__doc__)
    doc = next((d for d in sources if d and d.strip()), "").strip().split("\n\n")[0]
    return first_sentence(plain(" ".join(doc.split()))) + "."


def algorithm_lines() -> list[str]:
    classes = workflow_classes()
    modules = [cls.__module__ for cls in classes.values()]
    width = max(map(len, classes))
    return [line for name, cls in classes.items()
            for line in hanging(f"  evorl.workflows.{name:<{width}} ",
                                algorithm_description(cls, modules.count(cls.__module__) > 1))]


def agent_and_training_lines(jobs: dict, default_algo: str, job: Any) -> list[str]:
    """Each ``algo=`` option's agent keys, and its training keys where they differ from the
    default ``job``'s."""
    from evorl.workflows import resolve_workflow_cls

    out = []
    for option, config in jobs.items():
        cls = resolve_workflow_cls(config.workflow_cls)
        keys = ", ".join(f"{f.name}={yaml_text(getattr(config.agent, f.name))}"
                         for f in dataclasses.fields(cls.agent_config_cls))
        where = "the default job" if option == default_algo else f"algo={option}"
        out += textwrap.wrap(f"agent ({cls.name()}, {where}): {keys}", WIDTH, initial_indent="  ",
                             subsequent_indent="    ")
        changed = [f"{f.name}={yaml_text(getattr(config.training, f.name))}" for f in dataclasses.fields(config.training)
                   if getattr(config.training, f.name) != getattr(job.training, f.name, None)]  # DQN: its own keys
        if changed:
            out += textwrap.wrap(f"training ({cls.name()}, algo={option}) where it differs: {', '.join(changed)}",
                                 WIDTH, initial_indent="  ", subsequent_indent="    ")
    return out


def es_lines() -> list[str]:
    """The ES workflow's agent keys, its ``es:`` section and its training keys."""
    from evorl.algorithms.es import ESConfig, ESPolicyOptions
    from evorl.algorithms.es_workflow import ESTrainingConfig

    keys = ", ".join(f"{f.name}={default_text(f)}" for f in dataclasses.fields(ESPolicyOptions))
    out = textwrap.wrap(f"agent (ES): {keys}", WIDTH, initial_indent="  ", subsequent_indent="    ")
    out += ["  es (ESWorkflow: evolution strategies, workflow_cls=evorl.workflows.ESWorkflow; its training: keys",
            f"    are {', '.join(f.name for f in dataclasses.fields(ESTrainingConfig))}):", *describe_section(ESConfig)]
    return out


def help_text() -> str:
    """``evorl-train --help``: usage, config groups, algorithms, env types and every config key."""
    from evorl.config import CheckpointConfig, DistributedConfig, LoggingConfig, PBTConfig, RunnerConfig, TrainingConfig
    from evorl.config.env import ENV_TYPES, EnvConfig
    from evorl.app.config_groups import default_choices

    jobs = default_jobs()
    default_algo, job = next(iter(jobs.items()))
    choices = " ".join(f"{group}={option}" for group, option in default_choices().items())

    out = [
        "usage: evorl-train [--config-name=NAME] [algo=ALGO] [env=ENV] [key=value ...] [-m key=a,b ...]",
        "       evorl-train --list-envs [ENV_TYPE]      list the environments of each env type",
        "",
        "Trains an agent; each run writes its own folder (outputs/<date>/<time>, or",
        "hydra.run.dir=...). Any key below can be set on the command line (training.num_envs=16).",
        "",
        "Default config (config.yaml), composed from config groups:",
        *(f"  {group}=<{'|'.join(group_options(group))}>" for group in GROUPS if group != "tuned"),
        *textwrap.wrap(f"(tuned/<algo>_<env>.yaml applies itself where it exists: {', '.join(group_options('tuned'))})",
                       WIDTH, initial_indent="  ", subsequent_indent="   "),
        "",
        "Single-file configs (--config-name=NAME):",
        *textwrap.wrap(", ".join(n for n in config_names() if n != "config"), WIDTH,
                       initial_indent="  ", subsequent_indent="  "),
        "",
        "Algorithms (workflow_cls=..., or algo=...):",
        *algorithm_lines(),
        "",
        *textwrap.wrap(f"Env types (env.env_type): {', '.join(ENV_TYPES)}; evorl-train --list-envs lists what "
                       f"trains in each.", WIDTH),
        "",
        *textwrap.wrap(f"Config sections and their keys: key = its value in the default job (config.yaml: "
                       f"{choices}), then what it means. Another algo= or a single-file config sets some keys "
                       f"otherwise; `evorl-train [overrides] --cfg job` prints a job's whole config.", WIDTH),
        f"  seed = {job.seed}   PRNG seed, in [0, 2**32)",
        "  env:", *describe_section(EnvConfig, job.env),
        "  training:", *describe_section(TrainingConfig, job.training),
    ]
    out += agent_and_training_lines(jobs, default_algo, job)
    out += es_lines()
    for section, cls in (("checkpoint", CheckpointConfig), ("logging", LoggingConfig),
                         ("distributed", DistributedConfig), ("runner", RunnerConfig), ("pbt", PBTConfig)):
        out += [f"  {section}:", *describe_section(cls, getattr(job, section))]
    out += ["", "More: the docs (docs/tutorials/cli.md, experiments.md); Hydra's own help: --hydra-help."]
    return "\n".join(out)


# ----------------------------------------------------------------------------------------
# Environments of each env type (evorl.app.env_catalog)
# ----------------------------------------------------------------------------------------
def env_names(env_type: str) -> list[str] | None:
    """The environment names of ``env_type`` that train (every group of its listing); None
    when its package is not installed."""
    from evorl.app.env_catalog import LISTINGS

    listing = LISTINGS[env_type]()
    return None if listing.missing else listing.names


def listable_env_types() -> tuple[str, ...]:
    """The env types whose environments have a registry to list."""
    from evorl.app.env_catalog import LISTINGS
    from evorl.config.env import ENV_TYPES

    return tuple(t for t in ENV_TYPES if t in LISTINGS)


def names_lines(names: list[str], indent: str) -> list[str]:
    return textwrap.wrap(", ".join(names), WIDTH, initial_indent=indent, subsequent_indent=indent,
                         break_on_hyphens=False)


def listing_lines(listing: Any) -> list[str]:
    """``--list-envs``' lines of one env type (an :class:`~evorl.app.env_catalog.EnvListing`)."""
    env_type = listing.env_type
    if listing.missing:
        return [f"{env_type}: not installed ({listing.missing})"]

    def head(group) -> str:
        needs = [group.install] if group.install else []
        needs += [] if group.installed else ["not installed"]
        return f"{len(group.names)}{''.join(', ' + n for n in needs)}"

    use = f"{listing.install}; " if listing.install else ""
    use += f"env.env_type={env_type} env.env_name=NAME"
    if len(listing.groups) == 1:  # the env type's own names, then what is left out
        [group] = listing.groups
        lines = [f"{env_type} ({head(group)}; {use}):", *names_lines(group.names, "  ")]
        lines += textwrap.wrap(group.note, WIDTH, initial_indent="  ", subsequent_indent="  ") if group.note else []
    else:
        lines = [f"{env_type} ({use}):"]
        for group in listing.groups:
            lines += [f"  {group.title} ({head(group)}):", *names_lines(group.names, "    ")]
            lines += textwrap.wrap(group.note, WIDTH, initial_indent="    ", subsequent_indent="    ") \
                if group.note else []
    if env_type == "gymnasium":
        lines.append("  your own: env.env_name=my_module:MyEnv-v0 (my_module registers MyEnv-v0 with gymnasium)")
    for names, why in listing.left_out:
        lines += textwrap.wrap(f"left out, {why}: {', '.join(names)}", WIDTH, initial_indent="  ",
                               subsequent_indent="    ", break_on_hyphens=False)
    return lines


def list_envs_main(args: list[str]) -> int:
    """Prints what trains in each env type (or in the one named); returns the exit status."""
    from evorl.app.env_catalog import LISTINGS

    types = listable_env_types()
    chosen = [a for a in args if not a.startswith("-")][:1] or list(types)
    unknown = [t for t in chosen if t not in types]
    if unknown:
        print(f"evorl: unknown env type {unknown[0]!r}; valid: {', '.join(types)}.", file=_stderr())
        return 2
    for env_type in chosen:
        print("\n".join(listing_lines(LISTINGS[env_type]())), flush=True)
    return 0


def _stderr() -> Any:
    import sys

    return sys.stderr

"""The composable configs of ``evorl-train``: the config groups ``algo/``, ``env/``, ``tuned/``.

``configs/config.yaml`` composes, in this order: itself (``seed``, ``checkpoint``,
``logging``); ``algo/<name>``, an algorithm's ``workflow_cls`` and its agent and training
defaults; ``env/<name>``, the ``env`` section and what every algorithm needs for that
environment (``env.reward_scale``, ``agent.normalize_obs``, ``training.gamma``); and
``tuned/<algo>_<env>`` where that file exists, the algorithm's tuning for the environment.
``evorl-train algo=a2c env=acrobot`` picks them; keys typed on the command line override all.

**Whose key is it.** An algorithm's defaults are composed under their own node, ``algo:``
(``algo/*.yaml`` are in the group's own package, ``tuned/*.yaml`` in package ``algo``), never
into the top-level ``agent:`` and ``training:`` sections, which hold only what the user typed,
an env preset, or a single-file config (``--config-name=ppo_cartpole``, which has no ``algo:``
node). :func:`select_algorithm` resolves the node before validation:

* the workflow is the top-level ``workflow_cls`` if one was given, else ``algo.workflow_cls``;
* if the node's workflow is that class or a base class of it (a subclass such as
  ``examples/custom_network.py``'s ``ResidualPPOWorkflow`` keeps its base's keys), the node's
  ``agent`` and ``training`` go *under* the top-level sections (the top level wins);
* otherwise the whole node is left out with one note: ``workflow_cls=...A2CWorkflow`` alone on
  the default config drops PPO's defaults instead of failing on them.

Every key of the top-level sections is then validated strictly: a typo is still an error
naming the closest key, and an agent key that belongs to another algorithm is an error naming
the fix (:func:`check_agent_keys`).

:func:`default_config` composes the same files without Hydra, for ``run_experiment`` from
Python (a test checks it against Hydra's own composition).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evorl.config.groups import (  # noqa: F401  (importable from here too)
    ALGO_NODE, ALGO_SECTIONS, check_algo_node, check_group_option, refuse_agent_key_of_others, unknown_option_text,
)
from evorl.config.parsing import section_data
from evorl.config.training import run_length_under

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
#: The config groups, each a folder of ``configs/``.
GROUPS = ("algo", "env", "tuned")


def config_names() -> list[str]:
    """The names ``--config-name`` accepts: the YAML files at the top of ``configs/``."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def group_options(group: str) -> list[str]:
    """The options of a config group (``algo`` -> ``["a2c", "impala", "ppo"]``)."""
    if group not in GROUPS:
        raise ValueError(f"unknown config group {group!r}; groups: {', '.join(GROUPS)}")
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))


@functools.cache
def _load_yaml(path: Path) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(path))


def load_group_option(group: str, option: str) -> dict:
    """The content of ``configs/<group>/<option>.yaml`` (a fresh copy)."""
    import copy

    path = CONFIG_DIR / group / f"{option}.yaml"
    check_group_option(group, option, path.is_file(), group_options)
    return copy.deepcopy(_load_yaml(path))


def default_choices() -> dict[str, str]:
    """The group choices of ``config.yaml``'s defaults list, e.g. ``{"algo": "ppo", "env": "cartpole"}``."""
    entries = _load_yaml(CONFIG_DIR / "config.yaml").get("defaults", [])
    return {key: value for entry in entries if isinstance(entry, Mapping)
            for key, value in entry.items() if key in GROUPS}


def deep_merge(base: Any, top: Any) -> Any:
    """``top`` over ``base``: mappings merge key by key, anything else in ``top`` replaces
    ``base`` (lists included). ``top`` None keeps ``base`` only where ``base`` is a mapping
    (an empty section)."""
    if isinstance(base, Mapping) and top is None:
        return dict(base)
    if not (isinstance(base, Mapping) and isinstance(top, Mapping)):
        return top
    merged = dict(base)
    for key, value in top.items():
        merged[key] = deep_merge(base[key], value) if key in base else value
    return merged


def default_config(algo: str | None, env: str | None = None) -> dict:
    """The default config composed as Hydra composes it (``_self_``, ``algo``, ``env``,
    optional ``tuned``), with the algorithm ``algo`` (None: no ``algo:`` node) and the env
    option ``env`` (None: the default, ``cartpole``). The ``algo:`` node is kept."""
    import copy

    cfg = copy.deepcopy(_load_yaml(CONFIG_DIR / "config.yaml"))
    cfg.pop("defaults", None)
    env = env or default_choices()["env"]
    if algo is not None:
        cfg[ALGO_NODE] = load_group_option("algo", algo)
    cfg = deep_merge(cfg, load_group_option("env", env))
    if algo is not None and (CONFIG_DIR / "tuned" / f"{algo}_{env}.yaml").is_file():
        cfg[ALGO_NODE] = deep_merge(cfg[ALGO_NODE], load_group_option("tuned", f"{algo}_{env}"))
    return cfg


def untuned_note(choices: Mapping[str, str]) -> str | None:
    """One line for an ``algo=`` x ``env=`` choice with no measured target: an env other than
    the default one and no ``tuned/<algo>_<env>.yaml`` (the algorithm trains it with its
    ``algo/<algo>.yaml`` defaults, which may not learn it). None for the combinations with a target."""
    defaults = default_choices()
    algo, env = choices.get("algo", defaults["algo"]), choices.get("env", defaults["env"])
    if env == defaults["env"] or (CONFIG_DIR / "tuned" / f"{algo}_{env}.yaml").is_file():
        return None
    tuned = sorted(p.stem for p in (CONFIG_DIR / "tuned").glob("*.yaml"))
    with_env = [t.split("_", 1)[0] for t in tuned if t.split("_", 1)[1] == env]
    hint = f"algo={' or algo='.join(with_env)} has one for env={env}" if with_env else f"no algorithm has one for env={env}"
    return (f"note: algo={algo} env={env} has no tuned preset (configs/tuned/{algo}_{env}.yaml) and no measured "
            f"target: {algo} trains it with the defaults of configs/algo/{algo}.yaml, which may not learn it ({hint}).")


def algo_for_workflow(workflow_cls: str | type) -> str | None:
    """The ``algo`` option whose workflow is ``workflow_cls`` or its nearest base class; None
    for a workflow no option covers."""
    from evorl.workflows import resolve_workflow_cls

    cls = resolve_workflow_cls(workflow_cls)
    matches = {}
    for option in group_options("algo"):
        algo_cls = resolve_workflow_cls(load_group_option("algo", option)["workflow_cls"])
        if issubclass(cls, algo_cls):
            matches[option] = cls.__mro__.index(algo_cls)
    return min(matches, key=matches.get) if matches else None


def with_default_config(cfg: dict) -> dict:
    """``cfg`` over the default config of its algorithm (``workflow_cls``; none given: the
    default config's): what ``evorl-train`` with ``cfg``'s keys as overrides would train."""
    workflow_cls = cfg.get("workflow_cls")
    algo = default_choices()["algo"] if workflow_cls is None else algo_for_workflow(workflow_cls)
    base = default_config(algo)
    for key, value in cfg.items():  # the merge would take a null section for an empty one
        if value is None and isinstance(base.get(key), Mapping):
            section_data(value, str(key))
    return deep_merge(base, cfg)


def select_algorithm(cfg: dict) -> tuple[dict, str | None]:
    """Resolves the ``algo:`` node of a composed config (see the module docstring). Returns
    the config without the node, and a note when the node's defaults were left out."""
    if ALGO_NODE not in cfg:
        return cfg, None
    from evorl.workflows import resolve_workflow_cls

    cfg = dict(cfg)
    node = cfg.pop(ALGO_NODE)
    check_algo_node(node, lambda: group_options("algo"))
    algo_workflow = node["workflow_cls"]
    chosen = cfg.setdefault("workflow_cls", algo_workflow)
    if chosen != algo_workflow and not issubclass(resolve_workflow_cls(chosen), resolve_workflow_cls(algo_workflow)):
        left_out = [f"{section}.{key}" for section in ALGO_SECTIONS for key in (node.get(section) or {})]
        algo = algo_for_workflow(chosen)
        hint = f"; algo={algo} gives {resolve_workflow_cls(chosen).name()}'s own" if algo else ""
        return cfg, (f"workflow_cls={chosen} is not {resolve_workflow_cls(algo_workflow).name()}: leaving out the "
                     f"algorithm defaults of the config ({', '.join(left_out) or 'none'}){hint}.")
    for section in ALGO_SECTIONS:
        if section in node:
            top = section_data(cfg.get(section, {}), section)
            defaults = run_length_under(node[section] or {}, top) if section == "training" else node[section]
            cfg[section] = deep_merge(defaults, top)
    return cfg, None


def check_agent_keys(workflow_cls: str | type, agent: Any) -> None:
    """An ``agent`` key the workflow's agent does not take, but another algorithm's does, is
    an error naming that algorithm and how to switch to it (other unknown keys are left to the
    config's own validation, which names the closest key)."""
    from evorl.workflows import WORKFLOWS, resolve_workflow_cls

    if not isinstance(agent, Mapping):
        return
    cls = resolve_workflow_cls(workflow_cls)
    valid = [f.name for f in _fields(cls.agent_config_cls)]
    for key in agent:
        if key in valid:
            continue
        owners = [name for name in WORKFLOWS
                  if key in {f.name for f in _fields(resolve_workflow_cls(f"evorl.workflows.{name}").agent_config_cls)}]
        if not owners:
            continue
        owner = resolve_workflow_cls(f"evorl.workflows.{owners[0]}")
        algo = algo_for_workflow(owner)
        fix = f"algo={algo}" if algo else f"workflow_cls=evorl.workflows.{owners[0]}"
        example = f"{algo}_cartpole" if algo and (CONFIG_DIR / f"{algo}_cartpole.yaml").is_file() else None
        refuse_agent_key_of_others(key, valid, [resolve_workflow_cls(f"evorl.workflows.{o}").name() for o in owners],
                                   cls.name(), owner.name(), fix, example)


def _fields(cls: type) -> tuple:
    import dataclasses

    return dataclasses.fields(cls)

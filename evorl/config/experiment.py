"""The top-level keys of an experiment config (``workflow_cls``, ``seed``, ``output_dir``,
``resume``) and the rules that read the raw mapping before its sections are parsed: unknown and
renamed keys, and agent keys another section sets."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from evorl.config.errors import ConfigError, unknown_key_error

TOP_LEVEL_KEYS = ("workflow_cls", "seed", "env", "agent", "training", "distributed", "checkpoint", "logging",
                  "runner", "pbt", "output_dir", "resume")
#: Keys that were renamed: the old name gets an error naming the new one.
RENAMED_KEYS = {"agent.normalize_advantages": "agent.normalize_gae"}
#: ``seed`` becomes a PRNG key (``jax.random.PRNGKey``), which takes a 32-bit seed.
SEED_LIMIT = 2**32


def parse_seed(value: Any) -> int:
    """The ``seed`` key: an integer (Python or NumPy) in ``[0, 2**32)``. A float is refused,
    even a whole one (``seed=1e3``): a seed is an exact bit pattern, not a measurement."""
    if isinstance(value, np.integer):
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        whole = isinstance(value, (float, np.floating)) and float(value).is_integer()
        fix = f" (it is a float: write seed={int(value)})" if whole else ""
        raise ConfigError(f"'seed' = {value!r} must be an integer in [0, 2**32){fix}.")
    if not 0 <= value < SEED_LIMIT:
        raise ConfigError(f"'seed' = {value} must be in [0, 2**32) (it becomes a 32-bit PRNG key).")
    return value


def check_top_level_keys(cfg: Mapping) -> None:
    for key in cfg:
        if key not in TOP_LEVEL_KEYS:
            raise unknown_key_error(str(key), list(TOP_LEVEL_KEYS), "")


def import_workflow_cls(name: str, known: list[str]) -> Any:
    """The object ``module.attr`` names; one that cannot be imported is an error listing ``known``."""
    module_name, _, attr = name.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as e:
        raise ConfigError(f"workflow_cls {name!r} cannot be imported ({e}). {_known(known)}") from None


def check_workflow_cls(name: Any, is_workflow: bool, is_algorithm: bool, known: list[str]) -> None:
    """``workflow_cls`` names a Workflow subclass that is an algorithm (concrete, with its agent)."""
    if not is_workflow:
        raise ConfigError(f"workflow_cls {name!r} is not a Workflow subclass. {_known(known)}")
    if not is_algorithm:
        raise ConfigError(f"workflow_cls {name!r} is an abstract base class, not an algorithm that can "
                          f"be trained. {_known(known)}")


def _known(known: list[str]) -> str:
    return "Known workflows: " + ", ".join(known) + "."


def check_workflow_builds(workflow_cls: Any, named: str, same: bool, building: str) -> None:
    """The workflow a config names is the one building it (``same``)."""
    if not same:
        raise ConfigError(
            f"workflow_cls {workflow_cls!r} names {named}, but the config is being "
            f"built by {building}; use {named}.build_from_config."
        )


def check_run_folder_keys(cfg: Mapping) -> None:
    """``output_dir`` and ``resume``: a folder path, or null."""
    for key in ("output_dir", "resume"):
        value = cfg.get(key)
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"'{key}' = {value!r} must be a folder path or null.")
        if isinstance(value, str) and not value.strip():
            raise ConfigError(f"'{key}' = {value!r}: {key} must be a run folder path (or null), not empty.")


def check_agent_keys(cfg: Mapping, set_elsewhere: dict[str, str], name: str) -> None:
    """A renamed key names its new name; an agent factory's keyword that another section sets
    (``set_elsewhere``: ``{"gamma": "training.gamma"}``) names that key."""
    for old, new in RENAMED_KEYS.items():
        section, key = old.split(".")
        if isinstance(cfg.get(section), Mapping) and key in cfg[section]:
            raise ConfigError(f"'{old}' was renamed '{new}'.")
    agent_section = cfg.get("agent")
    for key, home in set_elsewhere.items():
        if isinstance(agent_section, Mapping) and key in agent_section:
            raise ConfigError(f"'agent.{key}' is not an agent key of {name}: set '{home}'.")


def check_experiment_mapping(cfg: Any) -> None:
    """A whole experiment config (as plain data) is a mapping."""
    if not isinstance(cfg, dict):
        raise ConfigError(f"config must be a mapping, got {type(cfg).__name__}.")


def check_names_workflow(cfg: Mapping) -> None:
    """A config run from the app names its algorithm (the Python API's ``build_from_config`` knows it)."""
    if "workflow_cls" not in cfg:
        raise ConfigError("config needs 'workflow_cls' (e.g. evorl.workflows.PPOWorkflow).")


def check_resume_length(resume: str, num_iterations: int, newest: int) -> None:
    """A resumed run's ``training.num_iterations`` goes past its newest checkpoint (iteration ``newest``)."""
    if num_iterations < newest:
        raise ConfigError(
            f"resume={resume}: training.num_iterations={num_iterations} is below the "
            f"iteration of its newest checkpoint, iteration {newest}: nothing would be trained, and nothing "
            f"was changed. Pass a training.num_iterations above {newest} to train it further.")


def check_resume_value(resume: Any) -> None:
    """``resume=true``: Hydra reads the word as a boolean; resume takes a folder."""
    if isinstance(resume, bool):
        raise ConfigError(f"resume={str(resume).lower()}: resume takes the run folder to continue (resume=<its path>), "
                          f"not true or false.")


def resume_elsewhere(run_dir: str, setting: str) -> str:
    """The error for a folder given beside ``resume=<run_dir>``."""
    return (f"resume={run_dir} continues in that run's own folder: {setting} does not apply (to continue "
            f"elsewhere, copy the folder and resume the copy).")


def check_resume_folder(run_dir: str, same_folder: bool, setting: str) -> None:
    """A run resumes in its own folder: ``setting`` (another folder given beside it) must name it too."""
    if not same_folder:
        raise ConfigError(resume_elsewhere(run_dir, setting))


def check_resume_override(run_dir: str, key: str, value: Any) -> None:
    """An override given beside ``resume=<run_dir>`` names no other folder."""
    if key == "output_dir":
        raise ConfigError(resume_elsewhere(run_dir, f"output_dir={value}"))


def check_resume_override_kind(deletes_or_sweeps: bool, input_line: str) -> None:
    """An override given beside ``resume=`` sets a value: it deletes no key and sweeps none."""
    if deletes_or_sweeps:
        raise ConfigError(f"resume does not support the override {input_line!r}.")


#: What a run is: a resumed run keeps them, so a command that names others (``--config-name``)
#: asked for another run.
IDENTITY_KEYS = ("workflow_cls", "env.env_name", "env.env_type")


def check_resume_identity(composed: dict, resumed: dict) -> dict:
    """``resumed`` (the run's own config, ``resume`` set), if the config this command composed from
    its ``--config-name`` (and overrides) names the same algorithm and env; otherwise the command
    asked for another run than the one it resumes: a ConfigError naming the difference."""
    def get(cfg: Any, dotted: str) -> Any:
        for part in dotted.split("."):
            cfg = cfg.get(part) if isinstance(cfg, dict) else None
        return cfg

    differ = [f"{key}={get(composed, key)!r} (the run's: {get(resumed, key)!r})" for key in IDENTITY_KEYS
              if get(composed, key) != get(resumed, key)]
    if differ:
        raise ConfigError(f"resume={resumed['resume']} continues that run's own config.yaml, but this command's config "
                          f"names another run: {', '.join(differ)}. Drop --config-name and those overrides to resume "
                          f"it, or leave out resume= to start the other run.")
    return resumed

"""Typed, validated configuration: each config section's dataclass beside its checks.

* :mod:`~evorl.config.errors`: :class:`ConfigError` and ``require``, the bottom of the import
  graph;
* :mod:`~evorl.config.parsing`: a mapping to a section's dataclass (:func:`parse_section`,
  :func:`coerce`, :data:`FloatOrInf`, int32 bounds), and an agent factory's signature as its
  ``agent:`` section (:func:`dataclass_from_signature`);
* :mod:`~evorl.config.sweeps`: a list where a float is expected trains one agent per value;
* the sections: :mod:`~evorl.config.training`, :mod:`~evorl.config.env` (with
  :mod:`~evorl.config.atari`, the Atari preprocessing keys), :mod:`~evorl.config.distributed`,
  :mod:`~evorl.config.runner`, :mod:`~evorl.config.pbt`, :mod:`~evorl.config.checkpoint`,
  :mod:`~evorl.config.logging`, ES's :mod:`~evorl.config.es`, NSGA-II's
  :mod:`~evorl.config.nsga2` and the evolution-guided algorithms' :mod:`~evorl.config.population`;
* the rules that read more than one section, or a fact of the built env or agent, as functions
  of plain values that the build path calls: :mod:`~evorl.config.experiment` (the top-level
  keys, resume), :mod:`~evorl.config.runs` (sections against each other, devices, the env),
  :mod:`~evorl.config.hparams` (each algorithm's loss hyperparameters),
  :mod:`~evorl.config.agents` (an agent factory's keywords against the env's spaces),
  :mod:`~evorl.config.groups` (the config groups); the layers below trust what passed;
* :mod:`~evorl.app.config_groups`: the config groups ``algo/``, ``env/``, ``tuned/`` and how an
  algorithm's defaults are selected (it resolves workflows, so it is not imported here).
"""

from evorl.config.checkpoint import CheckpointConfig
from evorl.config.distributed import DistributedConfig
from evorl.config.env import EnvConfig
from evorl.config.errors import ConfigError, install_hint, require, unknown_key_error
from evorl.config.logging import LoggingConfig
from evorl.config.parsing import (
    FloatOrInf, INT32_MAX, coerce, config_mapping, dataclass_from_signature, dotted_keys, parse_section, section_data,
    to_plain, type_hints,
)
from evorl.config.pbt import PBTConfig
from evorl.config.runner import RunnerConfig
from evorl.config.sweeps import extract_sweeps, num_agents, sweep_variants
from evorl.config.training import OPTIMIZERS, TrainingConfig

__all__ = [
    "INT32_MAX", "OPTIMIZERS", "CheckpointConfig", "ConfigError", "DistributedConfig", "EnvConfig", "FloatOrInf",
    "LoggingConfig", "PBTConfig", "RunnerConfig", "TrainingConfig", "coerce", "dataclass_from_signature",
    "dotted_keys", "extract_sweeps", "install_hint", "num_agents", "parse_section", "require", "section_data", "sweep_variants", "to_plain", "config_mapping",
    "type_hints", "unknown_key_error",
]

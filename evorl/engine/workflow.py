"""The workflow interface: build from a config, ``init``, ``step``, ``evaluate``, ``learn``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import jax

#: The algorithm workflows by public name (``evorl.workflows.PPOWorkflow``) -> the module defining
#: it: names only, imported on first use, so the engine imports no algorithm.
WORKFLOWS = {
    "PPOWorkflow": "evorl.algorithms.ppo",
    "A2CWorkflow": "evorl.algorithms.a2c",
    "IMPALAWorkflow": "evorl.algorithms.impala",
    "DQNWorkflow": "evorl.algorithms.dqn",
    "DDPGWorkflow": "evorl.algorithms.td3",
    "TD3Workflow": "evorl.algorithms.td3",
    "SACWorkflow": "evorl.algorithms.sac",
    "REINFORCEWorkflow": "evorl.algorithms.reinforce",
    "ESWorkflow": "evorl.algorithms.es_workflow",
    "NSGA2Workflow": "evorl.algorithms.nsga2_workflow",
    "CEMRLWorkflow": "evorl.algorithms.cemrl",
    "ERLWorkflow": "evorl.algorithms.erl",
    "IPPOWorkflow": "evorl.algorithms.mappo",
    "MAPPOWorkflow": "evorl.algorithms.mappo",
    "MATD3Workflow": "evorl.algorithms.matd3",
    "MADDPGWorkflow": "evorl.algorithms.matd3",
}


class Workflow(ABC):
    """A training procedure: static configuration in ``self``, all numbers in a state pytree."""

    @classmethod
    def name(cls) -> str:
        return cls.__name__

    @classmethod
    @abstractmethod
    def build_from_config(cls, cfg: Any, enable_multi_devices: bool = False) -> "Workflow": ...

    @abstractmethod
    def init(self, key: jax.Array) -> Any:
        """The initial state for PRNG key ``key``."""

    @abstractmethod
    def step(self, state: Any) -> tuple[Any, dict]:
        """One training iteration: ``(state, metrics)``."""

    @abstractmethod
    def evaluate(self, state: Any) -> dict:
        """Evaluation metrics of the current policy."""

    @abstractmethod
    def learn(self, state: Any) -> Any:
        """Trains from ``state`` to the configured end and returns the final state."""

    def config_notes(self) -> list[str]:
        """Lines a run of this config prints before it starts (``evorl: note: ...``): what it
        will leave undone, where that is legal but likely a mistake."""
        return []

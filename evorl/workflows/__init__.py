"""Workflows. Algorithm workflows are imported lazily (``evorl.workflows.PPOWorkflow``)."""

from __future__ import annotations

import importlib

from evorl.workflows.rl_workflow import OnPolicyWorkflow, RLWorkflow, resolve_workflow_cls
from evorl.workflows.workflow import Workflow

#: Public name -> module defining it.
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
    "CEMRLWorkflow": "evorl.algorithms.cemrl",
    "ERLWorkflow": "evorl.algorithms.erl",
}

__all__ = ["Workflow", "RLWorkflow", "OnPolicyWorkflow", "resolve_workflow_cls", *WORKFLOWS]


def __getattr__(name: str):
    if name in WORKFLOWS:
        return getattr(importlib.import_module(WORKFLOWS[name]), name)
    raise AttributeError(f"module 'evorl.workflows' has no attribute {name!r}")

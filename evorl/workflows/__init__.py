"""The workflows by name: ``evorl.workflows.PPOWorkflow`` (what a config's ``workflow_cls``
names) imports its algorithm's module on first use; ``resolve_workflow_cls`` turns such a
name into the class. The classes themselves live with their algorithms (``evorl.algorithms``),
the base classes and the registry of names (``WORKFLOWS``) in ``evorl.engine``."""

from __future__ import annotations

import importlib

from evorl.engine.on_policy_workflow import OnPolicyWorkflow
from evorl.engine.rl_base import RLWorkflow, resolve_workflow_cls
from evorl.engine.workflow import WORKFLOWS, Workflow

__all__ = [  # the names of WORKFLOWS too, written out for the docs' static reading
    "WORKFLOWS", "Workflow", "RLWorkflow", "OnPolicyWorkflow", "resolve_workflow_cls",
    "PPOWorkflow", "A2CWorkflow", "IMPALAWorkflow", "DQNWorkflow", "DDPGWorkflow", "TD3Workflow", "SACWorkflow",
    "REINFORCEWorkflow", "ESWorkflow", "NSGA2Workflow", "CEMRLWorkflow", "ERLWorkflow", "IPPOWorkflow", "MAPPOWorkflow",
    "MATD3Workflow", "MADDPGWorkflow",
]


def __getattr__(name: str):
    if name in WORKFLOWS:
        return getattr(importlib.import_module(WORKFLOWS[name]), name)
    raise AttributeError(f"module 'evorl.workflows' has no attribute {name!r}")

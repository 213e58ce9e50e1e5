"""Moved: ``OnPolicyWorkflow`` to :mod:`evorl.engine.on_policy_workflow`, ``RLWorkflow`` to
:mod:`evorl.engine.rl_base`, the host loop to :mod:`evorl.engine.host_loop`; this path keeps
working."""

from evorl.engine.host_loop import (  # noqa: F401
    NONFINITE_PARAMS,
    ChunkedWorkflow,
    TrainingInterrupted,
    chunk_health,
    train_metrics,
    training_env,
)
from evorl.engine.on_policy_workflow import OnPolicyWorkflow  # noqa: F401
from evorl.engine.rl_base import TOP_LEVEL_KEYS, ExperimentConfig, RLWorkflow, resolve_workflow_cls  # noqa: F401
from evorl.rl.on_policy import OnPolicyState  # noqa: F401

"""Noticing divergence: non-finite parameters or loss metrics stop training with a clear error.

The host loop (:meth:`~evorl.workflows.rl_workflow.OnPolicyWorkflow.learn`) checks at every
logging point, before it checkpoints, so the newest checkpoint always holds a finite state.
Whether an agent's parameters are finite is computed on the device (one boolean per agent);
the loss metrics are on the host already.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

#: Agents named in a divergence error before the rest are only counted.
MAX_NAMED_AGENTS = 3


#: What a divergence error suggests, unless the workflow knows better (ES: its ``es:`` keys).
LEARNING_RATE_HINT = "Try a smaller training.learning_rate or training.max_grad_norm."


class TrainingDiverged(RuntimeError):
    """Training produced non-finite parameters or loss metrics: ``problems`` (which agents,
    what) by ``iteration``, and a ``hint`` naming the config keys to change."""

    def __init__(self, iteration: int, problems: str, hint: str = LEARNING_RATE_HINT):
        self.iteration, self.problems, self.hint = iteration, problems, hint
        super().__init__(
            f"training diverged by iteration {iteration}: {problems}. Training stopped before checkpointing this "
            f"state, so the newest checkpoint is the last finite one. {hint}")

    def __reduce__(self):  # pickled with its fields (a Hydra -m job's error crosses processes)
        return type(self), (self.iteration, self.problems, self.hint)

    def with_hint(self, hint: str) -> "TrainingDiverged":
        """The same error with another ``hint``."""
        return TrainingDiverged(self.iteration, self.problems, hint)


def tree_all_finite(tree: Any) -> jax.Array:
    """Whether every floating-point leaf of ``tree`` is finite: a boolean ``[]`` on the device."""
    flags = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.inexact)]
    return jnp.all(jnp.stack(flags)) if flags else jnp.asarray(True)


def nonfinite_metrics(per_agent: dict[str, np.ndarray], num_agents: int, exempt: tuple[str, ...]) -> list[list[str]]:
    """Per agent, its metrics with a non-finite value as ``name=value`` (``exempt`` metrics,
    which are NaN when there is nothing to measure, are not checked)."""
    out: list[list[str]] = [[] for _ in range(num_agents)]
    for key, values in per_agent.items():
        if key in exempt:
            continue
        values = np.asarray(values, np.float64).reshape(num_agents)
        for i in np.flatnonzero(~np.isfinite(values)):
            out[i].append(f"{key}={values[i]}")
    return out


def check_finite(iteration: int, params_finite: np.ndarray, bad_metrics: list[list[str]],
                 labels: list[str]) -> None:
    """Raises :class:`TrainingDiverged` naming the iteration and each agent (its ``labels``
    entry) whose parameters are not finite (``params_finite[i]`` false) or that has
    non-finite loss metrics (``bad_metrics[i]``)."""
    bad = [i for i in range(len(labels)) if not params_finite[i] or bad_metrics[i]]
    if not bad:
        return
    problems = []
    for i in bad[:MAX_NAMED_AGENTS]:
        what = [] if params_finite[i] else ["non-finite parameters"]
        what += [f"non-finite loss metrics {', '.join(bad_metrics[i])}"] if bad_metrics[i] else []
        problems.append(f"{labels[i]}: {' and '.join(what)}")
    more = f"; and {len(bad) - MAX_NAMED_AGENTS} more agents" if len(bad) > MAX_NAMED_AGENTS else ""
    raise TrainingDiverged(iteration, f"{'; '.join(problems)}{more}")

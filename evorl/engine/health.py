"""Noticing divergence: non-finite parameters or loss metrics stop training with a clear error.

The host loop (:meth:`~evorl.engine.host_loop.ChunkedWorkflow.learn`) checks at every
logging point, before it checkpoints, so the newest checkpoint always holds a finite state.
Whether an agent's parameters are finite is computed on the device (one boolean per agent);
the loss metrics are on the host already.

In a population one diverged agent does not stop the others: :func:`freeze_diverged`, run
after every iteration inside the compiled chunk, undoes the iteration that made an agent
non-finite and freezes it there (its state's ``frozen`` fields stop changing); the host reports it
once, leaves it out of the aggregated metrics, and stops with :class:`TrainingDiverged` only
when every agent is frozen. PBT ranks a frozen agent worst and its next step replaces it by a
copy of a good agent (:func:`replaced_message` reports that). A run that stops saves no
non-finite state: its error says which checkpoint holds the last finite one.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evorl.rl import metrics as M
from evorl.rl.collectives import population_cond
from evorl.rl.state_roles import fields_with_role

#: Agents named in a divergence error before the rest are only counted.
MAX_NAMED_AGENTS = 3


#: What a divergence error suggests, unless the workflow knows better (ES: its ``es:`` keys).
LEARNING_RATE_HINT = "Try a smaller training.learning_rate or training.max_grad_norm."


#: What a divergence error says of checkpoints until the host loop says which one holds the last finite state.
NOT_CHECKPOINTED = "Training stopped before checkpointing this state."


class TrainingDiverged(RuntimeError):
    """Training produced non-finite parameters or loss metrics: ``problems`` (which agents,
    what) by ``iteration``, what was ``checkpointed`` (the host loop's sentence on the last
    finite state on disk) and a ``hint`` naming the config keys to change."""

    def __init__(self, iteration: int, problems: str, hint: str = LEARNING_RATE_HINT,
                 checkpointed: str = NOT_CHECKPOINTED):
        self.iteration, self.problems, self.hint, self.checkpointed = iteration, problems, hint, checkpointed
        super().__init__(self.describe())

    def describe(self) -> str:
        return f"training diverged by iteration {self.iteration}: {self.problems}. {self.checkpointed} {self.hint}"

    def __reduce__(self):  # pickled with its fields (a Hydra -m job's error crosses processes)
        return type(self), (self.iteration, self.problems, self.hint, self.checkpointed)

    def with_hint(self, hint: str) -> "TrainingDiverged":
        """The same error with another ``hint``."""
        return type(self)(self.iteration, self.problems, hint, self.checkpointed)

    def with_checkpoint(self, checkpointed: str) -> "TrainingDiverged":
        """The same error saying ``checkpointed`` of the last finite state."""
        return type(self)(self.iteration, self.problems, self.hint, checkpointed)


class EnvironmentNotFinite(TrainingDiverged):
    """The environment returned a non-finite reward or observation for a finite action: its
    fault, not the learner's (a smaller learning rate would not help)."""

    def describe(self) -> str:
        return (f"the environment returned a non-finite reward or observation by iteration {self.iteration}, for "
                f"finite actions: {self.problems}. {self.checkpointed} Fix the environment: its rewards and "
                f"observations must be finite (a smaller learning rate will not help).")

    def with_hint(self, hint: str) -> "EnvironmentNotFinite":
        return self  # no config key fixes an environment


def check_environment(iteration: int, env_faults: np.ndarray | None, labels: list[str]) -> None:
    """Raises :class:`EnvironmentNotFinite` if any agent's environments returned non-finite
    values for finite actions (``env_faults[i]``: how many env steps did, None: not counted)."""
    if env_faults is None:
        return
    counts = np.reshape(np.asarray(env_faults, np.float64), (len(labels),))
    bad = np.flatnonzero(counts > 0)
    if bad.size:
        named = [f"{labels[i]}: {int(counts[i])} env steps" for i in bad[:MAX_NAMED_AGENTS]]
        more = f"; and {bad.size - MAX_NAMED_AGENTS} more agents" if bad.size > MAX_NAMED_AGENTS else ""
        raise EnvironmentNotFinite(iteration, f"{'; '.join(named)}{more}")


def tree_all_finite(tree: Any) -> jax.Array:
    """Whether every floating-point leaf of ``tree`` is finite: a boolean ``[]`` on the device.

    A leaf is finite when :math:`\\max |x|` is (an infinity makes it infinite; XLA's ``max``
    propagates NaN): one fused reduction per leaf, where ``all(isfinite(x))`` wrote a boolean
    copy of the leaf and reduced that (3.6x slower on the CPU for a population's critics)."""
    flags = [jnp.isfinite(jnp.max(jnp.abs(x))) for x in jax.tree.leaves(tree)
             if jnp.issubdtype(x.dtype, jnp.inexact) and x.size]
    return jnp.all(jnp.stack(flags)) if flags else jnp.asarray(True)


def freeze_diverged(old: Any, new: Any, metrics: dict, alive: jax.Array,
                    fields: tuple[str, ...] | None = None, axis_name: str | None = None) -> tuple[Any, jax.Array]:
    """One agent's iteration ``old -> new`` (an :class:`~evorl.rl.on_policy.OnPolicyState`)
    kept only while the agent is ``alive`` and the iteration left its parameters, observation
    statistics, optimiser state and loss ``metrics`` (not the episode sums) finite; otherwise
    the agent keeps ``old``'s ``fields`` (default: the state's fields with the ``frozen`` role,
    :mod:`evorl.rl.state_roles`; its environments, PRNG key and iteration counter move on, so
    the population stays in step) and is no longer alive. Returns the state and ``alive``.

    ``axis_name``: the population's ``vmap`` axis this runs under. The old fields are then
    selected only in an iteration where some agent is frozen
    (:func:`evorl.rl.collectives.population_cond`), not written back for every agent after every
    iteration. A leaf ``new`` holds as the very value ``old`` held (the same traced value: the iteration
    passed it through, e.g. the parameters in an off-policy warm-up iteration; see
    :func:`evorl.engine.execution.relink_forwarded`) needs no restoring and stays out of the
    branch, whose outputs XLA would otherwise copy into the loop's carry every iteration."""
    losses = [m.value for key, m in M.declared(metrics).items() if not key.startswith("episode_")]
    alive = alive & tree_all_finite((new.agent_state.params, new.agent_state.obs_stats, new.opt_state, losses))

    def restored(new_leaves, old_leaves):  # ``old``'s leaves, for an agent that is not alive
        return old_leaves

    fields = fields_with_role(old, "frozen") if fields is None else fields
    old_leaves, treedef = jax.tree.flatten({name: getattr(old, name) for name in fields})
    new_leaves = treedef.flatten_up_to({name: getattr(new, name) for name in fields})
    moved = [i for i, (n, o) in enumerate(zip(new_leaves, old_leaves)) if n is not o]
    kept = population_cond(~alive, restored, lambda n, o: n, [new_leaves[i] for i in moved],
                           [old_leaves[i] for i in moved], axis_name=axis_name)
    for i, leaf in zip(moved, kept):
        new_leaves[i] = leaf
    return new.replace(**treedef.unflatten(new_leaves)), alive


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


def frozen_message(iteration: int, labels: list[str], bad_metrics: list[list[str]], num_alive: int,
                   num_agents: int) -> str:
    """The one line that reports the agents frozen by ``iteration`` (their ``labels``, with the
    non-finite loss metrics seen, ``bad_metrics``) and how many agents train on."""
    named = [label + (f" (non-finite {', '.join(bad)})" if bad else "")
             for label, bad in zip(labels[:MAX_NAMED_AGENTS], bad_metrics)]
    more = f" and {len(labels) - MAX_NAMED_AGENTS} more agents" if len(labels) > MAX_NAMED_AGENTS else ""
    return (f"training diverged by iteration {iteration} for {'; '.join(named)}{more}: frozen at the last finite "
            f"state, no longer updated and left out of the population's metrics; {num_alive} of {num_agents} agents "
            f"train on.")


def all_frozen_problems(labels: list[str], bad_metrics: dict[int, list[str]]) -> str:
    """What :class:`TrainingDiverged` says when every agent of a population is frozen (the
    non-finite loss metrics seen when each froze, ``bad_metrics[i]``, where there were any)."""
    named = [f"{label}: non-finite " + (", ".join(bad_metrics.get(i) or []) or "parameters")
             for i, label in enumerate(labels[:MAX_NAMED_AGENTS])]
    more = f"; and {len(labels) - MAX_NAMED_AGENTS} more agents" if len(labels) > MAX_NAMED_AGENTS else ""
    return f"every agent diverged ({'; '.join(named)}{more})"


def replaced_message(iteration: int, replacements: list[tuple[str, int, int, str]], num_alive: int,
                     num_agents: int) -> str:
    """The one line that reports the agents PBT replaced after they diverged: each
    ``(label, step's iteration, source agent, its new hyperparameters)``."""
    named = [f"{label}, at iteration {at} by a copy of agent {source}" + (f" ({values})" if values else "")
             for label, at, source, values in replacements[:MAX_NAMED_AGENTS]]
    more = f"; and {len(replacements) - MAX_NAMED_AGENTS} more agents" if len(replacements) > MAX_NAMED_AGENTS else ""
    return (f"training diverged by iteration {iteration} for {len(replacements)} agent(s), which PBT replaced: "
            f"{'; '.join(named)}{more}. {num_alive} of {num_agents} agents train on (pbt_lineage.jsonl lists the "
            f"replaced agents under \"diverged\").")

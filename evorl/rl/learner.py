"""What the on- and off-policy learners share: the optimiser, the learning rate of each
iteration (the agent's own base rate, linearly annealed) and the lagged actor parameters
(``training.actor_lag``: the rollout acts with the parameters of that many iterations ago)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

from evorl.config import TrainingConfig
from evorl.rl.agent import AgentState


def make_optimizer(tc: TrainingConfig) -> optax.GradientTransformation:
    """Global-norm clipping then ``tc.optimizer``: Adam, or RMSprop as SB3 and
    rl-baselines3-zoo run A2C (PyTorch's: ``v <- 0.99 v + 0.01 g^2`` from ``v = 0``, step
    ``lr g / (sqrt(v) + eps)``). The learning rate lives in the optimiser state
    (``optax.inject_hyperparams``) so it is data: annealed per iteration, vmappable."""

    def optimizer(learning_rate):
        clip = [optax.clip_by_global_norm(tc.max_grad_norm)] if tc.max_grad_norm else []
        if tc.optimizer == "rmsprop":
            step = optax.rmsprop(learning_rate, decay=0.99, eps=tc.adam_eps, eps_in_sqrt=False)
        else:
            step = optax.adam(learning_rate, eps=tc.adam_eps)
        return optax.chain(*clip, step)

    return optax.inject_hyperparams(optimizer)(learning_rate=tc.learning_rate)


def set_learning_rate(opt_state, learning_rate: jax.Array):
    hyperparams = {**opt_state.hyperparams, "learning_rate": jnp.asarray(learning_rate, jnp.float32)}
    return opt_state._replace(hyperparams=hyperparams)


def scheduled_learning_rate(opt_state, learning_rate: jax.Array, iteration: jax.Array,
                            anneal_iterations: jax.Array | None):
    r"""``opt_state`` with this iteration's learning rate: the agent's own base rate
    ``learning_rate`` (data in its training state: a population's sweep, PBT's explore), times
    :math:`\max(1 - t / T, 0)` with ``T = anneal_iterations`` (``training.num_iterations``
    under ``training.anneal_lr``: linear decay to 0, never negative), else (None) times 1.
    Every learner update sets it, so the rate the optimiser applies is always the agent's. The
    one annealing of the on- and off-policy learners (``optax.linear_schedule`` computes the
    same line with other roundings: a few of its rates differ in the last bit, which would
    change every run's numbers). :math:`t / T` is computed as :math:`t \cdot (1 / T)`, what XLA
    makes of a division by a constant: ``T`` is data in the state (a resume that changes the
    run's length compiles the same program), and the rates stay those of a compiled-in ``T``."""
    frac = 1.0 if anneal_iterations is None else \
        jnp.maximum(1.0 - iteration.astype(jnp.float32) * (1.0 / anneal_iterations.astype(jnp.float32)), 0.0)
    return set_learning_rate(opt_state, learning_rate * frac)


def anneal_iterations(tc: TrainingConfig) -> jax.Array | None:
    """The state's ``anneal_iterations``: ``training.num_iterations`` with ``anneal_lr``, else None."""
    return jnp.asarray(tc.num_iterations, jnp.int32) if tc.anneal_lr else None


def init_lagged_params(params: Any, actor_lag: int) -> Any:
    """``actor_lag`` copies of ``params`` (leaves ``[actor_lag, ...]``), or None for no lag."""
    if actor_lag == 0:
        return None
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (actor_lag,) + x.shape), params)


def acting_state(agent_state: AgentState, lagged_params: Any) -> tuple[AgentState, Any]:
    """The state the rollout acts with (the oldest snapshot) and the snapshots shifted by one
    with the current parameters appended; ``(agent_state, None)`` without lag."""
    if lagged_params is None:
        return agent_state, None
    oldest = jax.tree.map(lambda x: x[0], lagged_params)
    shifted = jax.tree.map(
        lambda past, now: jnp.concatenate([past[1:], now[None]]), lagged_params, agent_state.params
    )
    return agent_state.replace(params=oldest), shifted

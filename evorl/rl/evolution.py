r"""Evolution operators on arrays, pure functions over a population's ``[N, ...]`` leaves.

PBT's exploit/explore step (:func:`exploit_explore`, with its random numbers drawn by
:func:`draw`; the step on the training state and its schedule are :mod:`evorl.engine.pbt`,
the equation in its docstring).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
from flax import struct


@dataclass(frozen=True)
class Evolving:
    """One evolving hyperparameter: its config key, where the state holds it (a field of
    ``AgentState.hparams``, or None for the base learning rate), bounds and scale."""

    key: str
    field: str | None
    low: float
    high: float
    log_scale: bool


@struct.dataclass
class Draws:
    """The random numbers of one exploit/explore step, per agent (``[N]``) and per agent and
    hyperparameter (``[N, H]``)."""

    winner: jax.Array  # [N] uniform in [0, 1): which of the k best a replaced agent copies
    resample: jax.Array  # [N, H] uniform: resample when < resample_probability
    factor: jax.Array  # [N, H] int32 index into perturb_factors
    value: jax.Array  # [N, H] uniform: the resampled value's position in its range


def draw(key: jax.Array, num_agents: int, num_hparams: int, num_factors: int) -> Draws:
    k_winner, k_resample, k_factor, k_value = jax.random.split(key, 4)
    shape = (num_agents, num_hparams)
    return Draws(jax.random.uniform(k_winner, (num_agents,)), jax.random.uniform(k_resample, shape),
                 jax.random.randint(k_factor, shape, 0, num_factors), jax.random.uniform(k_value, shape))


def ranking(fitness: jax.Array) -> jax.Array:
    """Agent indices from worst to best (ties: the lower index ranks lower; NaN is worst)."""
    return jnp.argsort(jnp.where(jnp.isnan(fitness), -jnp.inf, fitness), stable=True)


def exploit_explore(fitness: jax.Array, values: jax.Array, draws: Draws, num_replaced: int,
                    evolving: tuple[Evolving, ...], perturb_factors: tuple[float, ...],
                    resample_probability: float) -> tuple[jax.Array, jax.Array]:
    """One PBT step (see the module docstring) on ``fitness [N]`` and the evolving
    hyperparameters ``values [N, H]`` (in the order of ``evolving``).

    Returns ``source [N]`` (the agent each agent now copies: itself unless replaced) and the
    new ``values [N, H]``."""
    num_agents = fitness.shape[0]
    order = ranking(fitness)
    losers, winners = order[:num_replaced], order[num_agents - num_replaced:]  # [k], [k]
    pick = jnp.minimum((draws.winner[losers] * num_replaced).astype(jnp.int32), num_replaced - 1)
    source = jnp.arange(num_agents).at[losers].set(winners[pick])  # [N]
    replaced = (source != jnp.arange(num_agents))[:, None]  # [N, 1]
    if not evolving:
        return source, values
    low = jnp.asarray([e.low for e in evolving], jnp.float32)  # [H]
    high = jnp.asarray([e.high for e in evolving], jnp.float32)
    log_scale = jnp.asarray([e.log_scale for e in evolving])
    inherited = values[source]  # [N, H]
    perturbed = inherited * jnp.asarray(perturb_factors, jnp.float32)[draws.factor]
    log_low, log_high = jnp.log(jnp.where(log_scale, low, 1.0)), jnp.log(jnp.where(log_scale, high, 1.0))
    resampled = jnp.where(log_scale, jnp.exp(log_low + draws.value * (log_high - log_low)),
                          low + draws.value * (high - low))
    explored = jnp.clip(jnp.where(draws.resample < resample_probability, resampled, perturbed), low, high)
    return source, jnp.where(replaced, explored, values)



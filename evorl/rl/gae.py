"""Generalised advantage estimation and the advantage statistics of the on-policy losses:
pure functions over time-major sequences ``[T, ...]``, the equation in each docstring."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from evorl.rl.collectives import pmean


def check_time_major(**arrays) -> None:
    """Checks that the named arrays are time-major sequences ``[T, ...]`` of one shape.

    Raises ``ValueError`` naming every array's shape if one has rank 0 or the shapes differ.
    """
    shapes = {name: jnp.shape(a) for name, a in arrays.items()}
    first = next(iter(shapes.values()))
    if len(first) < 1:
        raise ValueError(f"expected time-major arrays [T, ...], got shapes {shapes}")
    if any(s != first for s in shapes.values()):
        raise ValueError(f"all inputs must have the same shape [T, ...], got {shapes}")


def compute_gae(
    rewards: jax.Array,
    values: jax.Array,
    next_values: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    discount: float | jax.Array,
    gae_lambda: float | jax.Array,
) -> tuple[jax.Array, jax.Array]:
    r"""Generalised advantage estimation with correct handling of episode ends.

    All inputs are ``[T, ...]``; ``next_values[t] = V(s'_t)`` is the value of the *true*
    next state of step ``t`` (the final observation when the episode ended there).

    .. math::
        \delta_t = r_t + \gamma (1 - \mathrm{term}_t) V(s'_t) - V(s_t) \\
        A_t = \delta_t + \gamma \lambda (1 - \mathrm{done}_t) A_{t+1}, \quad A_T = 0

    with ``done = terminated | truncated``: a terminal state bootstraps from nothing, a
    truncated episode from ``V(final_obs)``, and the trace never crosses an episode end.
    Returns ``(advantages, value_targets)`` with ``value_targets = A + V``, gradients stopped.
    """
    check_time_major(
        rewards=rewards, values=values, next_values=next_values,
        terminated=terminated, truncated=truncated,
    )
    terminated = terminated.astype(values.dtype)
    continues = 1.0 - jnp.maximum(terminated, truncated.astype(values.dtype))  # [T, ...]
    deltas = rewards + discount * (1.0 - terminated) * next_values - values  # [T, ...]

    def backward(next_advantage, inputs):
        delta_t, continue_t = inputs
        advantage = delta_t + discount * gae_lambda * continue_t * next_advantage
        return advantage, advantage

    _, advantages = lax.scan(
        backward, jnp.zeros_like(values[0]), (deltas, continues), reverse=True
    )
    advantages = lax.stop_gradient(advantages)
    return advantages, lax.stop_gradient(advantages + values)


def normalize_advantages(advantages: jax.Array, axis_name: str | None = None, eps: float = 1e-8) -> jax.Array:
    """``(A - mean) / (std + eps)`` with the statistics of the whole minibatch: over every
    device on ``axis_name`` (each holding an equal share), not just this device's part."""
    mean = pmean(jnp.mean(advantages), axis_name)
    var = pmean(jnp.mean(jnp.square(advantages - mean)), axis_name)
    return (advantages - mean) / (jnp.sqrt(var) + eps)


def explained_variance(predictions: jax.Array, targets: jax.Array) -> jax.Array:
    """``1 - Var[targets - predictions] / Var[targets]`` (NaN-free: 0 when Var[targets] = 0)."""
    var_targets = jnp.var(targets)
    return jnp.where(var_targets > 0, 1.0 - jnp.var(targets - predictions) / var_targets, 0.0)


"""V-trace (IMPALA): the value targets and the policy-gradient advantage of an off-policy
trajectory, pure functions over time-major sequences ``[T, ...]``, the equation in each docstring."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from evorl.rl.gae import check_time_major


def compute_vtrace(
    rewards: jax.Array,
    values: jax.Array,
    next_values: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    log_rhos: jax.Array,
    discount: float | jax.Array,
    vtrace_lambda: float | jax.Array = 1.0,
    rho_bar: float | jax.Array = 1.0,
    c_bar: float | jax.Array = 1.0,
) -> jax.Array:
    r"""V-trace value targets :math:`v_t` (Espeholt et al., 2018, eq. 1), gradients stopped.

    All inputs are ``[T, ...]``: ``values[t] = V(s_t)``, ``next_values[t] = V(s'_t)`` the
    value of the true next state of step ``t`` (the final observation when the episode ended
    there), ``log_rhos[t] = log pi(a_t|s_t) - log mu(a_t|s_t)``.

    .. math::
        \rho_t = \min(\bar\rho, \pi/\mu), \quad c_t = \lambda \min(\bar c, \pi/\mu) \\
        \delta_t = \rho_t (r_t + \gamma (1 - \mathrm{term}_t) V(s'_t) - V(s_t)) \\
        v_t - V(s_t) = \delta_t + \gamma (1 - \mathrm{done}_t) c_t (v_{t+1} - V(s_{t+1})),
        \quad v_T - V(s_T) = 0

    with ``done = terminated | truncated``: a terminal state bootstraps from nothing, a
    truncated episode from ``V(final_obs)``, and the trace never crosses an episode end.
    With :math:`\rho = c = 1` (on-policy) these are the lambda-returns of GAE.
    """
    check_time_major(
        rewards=rewards, values=values, next_values=next_values,
        terminated=terminated, truncated=truncated, log_rhos=log_rhos,
    )
    rhos = jnp.exp(log_rhos)  # [T, ...]
    clipped_rhos = jnp.minimum(rho_bar, rhos)
    cs = vtrace_lambda * jnp.minimum(c_bar, rhos)
    terminated = terminated.astype(values.dtype)
    continues = 1.0 - jnp.maximum(terminated, truncated.astype(values.dtype))  # [T, ...]
    deltas = clipped_rhos * (rewards + discount * (1.0 - terminated) * next_values - values)

    def backward(next_correction, inputs):
        delta_t, c_t, continue_t = inputs
        correction = delta_t + discount * continue_t * c_t * next_correction  # v_t - V(s_t)
        return correction, correction

    _, corrections = lax.scan(
        backward, jnp.zeros_like(values[0]), (deltas, cs, continues), reverse=True
    )
    return lax.stop_gradient(values + corrections)


def compute_pg_advantage(
    rewards: jax.Array,
    values: jax.Array,
    next_values: jax.Array,
    vs: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    log_rhos: jax.Array,
    discount: float | jax.Array,
    rho_bar: float | jax.Array = 1.0,
) -> jax.Array:
    r"""V-trace's policy-gradient advantage (Espeholt et al., 2018, section 4.2), gradients
    stopped; inputs ``[T, ...]`` as in :func:`compute_vtrace`, ``vs`` its targets.

    .. math::
        A_t = \min(\bar\rho, \pi/\mu) (r_t + \gamma (1 - \mathrm{term}_t) v'_{t+1} - V(s_t))

    where :math:`v'_{t+1} = v_{t+1}` while the episode continues inside the trajectory and
    :math:`V(s'_t)` at an episode end or after the last step (:math:`v_T = V(s_T)`).
    """
    check_time_major(
        rewards=rewards, values=values, next_values=next_values, vs=vs,
        terminated=terminated, truncated=truncated, log_rhos=log_rhos,
    )
    done = terminated | truncated  # [T, ...]
    next_vs = jnp.concatenate([vs[1:], next_values[-1:]])  # [T, ...]
    next_vs = jnp.where(done, next_values, next_vs)
    q = rewards + discount * (1.0 - terminated.astype(values.dtype)) * next_vs
    return lax.stop_gradient(jnp.minimum(rho_bar, jnp.exp(log_rhos)) * (q - values))


"""Every return target of evorl, in one place: pure functions over time-major sequences
``[T, ...]`` or batches of transitions ``[N]``, the equation in each docstring.

* on-policy: :func:`compute_gae` (PPO, A2C), :func:`normalize_advantages`,
  :func:`explained_variance`; :func:`compute_vtrace` and :func:`compute_pg_advantage` (IMPALA);
* off-policy: :func:`n_step_transitions` (the n-step reward sums and bootstrap discounts a
  replay buffer stores, :class:`Transition`), and the bootstrapped Q-targets of DQN
  (:func:`double_q_targets`), TD3/DDPG (:func:`clipped_double_q_targets`) and SAC
  (:func:`soft_q_targets`).

Each is also importable from the module of the algorithm that uses it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from jax import lax

from evorl import hardware
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


# --- V-trace (IMPALA) ------------------------------------------------------------------
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


# --- n-step transitions and Q-learning targets -----------------------------------------
@struct.dataclass
class Transition:
    r"""One (possibly n-step) transition: from ``obs`` with ``action``, the discounted reward
    sum ``reward`` :math:`= \sum_{k<m} (\prod_{j<k} \gamma_{t+j}) r_{t+k}` of the ``m`` steps
    taken, then ``next_obs`` whose bootstrap value counts with ``discount``
    :math:`= \prod_{j<m} \gamma_{t+j}` (0 after a termination)."""

    obs: jax.Array  # [..., *obs_shape]
    action: jax.Array  # [..., *action_shape]
    reward: jax.Array  # [...], or [..., n_agents]: a multi-agent env's reward per agent
    discount: jax.Array  # [...] (the agents share it)
    next_obs: jax.Array  # [..., *obs_shape]


def n_step_transitions(obs: jax.Array, actions: jax.Array, rewards: jax.Array, discounts: jax.Array,
                       ends: jax.Array, next_obs: jax.Array, n: int) -> Transition:
    r"""The n-step transitions ``[T, B]`` of a rollout of ``T`` steps in ``B`` environments.

    Inputs, time-major: ``obs [T, B, ...]``, ``actions [T, B, ...]``, ``rewards`` :math:`r_t`
    ``[T, B]`` or ``[T, B, ...]`` (a multi-agent env's reward per agent ``[T, B, n_agents]``, each
    summed on its own over the window the agents share), ``discounts`` :math:`\gamma_t`
    ``[T, B]`` (0 where step ``t`` terminated the episode, :math:`\gamma` otherwise, truncation
    included), ``ends [T, B]`` (step ``t`` ended its episode: terminated or truncated) and
    ``next_obs [T, B, ...]`` (the true next observation of step ``t``; at an episode's end its
    final one, not the reset one).

    The transition of step ``t`` takes ``m_t = min(n, T - t, k_t + 1)`` steps, where ``k_t`` is
    the offset of the first step in ``t, t+1, ...`` that ends its episode:

    .. math::
        R_t = \sum_{k<m_t} \Big(\prod_{j<k} \gamma_{t+j}\Big) r_{t+k}, \qquad
        D_t = \prod_{j<m_t} \gamma_{t+j}, \qquad s'_t = \mathrm{next\_obs}_{t+m_t-1}

    so the target is :math:`R_t + D_t \max_a Q(s'_t, a)`. A window never crosses into the next
    episode; a truncation bootstraps from the final observation, a termination does not
    (:math:`D_t = 0`). Near the end of the rollout the windows are shorter (``m_t < n``): the
    rollout's last step has a one-step transition. ``n = 1`` returns the one-step transitions.
    """
    if n < 1:
        raise ValueError(f"n_step_transitions: n must be >= 1, got {n}")
    if discounts.ndim != 2 or rewards.shape[:2] != discounts.shape or ends.shape != discounts.shape:
        raise ValueError(f"n_step_transitions: discounts and ends must be [T, B] and rewards [T, B] or [T, B, ...]; "
                         f"got {rewards.shape}, {discounts.shape}, {ends.shape}")
    T = rewards.shape[0]
    per_reward = lambda x: x.reshape(x.shape + (1,) * (rewards.ndim - 2))  # noqa: E731  [T, B] on the rewards' axes

    def ahead(x, k):  # x[t + k] at row t, zeros past the rollout's end
        return jnp.concatenate([x[k:], jnp.zeros((min(k, T),) + x.shape[1:], x.dtype)])[:T]

    step = jnp.arange(T)[:, None]  # [T, 1]
    reward_sum = jnp.zeros_like(rewards)
    discount = jnp.ones_like(discounts)
    last = jnp.broadcast_to(step, discounts.shape)  # [T, B]: the window's last step
    open_ = jnp.ones(discounts.shape, bool)  # the window still takes steps
    for k in range(n):
        takes = open_ & (step + k < T)
        reward_sum = reward_sum + jnp.where(per_reward(takes), per_reward(discount) * ahead(rewards, k), 0.0)
        discount = jnp.where(takes, discount * ahead(discounts, k), discount)
        last = jnp.where(takes, step + k, last)
        open_ = takes & ~ahead(ends, k)
    batch_index = jnp.arange(discounts.shape[1])[None, :]
    return Transition(obs=obs, action=actions, reward=reward_sum, discount=discount,
                      next_obs=next_obs[last, batch_index])


def double_q_targets(q_online_next: jax.Array, q_target_next: jax.Array, rewards: jax.Array,
                     discounts: jax.Array) -> jax.Array:
    r"""Double Q-learning targets :math:`y = R + D\, \bar Q(s', \arg\max_a Q(s', a))`: the online
    network picks the action, the target network values it. ``q_*_next [N, A]``, the rest ``[N]``."""
    best = jnp.argmax(q_online_next, axis=-1)  # [N]
    return rewards + discounts * hardware.take_along_last(q_target_next, best)


def clipped_double_q_targets(q_next: jax.Array, rewards: jax.Array, discounts: jax.Array) -> jax.Array:
    r""":math:`y = R + D \min_i Q_i'`: ``q_next [num_critics, N]``, ``rewards``, ``discounts [N]``;
    with a multi-agent env's reward per agent, ``q_next [num_critics, N, n_agents]`` and ``rewards
    [N, n_agents]``, the agents sharing ``discounts [N]``."""
    discounts = discounts.reshape(discounts.shape + (1,) * (rewards.ndim - discounts.ndim))
    return rewards + discounts * jnp.min(q_next, axis=0)


def soft_q_targets(q_next: jax.Array, next_log_probs: jax.Array, alpha: jax.Array, rewards: jax.Array,
                   discounts: jax.Array) -> jax.Array:
    r""":math:`y = R + D (\min_i Q_i' - \alpha \log\pi(a' \mid s'))`: ``q_next [num_critics, N]``, the rest ``[N]``."""
    return rewards + discounts * (jnp.min(q_next, axis=0) - alpha * next_log_probs)

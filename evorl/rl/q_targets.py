"""The targets of the off-policy algorithms: :func:`n_step_transitions` (the n-step reward sums
and bootstrap discounts a replay buffer stores, :class:`Transition`) and the bootstrapped
Q-targets of DQN (:func:`double_q_targets`), TD3/DDPG (:func:`clipped_double_q_targets`) and
SAC (:func:`soft_q_targets`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from evorl import hardware


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

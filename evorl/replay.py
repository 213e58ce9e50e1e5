"""A replay buffer that lives in the training state, and n-step transitions to fill it.

:class:`ReplayBuffer` is a pytree of fixed-capacity arrays (leaves ``[capacity, ...]``), an
insert position and a fill count, so it is carried, vmapped over a population and
checkpointed like any other part of the training state. Every function here is pure:

* :func:`init` allocates the arrays from one example transition;
* :func:`add` writes a batch ``[B, ...]`` at the insert position, circularly (the oldest
  transitions are overwritten once the buffer is full);
* :func:`sample` draws ``batch_size`` transitions uniformly, with replacement, from the
  filled part.

A transition stores what a one-step or n-step Q-learning target needs (:class:`Transition`):
``reward`` is the discounted sum of the window's rewards and ``discount`` the factor of the
bootstrap value at ``next_obs``. :func:`n_step_transitions` computes them from a ``[T, B]``
rollout before insertion; an episode that ends inside the window closes it, a termination with
``discount = 0``, a truncation (time limit) with the bootstrap from its real final observation.

(flashbax 0.1.3 installs beside jax 0.10 and its buffers run; its flat buffer samples
``(s_t, s_{t+1})`` pairs along each environment's time axis, whose second item is the reset
observation where an episode ends, so the final observation and the n-step sums would be
stored anyway and half of each sample read for nothing. Its item buffer is this module's
buffer behind a dependency; the ~40 lines here keep ``sample`` a function of
``(buffer, key, batch_size)``.)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class Transition:
    r"""One (possibly n-step) transition: from ``obs`` with ``action``, the discounted reward
    sum ``reward`` :math:`= \sum_{k<m} (\prod_{j<k} \gamma_{t+j}) r_{t+k}` of the ``m`` steps
    taken, then ``next_obs`` whose bootstrap value counts with ``discount``
    :math:`= \prod_{j<m} \gamma_{t+j}` (0 after a termination)."""

    obs: jax.Array  # [..., *obs_shape]
    action: jax.Array  # [..., *action_shape]
    reward: jax.Array  # [...]
    discount: jax.Array  # [...]
    next_obs: jax.Array  # [..., *obs_shape]


@struct.dataclass
class ReplayBuffer:
    data: Any  # the stored transitions, leaves [capacity, ...]
    position: jax.Array  # [] int32: where the next transition is written
    size: jax.Array  # [] int32: how many slots hold a transition (<= capacity)

    @property
    def capacity(self) -> int:
        return jax.tree.leaves(self.data)[0].shape[0]


def init(example: Any, capacity: int) -> ReplayBuffer:
    """An empty buffer of ``capacity`` slots for transitions shaped like ``example`` (a pytree
    of one transition's arrays, no batch axis)."""
    if capacity < 1:
        raise ValueError(f"replay buffer capacity must be >= 1, got {capacity}")
    data = jax.tree.map(lambda x: jnp.zeros((capacity,) + jnp.shape(x), jnp.asarray(x).dtype), example)
    return ReplayBuffer(data=data, position=jnp.zeros((), jnp.int32), size=jnp.zeros((), jnp.int32))


def add(buffer: ReplayBuffer, batch: Any) -> ReplayBuffer:
    """``buffer`` with the ``B`` transitions of ``batch`` (leaves ``[B, ...]``, ``B <= capacity``)
    written at slots ``position, position + 1, ...`` modulo the capacity."""
    capacity = buffer.capacity
    num_new = jax.tree.leaves(batch)[0].shape[0]
    if num_new > capacity:
        raise ValueError(f"replay.add: a batch of {num_new} transitions does not fit a buffer of {capacity}")
    slots = (buffer.position + jnp.arange(num_new)) % capacity  # [B]
    data = jax.tree.map(lambda stored, new: stored.at[slots].set(new.astype(stored.dtype)), buffer.data, batch)
    return ReplayBuffer(data=data, position=(buffer.position + num_new) % capacity,
                        size=jnp.minimum(buffer.size + num_new, capacity))


def sample(buffer: ReplayBuffer, key: jax.Array, batch_size: int) -> Any:
    """``batch_size`` transitions (leaves ``[batch_size, ...]``) drawn uniformly with
    replacement from the filled slots ``[0, size)``. An empty buffer returns slot 0's zeros."""
    slots = jax.random.randint(key, (batch_size,), 0, jnp.maximum(buffer.size, 1))
    return jax.tree.map(lambda stored: stored[slots], buffer.data)


def n_step_transitions(obs: jax.Array, actions: jax.Array, rewards: jax.Array, discounts: jax.Array,
                       ends: jax.Array, next_obs: jax.Array, n: int) -> Transition:
    r"""The n-step transitions ``[T, B]`` of a rollout of ``T`` steps in ``B`` environments.

    Inputs, time-major: ``obs [T, B, ...]``, ``actions [T, B, ...]``, ``rewards`` :math:`r_t`
    ``[T, B]``, ``discounts`` :math:`\gamma_t` ``[T, B]`` (0 where step ``t`` terminated the
    episode, :math:`\gamma` otherwise, truncation included), ``ends [T, B]`` (step ``t`` ended
    its episode: terminated or truncated) and ``next_obs [T, B, ...]`` (the true next
    observation of step ``t``; at an episode's end its final one, not the reset one).

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
    if rewards.ndim != 2 or discounts.shape != rewards.shape or ends.shape != rewards.shape:
        raise ValueError(f"n_step_transitions: rewards, discounts and ends must all be [T, B]; got "
                         f"{rewards.shape}, {discounts.shape}, {ends.shape}")
    T = rewards.shape[0]

    def ahead(x, k):  # x[t + k] at row t, zeros past the rollout's end
        return jnp.concatenate([x[k:], jnp.zeros((min(k, T),) + x.shape[1:], x.dtype)])[:T]

    step = jnp.arange(T)[:, None]  # [T, 1]
    reward_sum = jnp.zeros_like(rewards)
    discount = jnp.ones_like(discounts)
    last = jnp.broadcast_to(step, rewards.shape)  # [T, B]: the window's last step
    open_ = jnp.ones(rewards.shape, bool)  # the window still takes steps
    for k in range(n):
        takes = open_ & (step + k < T)
        reward_sum = reward_sum + jnp.where(takes, discount * ahead(rewards, k), 0.0)
        discount = jnp.where(takes, discount * ahead(discounts, k), discount)
        last = jnp.where(takes, step + k, last)
        open_ = takes & ~ahead(ends, k)
    batch_index = jnp.arange(rewards.shape[1])[None, :]
    return Transition(obs=obs, action=actions, reward=reward_sum, discount=discount,
                      next_obs=next_obs[last, batch_index])

"""The state of a vectorised environment, and what its fields mean.

A :class:`~evorl.envs.vec_env.VectorEnv` steps ``num_envs`` copies of one environment in
lock step. Each copy resets itself when its episode ends; the step that ended it reports

* ``terminated``: the MDP reached a terminal state (bootstrap from nothing), or
* ``truncated``: the episode hit its time limit (bootstrap from ``V(final_obs)``),

and ``final_obs`` holds the true next observation of that step (before the reset), so
return estimators can bootstrap correctly. ``episode_return`` and ``episode_length`` are
the running totals of the current episode including this step; on a step with
``terminated | truncated`` they are those of the episode that just ended.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class EnvState:
    """State of ``num_envs`` environments after a step; every array leads with ``[B]``."""

    backend_state: Any
    key: jax.Array  # [B, key]
    obs: jax.Array  # [B, *obs_shape]: observation to act on (after auto-reset); multi-agent [B, n_agents, obs_dim]
    final_obs: jax.Array  # [B, *obs_shape]: true next observation of the last step
    reward: jax.Array  # [B] ([B, n_agents] in a multi-agent env)
    terminated: jax.Array  # [B] bool
    truncated: jax.Array  # [B] bool
    episode_return: jax.Array  # [B]
    episode_length: jax.Array  # [B] int32

    @property
    def done(self) -> jax.Array:
        return self.terminated | self.truncated


def episode_step(xp: Any, done: Any, episode_return: Any, episode_length: Any, reward: Any, terminated: Any,
                 env_truncated: Any, time_limit: int) -> tuple[Any, Any, Any]:
    """One step's episode bookkeeping, the same for JAX and host vector envs (``xp``:
    ``jax.numpy`` for one copy of a :class:`~evorl.envs.vec_env.VectorEnv`, ``numpy`` for the
    ``[B]`` copies of a :class:`~evorl.envs.host_env.HostVectorEnv`).

    The running totals restart after the step that ended the previous episode (``done``, the
    previous step's ``terminated | truncated``):
    :math:`G_t = [\neg d_{t-1}] G_{t-1} + r_t`, :math:`L_t = [\neg d_{t-1}] L_{t-1} + 1`; the
    episode is truncated when :math:`L_t` reaches ``time_limit`` or the env itself truncates
    it, unless it terminated on this step. ``reward`` is the env's unscaled reward (summed over
    an action repeat). Returns ``(episode_return float32, episode_length int32, truncated)``."""
    episode_return = xp.where(done, 0.0, episode_return).astype(xp.float32) + reward
    episode_length = xp.where(done, 0, episode_length).astype(xp.int32) + 1
    truncated = ((episode_length >= time_limit) | env_truncated) & ~terminated
    return episode_return, episode_length, truncated


def checked_vector_settings(num_envs: int, episode_length: int, reward_scale: float,
                            action_repeat: int) -> tuple[int, int, float, int]:
    """The settings every vector of environments (JAX or host) shares, checked and
    normalised: ``(num_envs, episode_length, reward_scale, action_repeat)``."""
    if int(num_envs) < 1:
        raise ValueError(f"num_envs (parallel) must be >= 1, got {num_envs}")
    if int(episode_length) < 1:
        raise ValueError(f"episode_length must be >= 1, got {episode_length}")
    if not reward_scale > 0:
        raise ValueError(f"reward_scale must be > 0, got {reward_scale}")
    if int(action_repeat) < 1:
        raise ValueError(f"action_repeat must be >= 1, got {action_repeat}")
    return int(num_envs), int(episode_length), float(reward_scale), int(action_repeat)


def strip_weak_types(tree: Any) -> Any:
    """``tree`` with weakly typed leaves (Python scalars traced as arrays) made strong, so a
    backend's reset and step states have identical avals and auto-reset's ``where`` between
    them keeps one dtype (one compilation)."""
    return jax.tree.map(lambda x: jnp.asarray(x, dtype=jnp.result_type(x)), tree)

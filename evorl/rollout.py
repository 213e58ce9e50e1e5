"""Collecting time-major trajectories ``[T, B, ...]`` with ``lax.scan``."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from jax import lax

from evorl.envs.env import EnvState


@struct.dataclass
class Trajectory:
    """``T`` steps of ``B`` environments. ``next_obs[t]`` is the true next observation of
    step ``t`` (the final observation when the episode ended there, not the reset one)."""

    obs: jax.Array  # [T, B, *obs_shape]
    actions: jax.Array  # [T, B, *action_shape] in the policy's own space
    rewards: jax.Array  # [T, B]
    terminated: jax.Array  # [T, B] bool
    truncated: jax.Array  # [T, B] bool
    next_obs: jax.Array  # [T, B, *obs_shape]
    extras: dict[str, Any]  # policy extras from acting (log-probs, ...) and later targets


@struct.dataclass
class EpisodeStats:
    """Sums over the episodes that ended during a rollout (summed, so they merge exactly)."""

    return_sum: jax.Array  # []
    length_sum: jax.Array  # []
    count: jax.Array  # []

    @classmethod
    def zeros(cls, like: jax.Array | None = None) -> "EpisodeStats":
        """Zero sums; with ``like`` (e.g. the per-env rewards) they vary across devices as it
        does under ``shard_map``, as the sums accumulated from it will."""
        z = jnp.zeros((), jnp.float32) if like is None else jnp.zeros_like(like, jnp.float32, shape=())
        return cls(z, z, z)

    def add(self, env_state: EnvState) -> "EpisodeStats":
        done = env_state.done.astype(jnp.float32)  # [B]
        return EpisodeStats(
            return_sum=self.return_sum + jnp.sum(done * env_state.episode_return),
            length_sum=self.length_sum + jnp.sum(done * env_state.episode_length),
            count=self.count + jnp.sum(done),
        )


def rollout(
    env,
    agent,
    agent_state,
    env_state: EnvState,
    key: jax.Array,
    rollout_length: int,
    env_ids: jax.Array | None = None,
):
    """Acts ``rollout_length`` steps with ``agent.compute_actions`` (sampled actions).

    Environment ``i`` samples its action at step ``t`` with ``fold_in(key_t, env_ids[i])``,
    so what an environment does depends only on its global index, not on how the
    environments are split across devices (``env_ids`` defaults to ``arange(B)``).
    Returns ``(env_state, trajectory [T, B, ...], episode_stats)``.
    """
    if env_ids is None:
        env_ids = jnp.arange(env_state.reward.shape[0])
    act = jax.vmap(agent.compute_actions, in_axes=(None, 0, 0))

    def step(carry, step_key):
        env_state, stats = carry
        env_keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(step_key, env_ids)  # [B]
        actions, extras = act(agent_state, env_state.obs, env_keys)
        next_state = env.step(env_state, agent.to_env_action(actions))
        transition = Trajectory(
            obs=env_state.obs,
            actions=actions,
            rewards=next_state.reward,
            terminated=next_state.terminated,
            truncated=next_state.truncated,
            next_obs=next_state.final_obs,
            extras=extras,
        )
        return (next_state, stats.add(next_state)), transition

    keys = jax.random.split(key, rollout_length)
    (env_state, stats), trajectory = lax.scan(step, (env_state, EpisodeStats.zeros(like=env_state.reward)), keys)
    return env_state, trajectory, stats

"""Collecting time-major trajectories ``[T, B, ...]`` with ``lax.scan``."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from jax import lax

from evorl import hardware
from evorl.envs.env import EnvState
from evorl.rl.collectives import vary_like


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
    """Sums over the episodes that ended during a rollout (summed, so they merge exactly), and
    ``env_faults``: the env steps whose reward or observation was not finite although the
    action taken was (the environment's fault, not the learner's; None where not counted)."""

    return_sum: jax.Array  # []
    length_sum: jax.Array  # []
    count: jax.Array  # []
    env_faults: jax.Array | None = None  # []

    @classmethod
    def zeros(cls, like: jax.Array | None = None, env_faults: bool = False) -> "EpisodeStats":
        """Zero sums (counting ``env_faults`` too if asked); with ``like`` (e.g. the per-env
        rewards) they vary across devices as it does under ``shard_map``, as the sums
        accumulated from it will."""
        z = jnp.zeros((), jnp.float32) if like is None else jnp.zeros_like(like, jnp.float32, shape=())
        return cls(z, z, z, z if env_faults else None)

    def add(self, env_state: EnvState, actions: jax.Array | None = None) -> "EpisodeStats":
        """The sums after the step that returned ``env_state``, taken with ``actions [B, ...]``."""
        done = env_state.done.astype(jnp.float32)  # [B]
        faults = self.env_faults
        if faults is not None and actions is not None:
            broken = ~(rows_finite(env_state.reward) & rows_finite(env_state.final_obs))  # [B]
            faults = faults + jnp.sum((broken & rows_finite(actions)).astype(jnp.float32))
        return EpisodeStats(
            return_sum=self.return_sum + jnp.sum(done * env_state.episode_return),
            length_sum=self.length_sum + jnp.sum(done * env_state.episode_length),
            count=self.count + jnp.sum(done),
            env_faults=faults,
        )


def rows_finite(tree: Any) -> jax.Array:
    """Per leading index ``b``, whether every floating-point entry of ``tree``'s leaves
    ``[B, ...]`` at ``b`` is finite: bool ``[B]`` (integer leaves always are)."""
    leaves = jax.tree.leaves(tree)
    flags = [jnp.isfinite(x).reshape(x.shape[0], -1).all(axis=1) for x in leaves if jnp.issubdtype(x.dtype, jnp.inexact)]
    ones = jnp.ones(leaves[0].shape[:1], bool)
    return functools.reduce(jnp.logical_and, flags, ones)


def reset_policy_state(policy_state: Any, starts: jax.Array, initial: Any) -> Any:
    """``policy_state`` (leaves ``[B, ...]``) with the initial state (leaves ``[...]`` or
    ``[B, ...]``) where ``starts [B]`` (an episode starts); None stays None."""
    def reset(state, init):
        return jnp.where(starts.reshape(starts.shape + (1,) * (state.ndim - starts.ndim)), init, state)
    return jax.tree.map(reset, policy_state, initial)


def feed_forward_only(agent, rollout_name: str) -> None:
    """Refuses a recurrent ``agent`` in ``rollout_name`` (which drops the policy state at its
    end): its state must outlive the rollout, in ``{rollout_name}_with_policy_state``."""
    if agent.recurrent:
        raise TypeError(f"{rollout_name}: {type(agent).__name__} is recurrent; use {rollout_name}_with_policy_state, "
                        f"which carries its policy state from one rollout to the next.")


def rollout(env, agent, agent_state, env_state: EnvState, key: jax.Array, rollout_length: int,
            env_ids: jax.Array | None = None):
    """Acts ``rollout_length`` steps with ``agent.compute_actions`` (sampled actions).

    Environment ``i`` samples its action at step ``t`` with ``fold_in(key_t, env_ids[i])``,
    so what an environment does depends only on its global index, not on how the
    environments are split across devices (``env_ids`` defaults to ``arange(B)``).
    Returns ``(env_state, trajectory [T, B, ...], episode_stats)``. A recurrent agent's state
    must outlive the rollout: :func:`rollout_with_policy_state`.
    """
    feed_forward_only(agent, "rollout")
    env_state, _, trajectory, stats = rollout_with_policy_state(
        env, agent, agent_state, env_state, None, key, rollout_length, env_ids)
    return env_state, trajectory, stats


def rollout_with_policy_state(env, agent, agent_state, env_state: EnvState, policy_state: Any, key: jax.Array,
                              rollout_length: int, env_ids: jax.Array | None = None):
    """:func:`rollout` for any agent: ``agent.policy_step`` acts with ``policy_state`` (leaves
    ``[B, ...]``; None for a feed-forward agent), which is reset to
    ``agent.initial_policy_state`` where an episode starts; a recurrent agent stores the state
    each step acted with in ``extras["policy_state"]`` ``[T, B, ...]``. Returns ``(env_state,
    policy_state, trajectory [T, B, ...], episode_stats)``.
    """
    num_envs = env_state.reward.shape[0]
    if env_ids is None:
        env_ids = jnp.arange(num_envs)
    initial = agent.initial_policy_state(num_envs)

    def step(carry, step_key):
        env_state, policy_state, stats = carry
        env_keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(step_key, env_ids)  # [B]
        policy_state = reset_policy_state(policy_state, env_state.done, initial)
        actions, extras, policy_state = agent.policy_step(agent_state, policy_state, env_state.obs, env_keys)
        next_state = vary_like(env.step(env_state, agent.to_env_action(actions)), env_state)  # split envs: see vary_like
        transition = Trajectory(
            obs=env_state.obs,
            actions=actions,
            rewards=next_state.reward,
            terminated=next_state.terminated,
            truncated=next_state.truncated,
            next_obs=next_state.final_obs,
            extras=extras,
        )
        return (next_state, policy_state, stats.add(next_state, actions)), transition

    keys = jax.random.split(hardware.fast_key(key), rollout_length)  # same bits on every path (evorl.hardware)
    carry = (env_state, policy_state, EpisodeStats.zeros(like=env_state.reward, env_faults=True))
    (env_state, policy_state, stats), trajectory = lax.scan(step, carry, keys)
    return env_state, policy_state, trajectory, stats

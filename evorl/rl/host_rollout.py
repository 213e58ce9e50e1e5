"""Collecting time-major trajectories ``[T, B, ...]`` from host environments.

:func:`host_rollout_with_policy_state` is :func:`evorl.rl.rollout.rollout_with_policy_state`
for a :class:`~evorl.envs.host_env.HostVectorEnv` (:func:`host_rollout`: of
:func:`evorl.rl.rollout.rollout`): the same :class:`~evorl.rl.rollout.Trajectory` and
:class:`~evorl.rl.rollout.EpisodeStats` (as NumPy arrays), and the same actions for the same key,
policy and observations. Step ``t`` uses ``key_t = split(key, T)[t]``, environment ``i``
samples with ``fold_in(key_t, env_ids[i])``, and the policy is ``agent.policy_step`` (an
agent's: ``vmap(agent.compute_actions, in_axes=(None, 0, 0))``, or its recurrent core; an
off-policy agent's behaviour policy: its exploration). A recurrent policy's state stays on
the device between steps and is reset to ``agent.initial_policy_state`` where an episode
starts. The policy side of a step (keys, state reset, sampling, ``to_env_action``) is one
jitted call; the environment side runs on the host.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evorl.envs.env import EnvState
from evorl.rl.rollout import EpisodeStats, Trajectory, feed_forward_only, reset_policy_state

class PolicyStep:
    """The jitted policy side of one rollout step of :func:`host_rollout_with_policy_state`:
    ``act(agent_state, obs [B, ...], step_keys [T], t [], env_ids [B], policy_state, starts [B])
    -> ((actions [B, ...], extras, env_actions [B, ...]), next policy_state)``. A recurrent
    ``policy_state`` (leaves ``[B, ...]``) is first reset where ``starts`` (the previous step
    ended an episode: this one acts on a fresh episode's first observation); ``policy_state``
    and ``starts`` are None for a feed-forward policy.

    With ``num_agents > 1`` it acts for a population at once (one call for every agent):
    ``agent_state``, ``step_keys`` and every per-environment argument and output lead with
    ``[N]``, and each agent acts as it would alone (the same env ids ``[B]``, its own keys)."""

    def __init__(self, agent, num_agents: int = 1):
        self.num_agents = int(num_agents)

        def policy_step(agent_state, obs, step_keys, t, env_ids, policy_state, starts):
            env_keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(step_keys[t], env_ids)  # [B]
            if policy_state is not None:
                policy_state = reset_policy_state(policy_state, starts, agent.initial_policy_state(obs.shape[0]))
            actions, extras, policy_state = agent.policy_step(agent_state, policy_state, obs, env_keys)
            return (actions, extras, agent.to_env_action(actions)), policy_state

        if self.num_agents > 1:
            policy_step = jax.vmap(policy_step, in_axes=(0, 0, 0, None, None, 0, 0))
        self._call = jax.jit(policy_step)

    def __call__(self, agent_state, obs, step_keys, t, env_ids, policy_state=None, starts=None):
        return self._call(agent_state, obs, step_keys, t, env_ids, policy_state, starts)

    def split_keys(self, key: jax.Array, rollout_length: int) -> jax.Array:
        """The step keys of a rollout: ``split(key, T)`` (``[T]``, or ``[N, T]`` for a population's ``key [N]``)."""
        if self.num_agents > 1:
            return jax.vmap(lambda k: jax.random.split(k, rollout_length))(key)
        return jax.random.split(key, rollout_length)


def make_policy_step(agent, num_agents: int = 1) -> PolicyStep:
    """The jitted policy side of one rollout step (:class:`PolicyStep`)."""
    return PolicyStep(agent, num_agents)


@functools.lru_cache(maxsize=16)
def cached_policy_step(agent, num_agents: int = 1) -> PolicyStep:
    """:func:`make_policy_step`, one per ``(agent, num_agents)``: the actors of a run share its
    compiled program."""
    return make_policy_step(agent, num_agents)


class TimedSteps:
    """A host env whose ``step`` records when the step in progress started (``time.monotonic``;
    None between steps), so that another thread can notice a stuck step. ``clock`` is where
    the time is kept, in ``clock[0]`` (NaN between steps): by default a private array; an
    actor process (:mod:`evorl.engine.actor_processes`) passes one its parent reads."""

    def __init__(self, env: Any, clock: np.ndarray | None = None):
        self._env = env
        self._clock = np.full((1,), np.nan) if clock is None else clock

    @property
    def step_started(self) -> float | None:
        started = float(self._clock[0])
        return None if np.isnan(started) else started

    def step(self, actions):
        self._clock[0] = time.monotonic()
        try:
            return self._env.step(actions)
        finally:
            self._clock[0] = np.nan

    def __getattr__(self, name):
        return getattr(self._env, name)


def _buffer(rollout_length: int, like: np.ndarray) -> np.ndarray:
    return np.empty((rollout_length,) + like.shape, like.dtype)  # [T, *like.shape]


def host_rollout(env, agent, agent_state, env_state: EnvState, key: jax.Array, rollout_length: int,
                 env_ids: np.ndarray | None = None, act: PolicyStep | None = None,
                 ) -> tuple[EnvState, Trajectory, EpisodeStats]:
    """Acts ``rollout_length`` steps of the host env ``env`` with a feed-forward
    ``agent.policy_step``: :func:`host_rollout_with_policy_state` without a policy state.
    Returns ``(env_state, trajectory [T, B, ...], episode_stats)`` as NumPy arrays, with the
    meaning of :func:`evorl.rl.rollout.rollout`'s. A recurrent agent's state must outlive the
    rollout: :func:`host_rollout_with_policy_state`."""
    feed_forward_only(agent, "host_rollout")
    env_state, _, trajectory, stats = host_rollout_with_policy_state(
        env, agent, agent_state, env_state, None, key, rollout_length, env_ids, act)
    return env_state, trajectory, stats


def host_rollout_with_policy_state(env, agent, agent_state, env_state: EnvState, policy_state: Any, key: jax.Array,
                                   rollout_length: int, env_ids: np.ndarray | None = None,
                                   act: PolicyStep | None = None) -> tuple[EnvState, Any, Trajectory, EpisodeStats]:
    """Acts ``rollout_length`` steps of the host env ``env`` with ``agent.policy_step``.

    ``env_state`` is the state ``env`` last returned (``reset`` or ``step``); ``policy_state``
    the recurrent state each environment's episode in progress reached (leaves ``[B, ...]``,
    on the device; ``agent.initial_policy_state(B)`` after a reset; None for a feed-forward
    policy); ``env_ids`` ``[B]`` the environments' global indices (default ``arange(B)``);
    ``act`` a :func:`make_policy_step` of ``agent`` to reuse (default: one cached per agent).
    Returns ``(env_state, policy_state, trajectory [T, B, ...], episode_stats)``, the
    trajectory and sums as NumPy arrays, with the meaning of
    :func:`evorl.rl.rollout.rollout_with_policy_state`'s (a recurrent agent's
    ``extras["policy_state"]`` holds the state each step acted with).

    A population (``act`` made for ``N`` agents): ``env`` steps ``[N, B]`` environments (agent
    ``n``'s are ``[n]``), ``agent_state`` and ``key`` lead with ``[N]``; the trajectory is
    ``[T, N, B, ...]`` and the episode sums ``[N]``.
    """
    if int(rollout_length) < 1:
        raise ValueError(f"rollout_length must be >= 1, got {rollout_length}")
    envs = env_state.reward.shape  # [B], or [N, B] for a population
    env_ids = jnp.arange(envs[-1]) if env_ids is None else jnp.asarray(env_ids)
    act = act or cached_policy_step(agent)
    step_keys = act.split_keys(key, rollout_length)  # [(N,) T]
    obs, next_obs = _buffer(rollout_length, env_state.obs), _buffer(rollout_length, env_state.final_obs)
    rewards = np.empty((rollout_length,) + envs, np.float32)  # [T, (N,) B]
    terminated = np.empty((rollout_length,) + envs, bool)  # [T, (N,) B]
    truncated = np.empty((rollout_length,) + envs, bool)  # [T, (N,) B]
    actions_buf = extras_buf = None
    return_sum = length_sum = count = np.float32(0.0)

    for t in range(rollout_length):
        # np.asarray per leaf, not jax.device_get: jax.device_get costs 70-100 us more per call on CPU
        if policy_state is None:
            outputs, _ = act(agent_state, env_state.obs, step_keys, np.int32(t), env_ids)
        else:
            outputs, policy_state = act(agent_state, env_state.obs, step_keys, np.int32(t), env_ids, policy_state,
                                        env_state.done)
        actions, extras, env_actions = jax.tree.map(np.asarray, outputs)
        if actions_buf is None:
            actions_buf = _buffer(rollout_length, np.asarray(actions))
            extras_buf = jax.tree.map(lambda x: _buffer(rollout_length, np.asarray(x)), extras)
        next_state = env.step(env_actions)
        obs[t], next_obs[t] = env_state.obs, next_state.final_obs
        rewards[t], terminated[t], truncated[t] = next_state.reward, next_state.terminated, next_state.truncated
        actions_buf[t] = actions
        jax.tree.map(lambda buf, x, t=t: buf.__setitem__(t, x), extras_buf, extras)
        done = next_state.done.astype(np.float32)  # [(N,) B]
        return_sum = np.float32(return_sum + np.sum(done * next_state.episode_return, axis=-1, dtype=np.float32))
        length_sum = np.float32(length_sum + np.sum(done * next_state.episode_length, axis=-1, dtype=np.float32))
        count = np.float32(count + np.sum(done, axis=-1, dtype=np.float32))
        env_state = next_state

    trajectory = Trajectory(obs=obs, actions=actions_buf, rewards=rewards, terminated=terminated,
                            truncated=truncated, next_obs=next_obs, extras=extras_buf)
    return env_state, policy_state, trajectory, EpisodeStats(return_sum, length_sum, count)

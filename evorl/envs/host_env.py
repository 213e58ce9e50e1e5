"""Environments stepped on the host (NumPy), with the semantics of the JAX ``VectorEnv``.

A :class:`HostVectorEnv` steps ``num_envs`` copies of a non-JAX environment (gymnasium,
envpool) in lock step and returns the same :class:`~evorl.envs.env.EnvState` as
:class:`~evorl.envs.vec_env.VectorEnv`, its arrays NumPy and ``backend_state`` and ``key``
None (the backend's state lives in the host objects, so the vector is stateful: ``step``
continues from the last ``reset`` / ``step``). The fields mean exactly what they mean there:

* ``obs`` ``[B, *obs_shape]``: the observation to act on, a fresh episode's first one on a
  step that ended an episode (the copy resets on the same step, not on the next call);
* ``final_obs`` ``[B, *obs_shape]``: the true next observation of the step, before a reset;
* ``reward`` ``[B]`` float32: the training reward, ``reward_scale * r`` (Atari with
  ``clip_rewards``: ``reward_scale * sign(r)``), ``r`` the env reward of the agent step;
* ``terminated`` / ``truncated`` ``[B]`` bool: the MDP ended / the episode reached a time
  limit (ours, ``episode_length`` agent steps, or the env's own truncation), never both;
* ``episode_return`` ``[B]`` float32 and ``episode_length`` ``[B]`` int32: the running
  unclipped, unscaled return and the agent steps of the current episode including this
  step; on a done step those of the episode that just ended, restarting on the next step.

Copy ``i`` is seeded with ``seed + i`` by ``reset(seed)``; its later episodes continue its
own random stream. ``action_repeat = k`` (non-Atari): one agent step holds the action for
``k`` env steps, fewer if the episode ends in between, and sums their rewards.

Subclasses implement three hooks over NumPy batches: :meth:`_start`, :meth:`_step_envs`,
:meth:`_restart_envs` (and :meth:`close`).
"""

from __future__ import annotations

import numpy as np

from evorl.envs.env import EnvState, checked_vector_settings, episode_step
from evorl.envs.spaces import Box, Discrete


class HostVectorEnv:
    """``num_envs`` host environments stepped in lock step (see the module docstring)."""

    #: Declared capability: ``reset`` / ``step`` run on the host, outside ``jit``.
    on_host = True

    obs_space: Box
    action_space: Box | Discrete
    env_name: str

    def __init__(self, num_envs: int, episode_length: int, reward_scale: float = 1.0,
                 action_repeat: int = 1, clip_rewards: bool = False):
        self.num_envs, self.episode_length, self.reward_scale, self.action_repeat = checked_vector_settings(
            num_envs, episode_length, reward_scale, action_repeat)
        self.clip_rewards = bool(clip_rewards)
        self._clear_episode_state()

    # --- backend hooks: NumPy batches, no resets, no statistics -------------------------
    def _start(self, seed: int) -> np.ndarray:
        """Seeds copy ``i`` with ``seed + i``, starts every episode; returns obs ``[B, ...]``."""
        raise NotImplementedError

    def _step_envs(self, actions: np.ndarray, ids: np.ndarray):
        """Steps the copies ``ids`` once with ``actions`` ``[len(ids), ...]``; returns
        ``(next_obs, reward float32, terminated, truncated)``, each ``[len(ids), ...]``."""
        raise NotImplementedError

    def _restart_envs(self, ids: np.ndarray) -> np.ndarray:
        """Starts a new episode in the copies ``ids`` (their episodes just ended); returns
        their first observations ``[len(ids), ...]``."""
        raise NotImplementedError

    def _detach(self) -> None:
        """Forgets the backend's live objects (a copy builds its own on its first reset)."""

    def close(self) -> None:
        """Closes the backend's environments; ``reset`` builds new ones."""

    # --- batched API ---------------------------------------------------------------------
    def reset(self, seed: int) -> EnvState:
        """Starts ``num_envs`` fresh episodes, copy ``i`` seeded with ``seed + i``."""
        obs = self._start(int(seed))
        b = self.num_envs
        self._episode_return = np.zeros((b,), np.float32)
        self._episode_length = np.zeros((b,), np.int32)
        self._done = np.zeros((b,), bool)
        return EnvState(
            backend_state=None, key=None, obs=obs, final_obs=obs.copy(),
            reward=np.zeros((b,), np.float32), terminated=np.zeros((b,), bool), truncated=np.zeros((b,), bool),
            episode_return=self._episode_return.copy(), episode_length=self._episode_length.copy(),
        )

    def step(self, actions: np.ndarray) -> EnvState:
        """Steps every copy once with ``actions`` ``[B, *action_shape]``; done copies reset."""
        if self._done is None:
            raise RuntimeError(f"{type(self).__name__}.step before reset(seed): call reset first.")
        actions = self._check_actions(actions)
        next_obs, raw_reward, terminated, env_truncated = self._repeat_step(actions)
        self._check_finite(actions, next_obs, raw_reward)
        episode_return, episode_length, truncated = episode_step(
            np, self._done, self._episode_return, self._episode_length, raw_reward, terminated, env_truncated,
            self.episode_length)
        done = terminated | truncated

        obs = next_obs.copy()
        ended = np.flatnonzero(done)
        if ended.size:
            obs[ended] = self._restart_envs(ended)
        self._episode_return, self._episode_length, self._done = episode_return, episode_length, done
        return EnvState(
            backend_state=None, key=None, obs=obs, final_obs=next_obs,
            reward=self.training_reward(raw_reward), terminated=terminated, truncated=truncated,
            episode_return=episode_return.copy(), episode_length=episode_length.copy(),
        )

    def training_reward(self, reward: np.ndarray) -> np.ndarray:
        """What learners see: ``reward_scale * r``, ``r`` clipped to ``sign(r)`` with
        ``clip_rewards``; ``[B]`` float32."""
        r = np.sign(reward) if self.clip_rewards else reward
        return (r * self.reward_scale).astype(np.float32)

    def with_num_envs(self, num_envs: int) -> "HostVectorEnv":
        """A new, independent vector of ``num_envs`` copies (same config; e.g. evaluation)."""
        if int(num_envs) < 1:
            raise ValueError(f"num_envs (parallel) must be >= 1, got {num_envs}")
        return self._replace(num_envs=int(num_envs))

    def for_evaluation(self) -> "HostVectorEnv":
        """The vector evaluation plays: whole episodes, ended only by the env's own terminal
        states and time limit. The env itself; an Atari env whose training episodes end at a
        lost life (``terminal_on_life_loss``) returns a copy that plays whole games."""
        return self

    def with_episode_length(self, episode_length: int) -> "HostVectorEnv":
        """A new, independent vector with another time limit (agent steps)."""
        if int(episode_length) < 1:
            raise ValueError(f"episode_length must be >= 1, got {episode_length}")
        return self._replace(episode_length=int(episode_length))

    # --- internals -----------------------------------------------------------------------
    def _check_finite(self, actions: np.ndarray, next_obs: np.ndarray, reward: np.ndarray) -> None:
        """Raises ``FloatingPointError`` naming the first copy whose reward or observation is
        not finite after a finite action (a non-finite action is the learner's, reported as
        divergence)."""
        broken = ~(np.isfinite(reward) & _rows_finite(next_obs)) & _rows_finite(actions)  # [B]
        if broken.any():
            i = int(np.flatnonzero(broken)[0])
            raise FloatingPointError(
                f"{self.env_name}: env copy {i} returned a non-finite reward or observation (reward {reward[i]}, "
                f"{int(np.sum(~np.isfinite(next_obs[i])))} non-finite observation entries) for a finite action; "
                f"{int(broken.sum())} of {self.num_envs} copies did this step. Fix the environment: its rewards and "
                f"observations must be finite.")

    def _replace(self, **attributes) -> "HostVectorEnv":
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__, **attributes)
        clone._detach()
        clone._clear_episode_state()
        return clone

    def _clear_episode_state(self) -> None:
        self._episode_return = self._episode_length = self._done = None

    def _check_actions(self, actions) -> np.ndarray:
        actions = np.asarray(actions)
        expected = (self.num_envs,) + self.action_space.shape
        if actions.shape != expected:
            raise ValueError(f"{self.env_name}: actions must have shape {expected} [B, *action_shape], got {actions.shape}")
        return actions

    def _repeat_step(self, actions: np.ndarray):
        """``action_repeat`` env steps with one action; a copy stops once its episode ended.
        Returns ``(next_obs, summed reward, terminated, truncated)``, each ``[B, ...]``."""
        ids = np.arange(self.num_envs)
        obs, reward, terminated, truncated = self._step_envs(actions, ids)
        reward = np.asarray(reward, np.float32).copy()
        for _ in range(self.action_repeat - 1):
            alive = np.flatnonzero(~(terminated | truncated))
            if alive.size == 0:
                break
            o, r, te, tr = self._step_envs(actions[alive], alive)
            obs[alive], terminated[alive], truncated[alive] = o, te, tr
            reward[alive] += r
        return obs, reward, terminated, truncated


def _rows_finite(x: np.ndarray) -> np.ndarray:
    """Per leading index, whether every entry of ``x [B, ...]`` is finite (bool ``[B]``;
    integer arrays always are)."""
    if not np.issubdtype(x.dtype, np.inexact):
        return np.ones(x.shape[:1], bool)
    return np.isfinite(x.reshape(x.shape[0], -1)).all(axis=1)

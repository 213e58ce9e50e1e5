"""The actor side of the actor-learner (:mod:`evorl.workflows.actor_learner`): the actor
threads, what they put on the queue, and the parameter store they take the learner's
newest parameters from."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evorl.rollout import EpisodeStats, Trajectory

#: How often a waiting learner or actor checks for failures, timeouts and stop requests.
POLL_SECONDS = 0.05


@dataclass
class Rollout:
    """What an actor puts on the queue."""

    actor: int
    version: int  # learner updates behind the parameters it was acted with
    trajectory: Trajectory  # [T, B_k, ...]
    episodes: EpisodeStats  # sums over the episodes that ended in it (host floats)


class ParameterStore:
    """The newest published agent state and its version (learner updates so far)."""

    def __init__(self):
        self._changed = threading.Condition()
        self._value: tuple[Any, int] | None = None

    def publish(self, agent_state: Any, version: int) -> None:
        with self._changed:
            self._value = (agent_state, version)
            self._changed.notify_all()

    def newest(self, newer_than: int, stop: threading.Event) -> tuple[Any, int] | None:
        """The newest ``(agent_state, version)`` with ``version > newer_than``, waiting for
        one; None once ``stop`` is set."""
        with self._changed:
            while not stop.is_set():
                if self._value is not None and self._value[1] > newer_than:
                    return self._value
                self._changed.wait(POLL_SECONDS)
        return None


class JaxEnvActorRollout:
    """A JAX env's environments of one actor: each rollout is one jitted call on ``device``,
    ``rollout_fn(acting_state, env_state, policy_state, key, env_ids) -> (env_state,
    policy_state, trajectory, episodes)``; a recurrent policy's state is carried from one
    rollout to the next (None for a feed-forward one)."""

    step_started = None  # a compiled rollout cannot hang in a Python env step

    def __init__(self, rollout_fn: Callable, env_state: Any, policy_state: Any, env_ids: np.ndarray, device: Any):
        self._rollout = rollout_fn
        self.env_state = jax.device_put(env_state, device)
        self.policy_state = jax.device_put(policy_state, device)
        self.env_ids = jax.device_put(jnp.asarray(env_ids), device)

    def __call__(self, agent_state, key):
        self.env_state, self.policy_state, trajectory, episodes = self._rollout(
            agent_state, self.env_state, self.policy_state, key, self.env_ids)
        return trajectory, episodes

    def close(self):
        pass


class HostEnvActorRollout:
    """A host vector env of one actor, stepped with one jitted policy call per step; a
    recurrent policy's state is carried from one rollout to the next (from
    ``policy.initial_policy_state`` when the envs are reset)."""

    def __init__(self, env: Any, policy: Any, rollout_length: int, env_ids: np.ndarray, seed: int):
        from evorl.host_rollout import TimedSteps, host_rollout_with_policy_state

        self._host_rollout = host_rollout_with_policy_state
        self.env = TimedSteps(env)
        self.policy, self.rollout_length, self.env_ids = policy, rollout_length, np.asarray(env_ids)
        self.env_state = self.policy_state = None
        self.seed = seed

    @property
    def step_started(self) -> float | None:
        return self.env.step_started

    def __call__(self, agent_state, key):
        if self.env_state is None:
            self.env_state = self.env.reset(self.seed)
            self.policy_state = self.policy.initial_policy_state(len(self.env_ids))
        self.env_state, self.policy_state, trajectory, episodes = self._host_rollout(
            self.env, self.policy, agent_state, self.env_state, self.policy_state, key, self.rollout_length,
            self.env_ids)
        return trajectory, episodes

    def close(self):
        self.env.close()


class Actor(threading.Thread):
    """One actor thread (see the module docstring); its counters are read by the learner."""

    def __init__(self, index: int, act: Any, key: jax.Array, device: Any, params: ParameterStore,
                 rollouts: queue.Queue, lockstep: bool, stop: threading.Event, failed: threading.Event):
        super().__init__(name=f"evorl-actor-{index}", daemon=True)
        self.index, self.act, self.device = index, act, device
        self.key = jax.device_put(key, device)
        self.params, self.rollouts, self.lockstep = params, rollouts, lockstep
        self.stop, self.failed = stop, failed
        self.error: str | None = None
        self.busy_seconds = 0.0  # in rollouts
        self.wait_seconds = 0.0  # for parameters or for room in the queue
        self.rollouts_done = 0

    def run(self):
        try:
            self._loop()
        except BaseException as e:  # noqa: BLE001: any failure must reach the learner
            self.error = "".join(traceback.format_exception(e))
            self.failed.set()
        finally:
            with contextlib.suppress(Exception):
                self.act.close()

    def _loop(self):
        last_version, local = -1, None
        split = jax.jit(lambda k: jax.random.split(k, 3))
        while not self.stop.is_set():
            start = time.monotonic()
            newest = self.params.newest(last_version if self.lockstep else -1, self.stop)
            if newest is None:
                return
            agent_state, version = newest
            if local is None or local[1] != version:
                local = (jax.device_put(agent_state, self.device), version)
            last_version = version
            acting = time.monotonic()
            self.wait_seconds += acting - start
            keys = split(self.key)
            self.key, rollout_key = keys[0], keys[1]
            trajectory, episodes = self.act(local[0], rollout_key)
            episodes = EpisodeStats(*(float(x) for x in (episodes.return_sum, episodes.length_sum, episodes.count)))
            jax.block_until_ready(trajectory)
            done = time.monotonic()
            self.busy_seconds += done - acting
            item = Rollout(self.index, version, trajectory, episodes)
            while not self.stop.is_set():
                try:
                    self.rollouts.put(item, timeout=POLL_SECONDS)
                    break
                except queue.Full:
                    continue
            self.wait_seconds += time.monotonic() - done
            self.rollouts_done += 1

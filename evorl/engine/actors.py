"""The actor side of the actor-learner (:mod:`evorl.engine.actor_learner`): the actor
threads, what they put on the queue, the parameter store they take the learner's newest
parameters from, the learner's bookkeeping of them, and the faults that end a run."""

from __future__ import annotations

import contextlib
import dataclasses
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

from evorl.rl.rollout import EpisodeStats, Trajectory

#: How often a waiting learner or actor checks for failures, timeouts and stop requests.
POLL_SECONDS = 0.05


class ActorLearnerError(RuntimeError):
    """The actor-learner stopped on a fault; ``state`` is the learner's newest state."""

    state: Any = None


class ActorFailed(ActorLearnerError):
    """An actor thread raised; the message holds its traceback."""


class EnvStepTimeout(ActorLearnerError):
    """A host environment step did not return within ``runner.env_step_timeout_seconds``."""


class EvaluationFailed(ActorLearnerError):
    """The evaluation's host environment raised, or did not return from a step within
    ``runner.env_step_timeout_seconds`` (:class:`~evorl.engine.evaluator.HostEnvFault`)."""


#: Policy-lag histogram buckets logged as ``actors/policy_lag_<bucket>`` (the last is ``>=``).
LAG_BUCKETS = (0, 1, 2, 3, 4)


@dataclass
class ChunkLog:
    """The learner's bookkeeping over one chunk of updates (host values)."""

    lags: list[int] = dataclasses.field(default_factory=list)
    queue_sizes: list[int] = dataclasses.field(default_factory=list)
    learner_wait: float = 0.0
    learner_busy: float = 0.0
    episodes: list[EpisodeStats] = dataclasses.field(default_factory=list)

    def actor_metrics(self, actors: list, before: list, wall: float, updates: int, queue_size: int,
                      steps_per_update: int) -> dict[str, float]:
        """The chunk's actor-side figures (see ``ActorLearnerExecutor.host_metrics``): ``before``
        holds each actor's ``(busy_seconds, wait_seconds, rollouts_done)`` at the chunk's start;
        ``steps_per_update`` the env steps one update learns from (all agents)."""
        lags = np.asarray(self.lags)
        out = {
            "actors/policy_lag_mean": float(lags.mean()),
            "actors/policy_lag_max": float(lags.max()),
        }
        for bucket in LAG_BUCKETS:
            last = bucket == LAG_BUCKETS[-1]
            share = np.mean(lags >= bucket) if last else np.mean(lags == bucket)
            out[f"actors/policy_lag_{bucket}{'plus' if last else ''}"] = float(share)
        out["actors/queue_fill"] = float(np.mean(self.queue_sizes)) / queue_size
        busy = sum(a.busy_seconds - b[0] for a, b in zip(actors, before))
        wait = sum(a.wait_seconds - b[1] for a, b in zip(actors, before))
        produced = sum(a.rollouts_done - b[2] for a, b in zip(actors, before))
        out["actors/actor_steps_per_s"] = produced * steps_per_update / len(actors) / wall
        out["actors/actor_wait_fraction"] = wait / max(busy + wait, 1e-9)
        out["actors/learner_steps_per_s"] = updates * steps_per_update / max(self.learner_busy, 1e-9)
        out["actors/learner_wait_fraction"] = self.learner_wait / wall
        return out


@dataclass
class Rollout:
    """What an actor puts on the queue."""

    actor: int
    version: int  # learner updates behind the parameters it was acted with
    trajectory: Trajectory  # [T, B_k, ...] ([N, T, B_k, ...] for a population)
    episodes: EpisodeStats  # sums over the episodes that ended in it (host arrays [] or [N])


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

    def interrupt(self):
        """Nothing to interrupt: a compiled rollout does not hang."""

    def close(self):
        pass


class AgentEnvs:
    """The host vector envs of a population's agents (one each, ``[B]`` environments) stepped
    as one ``[N, B]`` batch: ``reset(seeds)`` seeds agent ``n``'s with ``seeds[n]``, ``step``
    takes actions ``[N, B, ...]``; states are :class:`~evorl.envs.env.EnvState` of ``[N, B]``
    arrays."""

    def __init__(self, envs: list):
        self.envs = envs

    @staticmethod
    def _stack(states):
        return jax.tree.map(lambda *xs: np.stack(xs), *states)

    def reset(self, seeds: list[int]):
        return self._stack([env.reset(seed) for env, seed in zip(self.envs, seeds)])

    def step(self, actions: np.ndarray):
        return self._stack([env.step(a) for env, a in zip(self.envs, actions)])

    def close(self):
        for env in self.envs:
            env.close()


class HostEnvActorRollout:
    """The host vector envs of one actor (one per agent of a population, ``envs``), stepped
    with one jitted policy call per step for every agent; agent ``n``'s envs are seeded with
    ``seeds[n]`` (copy ``i`` with ``seeds[n] + i``). A recurrent policy's state is carried from
    one rollout to the next (from ``policy.initial_policy_state`` when the envs are reset).
    Trajectories are ``[T, B]``, or ``[N, T, B]`` for a population."""

    def __init__(self, envs: list, policy: Any, rollout_length: int, env_ids: np.ndarray, seeds: list[int],
                 clock: np.ndarray | None = None):
        """``clock``: where the start of the env step in progress is kept (see
        :class:`~evorl.rl.host_rollout.TimedSteps`)."""
        from evorl.rl.host_rollout import TimedSteps, cached_policy_step, host_rollout_with_policy_state

        self._host_rollout = host_rollout_with_policy_state
        self.num_agents = len(envs)
        self.env = TimedSteps(AgentEnvs(envs) if self.num_agents > 1 else envs[0], clock)
        self.act = cached_policy_step(policy, self.num_agents)
        self.policy, self.rollout_length, self.env_ids = policy, rollout_length, np.asarray(env_ids)
        self.env_state = self.policy_state = None
        self.seeds = list(seeds)

    @property
    def step_started(self) -> float | None:
        return self.env.step_started

    def __call__(self, agent_state, key):
        population = self.num_agents > 1
        if self.env_state is None:
            self.env_state = self.env.reset(self.seeds if population else self.seeds[0])
            initial = self.policy.initial_policy_state(len(self.env_ids))
            self.policy_state = jax.tree.map(lambda x: jnp.stack([x] * self.num_agents), initial) if population \
                else initial
        self.env_state, self.policy_state, trajectory, episodes = self._host_rollout(
            self.env, self.policy, agent_state, self.env_state, self.policy_state, key, self.rollout_length,
            self.env_ids, self.act)
        if population:  # [T, N, B] -> [N, T, B]
            trajectory = jax.tree.map(lambda x: np.swapaxes(x, 0, 1), trajectory)
        return trajectory, episodes

    def interrupt(self):
        """Nothing: a thread inside an env step cannot be stopped (it ends with the process)."""

    def close(self):
        self.env.close()


class Actor(threading.Thread):
    """One actor thread (see the module docstring); its counters are read by the learner."""

    def __init__(self, index: int, act: Any, key: jax.Array, device: Any, params: ParameterStore,
                 rollouts: queue.Queue, lockstep: bool, stop: threading.Event, failed: threading.Event,
                 split: Callable):
        """``split(key) -> (next key, rollout key)`` (over the agent axis for a population)."""
        super().__init__(name=f"evorl-actor-{index}", daemon=True)
        self.index, self.act, self.device, self.split = index, act, device, split
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
        except BaseException as e:  # noqa: BLE001 (any failure must reach the learner)
            self.error = "".join(traceback.format_exception(e))
            self.failed.set()
        finally:
            with contextlib.suppress(Exception):
                self.act.close()

    def _loop(self):
        last_version, local = -1, None
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
            self.key, rollout_key = self.split(self.key)
            trajectory, episodes = self.act(local[0], rollout_key)
            episodes = jax.tree.map(lambda x: np.asarray(x, np.float64), episodes)  # [] ([N]) on the host
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


def stop_actors(actors: list[Actor], stop: threading.Event, step_timeout: float, timeout: float = 10.0) -> list[str]:
    """Sets ``stop`` and joins the actors; returns the names of any still alive after
    ``timeout``. An actor whose env step has run past ``step_timeout`` is interrupted at once,
    any other still alive after ``timeout`` then: an actor process is killed; a thread inside
    an env step that never returns cannot be (a daemon thread, gone with the process)."""
    stop.set()
    now = time.monotonic()
    for actor in actors:
        started = actor.act.step_started
        if started is not None and now - started > step_timeout:
            actor.act.interrupt()
    deadline = time.monotonic() + timeout
    for actor in actors:
        actor.join(max(0.0, deadline - time.monotonic()))
    stuck = [a for a in actors if a.is_alive()]
    for actor in stuck:
        actor.act.interrupt()
        actor.join(1.0)
    return [a.name for a in actors if a.is_alive()]


def trajectory_like(policy: Any, acting_state: Any, obs: jax.Array) -> Trajectory:
    """A trajectory ``[T, B]`` of the structure an actor acting with ``policy`` produces from
    observations ``obs`` ``[T, B, *obs_shape]`` (values meaningless: used for its shapes and
    dtypes; a recurrent policy acts from its initial state at every step)."""
    t, b = obs.shape[:2]
    keys = jax.random.split(jax.random.PRNGKey(0), t * b).reshape((t, b, -1))
    initial = policy.initial_policy_state(b)
    act = jax.vmap(lambda obs, keys: policy.policy_step(acting_state, initial, obs, keys)[:2])  # over T
    actions, extras = act(obs, keys)
    zeros = jnp.zeros((t, b), jnp.float32)
    return Trajectory(obs=obs, actions=actions, rewards=zeros, terminated=zeros > 0, truncated=zeros > 0,
                      next_obs=obs, extras=extras)

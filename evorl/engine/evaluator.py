"""Evaluation: one episode in each of ``num_episodes`` parallel environments, with the greedy
policy (``agent.evaluate_actions``), or with sampled actions (``agent.compute_actions``,
``deterministic=False``: ``training.eval_deterministic``).

:class:`Evaluator` runs JAX environments inside one ``lax.while_loop``;
:class:`HostEvaluator` steps host environments (gymnasium, envpool) from Python with the
greedy policy jitted once; :func:`make_evaluator` picks by the env's declared ``on_host``.
Given a step timeout, a host evaluation plays in a thread of its own and a host env that
raises, or whose step does not return in time, ends it with :class:`HostEnvFault`.
"""

from __future__ import annotations

import threading
import time
import traceback

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax import lax

from evorl.envs.vec_env import VectorEnv
from evorl.rl.agent import Agent, AgentState
from evorl.rl.collectives import vary
from evorl.rl.host_rollout import TimedSteps

#: How often the thread waiting for a host evaluation checks its env step's time.
POLL_SECONDS = 0.05


class Evaluator:
    """Runs ``num_episodes`` greedy episodes (``agent.evaluate_actions``) side by side.

    Each environment plays exactly one episode, until it terminates or reaches the time
    limit; ``evaluate`` returns the episode returns and lengths ``[num_episodes]``. The time
    limit ends every episode within ``episode_length`` steps, so the loop always finishes.
    """

    def __init__(self, env: VectorEnv, agent: Agent, num_episodes: int, deterministic: bool = True):
        self.env = env.with_num_envs(num_episodes)
        self.agent = agent
        self.num_episodes = num_episodes
        self.deterministic = deterministic

    def evaluate(self, agent_state: AgentState, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        sample_key = None if self.deterministic else jax.random.fold_in(key, 1)  # resets use key itself
        returns, lengths, _ = greedy_episodes(self.env, self.agent, agent_state, key, sample_key=sample_key)
        return returns, lengths


@struct.dataclass
class ObsSums:
    """Sums over the observations the policy acted on: their count and the sums of
    ``d = obs - shift`` and ``d**2`` (see :func:`~evorl.rl.running_statistics.moments_from_shifted_sums`)."""

    count: jax.Array  # []
    sum_d: jax.Array  # [*obs_shape]
    sum_d2: jax.Array  # [*obs_shape]


def act(agent: Agent, agent_state: AgentState, policy_state, obs: jax.Array, key: jax.Array | None):
    """``(actions [E, ...], policy_state)`` for observations ``[E, ...]``: greedy with ``key``
    None, else sampled (``agent.policy_step``), environment ``i`` with ``fold_in(key, i)``."""
    if key is None:
        actions, _, policy_state = agent.policy_step(agent_state, policy_state, obs, None, greedy=True)
        return actions, policy_state
    keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, jnp.arange(obs.shape[0]))
    actions, _, policy_state = agent.policy_step(agent_state, policy_state, obs, keys)
    return actions, policy_state


def record_ended(xp, env_state, returns, lengths, active):
    """One evaluation step's bookkeeping, the same for JAX (``xp = jax.numpy``) and host
    (``xp = numpy``) environments: an environment still ``active`` whose episode ended at this
    step (``env_state.done``) records its ``episode_return`` and ``episode_length`` (float32)
    and stops being active; the others keep what they had. Each argument and output ``[E]``."""
    ended = active & env_state.done  # [E]
    returns = xp.where(ended, env_state.episode_return, returns)
    lengths = xp.where(ended, env_state.episode_length.astype(xp.float32), lengths)
    return returns, lengths, active & ~env_state.done


def greedy_episodes(env: VectorEnv, agent: Agent, agent_state: AgentState, key: jax.Array,
                    obs_shift: jax.Array | None = None,
                    axis_name: str | None = None,
                    sample_key: jax.Array | None = None,
                    with_terms: bool = False) -> tuple[jax.Array, jax.Array, ObsSums | None]:
    """One greedy episode (``agent.evaluate_actions``; with ``sample_key``, sampled actions,
    step ``t`` drawn with ``fold_in(sample_key, t)``) in each of ``env``'s ``E`` environments,
    in one ``lax.while_loop`` that stops when every episode has ended (terminated, or
    truncated by the time limit). Returns the episode returns and lengths ``[E]`` (the env's
    own unscaled return) and, with ``obs_shift [*obs_shape]``, the :class:`ObsSums` of the
    observations acted on before each episode ended. ``axis_name``: the device axis over which
    ``agent_state`` varies (each device plays its own policies). A recurrent policy starts
    every episode from its initial state and carries it through the episode.

    With ``with_terms``, a fourth output: each episode's return per reward term ``[E, K]``
    (``env.reward_terms``, :meth:`~evorl.envs.vec_env.VectorEnv.step_with_terms`)."""
    num_terms = len(env.reward_terms) if with_terms else 0

    def cond(carry):
        _, _, _, active, t, _, _, _ = carry
        return jnp.any(active) & (t < env.episode_length)

    def body(carry):
        env_state, returns, lengths, active, t, sums, policy_state, term_returns = carry
        if sums is not None:
            d = jnp.where(active.reshape((-1,) + (1,) * (env_state.obs.ndim - 1)), env_state.obs - obs_shift, 0.0)
            sums = ObsSums(sums.count + jnp.sum(active), sums.sum_d + jnp.sum(d, 0), sums.sum_d2 + jnp.sum(d * d, 0))
        step_key = None if sample_key is None else jax.random.fold_in(sample_key, t)
        actions, policy_state = act(agent, agent_state, policy_state, env_state.obs, step_key)
        if with_terms:
            env_state, terms = env.step_with_terms(env_state, agent.to_env_action(actions))  # terms [E, K]
            term_returns = term_returns + jnp.where(active[:, None], terms, 0.0)
        else:
            env_state = env.step(env_state, agent.to_env_action(actions))
        returns, lengths, active = record_ended(jnp, env_state, returns, lengths, active)
        return env_state, returns, lengths, active, t + 1, sums, policy_state, term_returns

    zeros = jnp.zeros((env.num_envs,), jnp.float32)
    sums = None
    if obs_shift is not None:
        sums = ObsSums(jnp.zeros((), jnp.float32), jnp.zeros_like(obs_shift), jnp.zeros_like(obs_shift))
    init = vary((env.reset(key), zeros, zeros, zeros == 0, sums, agent.initial_policy_state(env.num_envs)), axis_name)
    init = (*init[:4], jnp.zeros((), jnp.int32), *init[4:], vary(jnp.zeros((env.num_envs, num_terms)), axis_name))
    _, returns, lengths, _, _, sums, _, term_returns = lax.while_loop(cond, body, init)
    return (returns, lengths, sums, term_returns) if with_terms else (returns, lengths, sums)


class HostEnvFault(RuntimeError):
    """A host environment raised, or did not return from a step within the step timeout,
    while evaluating; the message is one line naming the env."""


class HostEvaluator:
    """:class:`Evaluator` for a :class:`~evorl.envs.host_env.HostVectorEnv`: environment ``i``
    plays exactly one greedy (or, ``deterministic=False``, sampled) episode, seeded ``seed + i``
    with ``seed`` drawn from ``key``; ``evaluate`` returns NumPy float32 ``[num_episodes]``
    episode returns (the env's unclipped, unscaled ``episode_return``) and lengths (agent steps).

    With ``step_timeout`` (seconds; ``runner.env_step_timeout_seconds``) the episodes play in a
    thread of their own, watched by the caller's: an env step that has not returned by then, or
    an env that raises, ends ``evaluate`` with :class:`HostEnvFault`. A stuck step's thread is
    abandoned (a daemon; it stops once the step returns)."""

    def __init__(self, env, agent: Agent, num_episodes: int, deterministic: bool = True,
                 step_timeout: float | None = None):
        self.env = env.with_num_envs(num_episodes)
        self.agent = agent
        self.num_episodes = num_episodes
        self.deterministic = deterministic
        self.step_timeout = step_timeout

        def env_actions(agent_state, policy_state, obs, key):
            actions, policy_state = act(agent, agent_state, policy_state, obs, key)
            return agent.to_env_action(actions), policy_state

        self._act = jax.jit(env_actions)

    def evaluate(self, agent_state: AgentState, key: jax.Array) -> tuple[np.ndarray, np.ndarray]:
        if self.step_timeout is None:
            return self._play(self.env, agent_state, key, threading.Event())
        env, abandoned, outcome = TimedSteps(self.env), threading.Event(), {}

        def play():
            try:
                outcome["episodes"] = self._play(env, agent_state, key, abandoned)
            except BaseException as e:  # noqa: BLE001 (raised again in the caller's thread)
                outcome["error"] = e

        thread = threading.Thread(target=play, name="evorl-eval", daemon=True)
        thread.start()
        try:
            while thread.is_alive():
                thread.join(POLL_SECONDS)
                started = env.step_started
                if started is not None and time.monotonic() - started > self.step_timeout:
                    raise HostEnvFault(
                        f"evaluation: the environment step of {self.env.env_name} has not returned for "
                        f"{time.monotonic() - started:.0f} s (runner.env_step_timeout_seconds={self.step_timeout:g}): "
                        f"a stuck environment. Raise the timeout if its steps are legitimately that slow.")
        finally:
            abandoned.set()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["episodes"]

    def _play(self, env, agent_state: AgentState, key: jax.Array,
              abandoned: threading.Event) -> tuple[np.ndarray, np.ndarray]:
        """The episodes of :meth:`evaluate`; stops early (returning nothing) once ``abandoned``."""
        sample_key = jax.random.fold_in(key, 1)  # the resets' seed comes from key itself
        seed = int(jax.random.randint(key, (), 0, 2**31 - 1 - self.num_episodes))
        env_state = self._env_call(env.reset, seed)
        returns = np.zeros((self.num_episodes,), np.float32)  # [E]
        lengths = np.zeros((self.num_episodes,), np.float32)  # [E]
        active = np.ones((self.num_episodes,), bool)  # [E]
        policy_state = self.agent.initial_policy_state(self.num_episodes)
        for t in range(env.episode_length):  # the time limit ends every episode by then
            step_key = None if self.deterministic else jax.random.fold_in(sample_key, t)
            actions, policy_state = self._act(agent_state, policy_state, env_state.obs, step_key)
            env_state = self._env_call(env.step, np.asarray(actions))
            if abandoned.is_set():
                return None
            returns, lengths, active = record_ended(np, env_state, returns, lengths, active)
            if not active.any():
                break
        return returns, lengths

    def _env_call(self, method, argument):
        """``method(argument)`` of the env; with a step timeout, its exception as a one-line
        :class:`HostEnvFault` naming the env and where it was raised (the original chained)."""
        if self.step_timeout is None:
            return method(argument)
        try:
            return method(argument)
        except Exception as e:
            frame = traceback.extract_tb(e.__traceback__)[-1]
            what = " ".join(f"{type(e).__name__}: {e}".split())
            raise HostEnvFault(f"evaluation: the environment {self.env.env_name} raised {what} (in {frame.name}, "
                               f"{frame.filename}:{frame.lineno}).") from e


def each_agent(evaluate, num_agents: int):
    """A host env's ``evaluate(agent_state, key)`` over a population's agent axis, one agent
    after another (its envs are stepped in Python, outside any ``vmap``): ``(agent_state
    [N, ...], keys [N]) -> (returns [N, E], lengths [N, E])``."""

    def mapped(agent_state, keys):
        outs = [evaluate(jax.tree.map(lambda x, i=i: x[i], agent_state), keys[i]) for i in range(num_agents)]
        return tuple(np.stack(x) for x in zip(*outs))

    return mapped


def make_evaluator(env, agent: Agent, num_episodes: int, deterministic: bool = True,
                   step_timeout: float | None = None) -> Evaluator | HostEvaluator:
    """The evaluator for ``env``: :class:`HostEvaluator` (with ``step_timeout``) when it
    declares ``on_host``."""
    if env.on_host:
        return HostEvaluator(env, agent, num_episodes, deterministic, step_timeout)
    return Evaluator(env, agent, num_episodes, deterministic)

"""The on-policy algorithm: one training iteration as a pure function of the training state.

:func:`make_iteration` builds ``iteration(state) -> (state, metrics)`` from an env, an agent,
an optimiser, the training config and the device axis name. Read top to bottom it is the
whole algorithm PPO, A2C and IMPALA share:

1. roll out ``T = rollout_length`` steps in the ``B`` environments (with the parameters of
   ``actor_lag`` iterations ago when ``actor_lag > 0``);
2. update the running observation statistics;
3. let the agent add its targets to the trajectory (GAE; nothing when its loss computes
   V-trace itself);
4. set this iteration's learning rate (linear annealing, :mod:`evorl.rl.learner`);
5. ``num_epochs`` passes over ``num_minibatches`` shuffled minibatches, one
   :func:`~evorl.rl.collectives.agent_gradient_update` each (skipping the rest of the
   iteration once an agent that ``stops_early`` says so).

How the iteration is run (a population of agents, devices, chunks of iterations in one
compiled program) is the execution layer's business (:mod:`evorl.engine.execution`);
with ``axis_name`` set, the iteration is one device's share of a data-parallel step and
reduces gradients, statistics and metrics over that axis.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax import lax

from evorl import hardware
from evorl.config import TrainingConfig
from evorl.envs import EnvState, VectorEnv
from evorl.rl import metrics as M
from evorl.rl.agent import Agent, AgentState, hparams_as_arrays
from evorl.rl.collectives import agent_gradient_update, axis_index
from evorl.rl.learner import acting_state, anneal_iterations, init_lagged_params, scheduled_learning_rate
from evorl.rl.rollout import EpisodeStats, Trajectory, rollout_with_policy_state
from evorl.rl.state_roles import role_field


@struct.dataclass
class OnPolicyState:
    key: jax.Array
    agent_state: AgentState = role_field("frozen", "pbt_copy")
    opt_state: Any = role_field("frozen", "pbt_copy")
    #: Leading axis [B] (split across devices when the envs are); None in the asynchronous
    #: learner's state (its actors hold the environments).
    env_state: EnvState | None = role_field("env", "actor", "pbt_keep")
    learning_rate: jax.Array = role_field("pbt_copy")  # [] base learning rate (annealed per iteration)
    iteration: jax.Array  # [] int32, completed iterations
    #: Parameters at the start of the last ``actor_lag`` iterations, oldest first (leaves
    #: ``[actor_lag, ...]``); the rollout acts with the oldest. None when ``actor_lag = 0``.
    lagged_params: Any = role_field("frozen", "pbt_copy", default=None)
    #: Sums over the training episodes that ended since the last PBT step (its ``fitness:
    #: train``); None without PBT (see :mod:`evorl.engine.pbt`).
    fitness_episodes: Any = role_field("pbt_keep", default=None)
    #: A recurrent agent's state of each environment's episode in progress (leaves ``[B, ...]``,
    #: carried from one rollout to the next); None for a feed-forward agent.
    policy_state: Any = role_field("env", "actor", "pbt_keep", default=None)
    #: ``pbt.strategy: cso``: the velocity ``[H]`` of the evolving hyperparameters (in the
    #: coordinates the swarm moves in, see :mod:`evorl.engine.pbt`); None otherwise.
    pbt_velocity: Any = None
    #: ``[]`` int32, the iterations the learning rate anneals over (``training.num_iterations``
    #: with ``training.anneal_lr``; None without annealing). Data, not a constant of the
    #: compiled program, so a run resumed with another length runs the program it compiled
    #: (and cached) before; set from the run's config at every start, never from a checkpoint.
    anneal_iterations: Any = role_field("from_config", default=None)


def init_state(env: VectorEnv | None, agent: Agent, optimizer, tc: TrainingConfig,
               key: jax.Array, hparams: Any, learning_rate: jax.Array) -> OnPolicyState:
    """A fresh training state: agent with ``hparams``, optimiser, reset environments (none
    with ``env=None``: a learner whose actors own their environments), the annealing's length."""
    key, agent_key, env_key = jax.random.split(key, 3)
    agent_state = agent.init(agent_key).replace(hparams=hparams_as_arrays(hparams))
    return OnPolicyState(
        key=key,
        agent_state=agent_state,
        opt_state=optimizer.init(agent_state.params),
        env_state=None if env is None else env.reset(env_key),
        learning_rate=jnp.asarray(learning_rate, jnp.float32),
        iteration=jnp.zeros((), jnp.int32),
        lagged_params=init_lagged_params(agent_state.params, tc.actor_lag),
        policy_state=None if env is None else agent.initial_policy_state(env.num_envs),
        anneal_iterations=anneal_iterations(tc),
    )


def make_learner_update(agent: Agent, optimizer: optax.GradientTransformation, tc: TrainingConfig,
                        axis_name: str | None = None):
    """What the learner does with a batch of rollouts ``trajectory [T, B]``: steps 2-5 of the
    module docstring. Returns ``update(state, trajectory, key) -> (state, loss metrics)``
    (``state.iteration`` counts the update; ``key`` drives the minibatch shuffles).

    The fused iteration (:func:`make_iteration`) and the asynchronous learner
    (:mod:`evorl.engine.actor_learner`) both call it: one loss, one update."""
    gradient_update = agent_gradient_update(agent.loss, optimizer, axis_name=axis_name, has_aux=True)

    def update(state: OnPolicyState, trajectory: Trajectory, key: jax.Array) -> tuple[OnPolicyState, dict]:
        agent_state = agent.update_obs_statistics(state.agent_state, trajectory.obs, axis_name)
        trajectory = agent.compute_targets(agent_state, trajectory)

        opt_state = scheduled_learning_rate(state.opt_state, state.learning_rate, state.iteration,
                                            state.anneal_iterations)
        agent_state, opt_state, loss_metrics = update_epochs(
            agent, gradient_update, tc.num_epochs, tc.num_minibatches, axis_name,
            agent_state, opt_state, trajectory, key,
        )
        return state.replace(agent_state=agent_state, opt_state=opt_state, iteration=state.iteration + 1), loss_metrics

    return update


def episode_metrics(episodes: EpisodeStats, axis_name: str | None) -> dict[str, M.Metric]:
    """The sums over the episodes that ended (and the env steps the environment returned
    non-finite values for, where counted), reduced over the device axis."""
    faults = {} if episodes.env_faults is None else {"env_faults": M.Metric(episodes.env_faults, "sum")}
    return M.over_devices({
        "episode_return_sum": M.Metric(episodes.return_sum, "sum"),
        "episode_length_sum": M.Metric(episodes.length_sum, "sum"),
        "episode_count": M.Metric(episodes.count, "sum"),
        **faults,
    }, axis_name)


def make_iteration(env: VectorEnv, agent: Agent, optimizer: optax.GradientTransformation, tc: TrainingConfig,
                   axis_name: str | None = None) -> Callable[[OnPolicyState], tuple[OnPolicyState, dict]]:
    """One training iteration (see the module docstring); metrics are :class:`~evorl.rl.metrics.Metric`
    scalars, already reduced over ``axis_name``."""
    learner_update = make_learner_update(agent, optimizer, tc, axis_name)

    def iteration(state: OnPolicyState) -> tuple[OnPolicyState, dict]:
        key, rollout_key, update_key = jax.random.split(hardware.fast_key(state.key), 3)  # same bits (evorl.hardware)
        actor_state, lagged_params = acting_state(state.agent_state, state.lagged_params)
        local_envs = state.env_state.reward.shape[0]
        env_ids = axis_index(axis_name) * local_envs + jnp.arange(local_envs)  # global env indices [B]
        env_state, policy_state, trajectory, episodes = rollout_with_policy_state(
            env, agent, actor_state, state.env_state, state.policy_state, rollout_key, tc.rollout_length, env_ids
        )  # trajectory [T, B, ...]
        state, loss_metrics = learner_update(state, trajectory, update_key)
        metrics = {**loss_metrics, **episode_metrics(episodes, axis_name)}
        state = state.replace(key=hardware.raw_key(key), env_state=env_state, policy_state=policy_state, lagged_params=lagged_params)
        return state, metrics

    return iteration


def update_epochs(agent: Agent, gradient_update, num_epochs: int, num_minibatches: int, axis_name: str | None,
                  agent_state: AgentState, opt_state, trajectory: Trajectory, key: jax.Array):
    """``num_epochs`` passes of ``num_minibatches`` gradient steps on ``trajectory [T, B]``.

    Returns ``(agent_state, opt_state, metrics)``: the loss metrics reduced over the steps
    taken (each as it declares, see :mod:`evorl.rl.metrics`) and ``gradient_steps``. An agent that
    ``stops_early`` skips the remaining steps of the iteration once ``agent.stop_updates`` is
    true; the step whose check fails is computed, not applied.
    """

    def minibatch_step(carry, inputs):
        agent_state, opt_state, stopped = carry
        batch, loss_key = inputs

        def do_update(_):
            (_, metrics), new_agent_state, new_opt_state = gradient_update(opt_state, agent_state, batch, loss_key)
            metrics = M.over_devices(jax.tree.map(jnp.mean, metrics), axis_name)
            return new_agent_state, new_opt_state, metrics

        if stopped is None:  # an agent that never stops early
            agent_state, opt_state, metrics = do_update(None)
            return (agent_state, opt_state, None), (metrics, jnp.ones((), jnp.float32))
        # Once stopped, skip the work.
        shapes = jax.eval_shape(do_update, None)[2]
        new_agent_state, new_opt_state, metrics = lax.cond(
            stopped,
            lambda _: (agent_state, opt_state, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)),
            do_update,
            None,
        )
        stopped = stopped | agent.stop_updates(agent_state, {k: m.value for k, m in metrics.items()})
        keep = lambda new, old: jnp.where(stopped, old, new)  # noqa: E731
        agent_state = jax.tree.map(keep, new_agent_state, agent_state)
        opt_state = jax.tree.map(keep, new_opt_state, opt_state)
        return (agent_state, opt_state, stopped), (metrics, 1.0 - stopped.astype(jnp.float32))

    def epoch(carry, epoch_key):
        perm_key, loss_key = jax.random.split(epoch_key)
        batches = shuffled_minibatches(trajectory, perm_key, num_minibatches, agent.sequence_minibatches)
        return lax.scan(minibatch_step, carry, (batches, jax.random.split(loss_key, num_minibatches)))

    stopped = jnp.zeros((), bool) if agent.stops_early else None
    (agent_state, opt_state, _), (metrics, taken) = lax.scan(
        epoch, (agent_state, opt_state, stopped), jax.random.split(key, num_epochs)
    )  # metrics and taken [E, M]
    metrics = M.over_steps(metrics, taken)
    metrics["gradient_steps"] = M.Metric(jnp.sum(taken))
    return agent_state, opt_state, metrics


def shuffled_minibatches(trajectory: Trajectory, key: jax.Array, num_minibatches: int,
                         whole_sequences: bool) -> Trajectory:
    """Shuffled minibatches ``[M, ...]``: of transitions ``[M, T*B/M, ...]``, or with
    ``whole_sequences`` of sequences ``[M, T, B/M, ...]`` (envs shuffled, time kept)."""
    m = num_minibatches
    if whole_sequences:
        num_envs = trajectory.rewards.shape[1]
        perm = hardware.permutation(key, num_envs)  # = jax.random.permutation's

        def split(x):  # [T, B, ...] -> [M, T, B/M, ...]
            x = hardware.take_permuted(x, perm, axis=1)
            x = x.reshape((x.shape[0], m, num_envs // m) + x.shape[2:])
            return jnp.swapaxes(x, 0, 1)
    else:
        n = trajectory.rewards.shape[0] * trajectory.rewards.shape[1]  # a multi-agent step's agents stay together
        perm = hardware.permutation(key, n)  # = jax.random.permutation's

        def split(x):  # [T, B, ...] -> [M, T*B/M, ...]
            x = hardware.take_permuted(x.reshape((n,) + x.shape[2:]), perm, axis=0)
            return x.reshape((m, n // m) + x.shape[1:])

    return jax.tree.map(split, trajectory)

"""Off-policy RL from a replay buffer: one training iteration as a pure function
(``OffPolicyWorkflow``, which runs it on the shared host loop and execution layer, is
:mod:`evorl.engine.off_policy_workflow`).

:func:`make_iteration` builds ``iteration(state) -> (state, metrics)``; read top to bottom:

1. roll out ``T = rollout_length`` steps in the ``B = num_envs`` environments with the
   agent's behaviour policy (``agent.behaviour``: epsilon-greedy for DQN; uniformly random
   actions for the first ``warmup_steps`` env steps; :class:`~evorl.rl.behaviour.BehaviourPolicy`),
   with the parameters of ``training.actor_lag`` iterations ago when it is > 0 (the
   actor-learner's policy lag, reproduced on the fused runner);
2. turn the ``[T, B]`` rollout into ``n_step`` transitions (:func:`evorl.rl.replay.n_step_transitions`,
   truncation-aware) and add them to the replay buffer in the state;
3. once the buffer holds ``learning_starts`` transitions: ``num_updates`` gradient steps,
   each on ``batch_size`` transitions sampled uniformly from the buffer. A gradient step
   updates the agent's parameter groups in the order it declares (:class:`UpdateGroup`:
   DQN's ``q``; TD3's ``critic`` then, every ``policy_delay`` steps, ``actor``; SAC's
   ``critic``, ``actor``, ``alpha``), each by its own loss and its own Adam state; then the
   target parameters (the agent's ``target_keys``) move every ``target_update_period``
   gradient steps, :math:`\\bar\\theta \\leftarrow \\tau \\theta + (1 - \\tau) \\bar\\theta`
   (``tau = 1``: a copy). Before then the same program runs with the updates skipped (``lax.cond``;
   in a population too, where the cond is taken once for all agents: no agent pays for
   gradient steps before its learning starts, :func:`evorl.rl.collectives.population_cond`).
   On the fused runner the iterations known to come before the learning start (the buffer
   gains ``num_envs x rollout_length`` transitions an iteration:
   :func:`iterations_before_learning`) run a program of their own without the learning
   (``make_iteration(..., warmup=True)``, the executor's :class:`~evorl.engine.execution.Warmup`):
   the same state and metrics without the conditional, whose outputs XLA copies into the
   loop's carry every iteration (for a population, most of a warm-up iteration's time).

Steps 2 and 3 are :func:`make_learner_update`, the one update of both runners. With
``runner.mode=async`` (the default for host envs: gymnasium, MuJoCo, envpool) the actors of
:mod:`evorl.engine.actor_learner` do step 1: they act with :class:`~evorl.rl.behaviour.BehaviourPolicy` on the
:class:`~evorl.rl.behaviour.ActingState` the learner publishes after each update (its agent and the env steps it
has received, ``iteration x num_envs x rollout_length``: the warm-up and DQN's epsilon count
those), and the learner runs :func:`make_learner_update` on each ``[T, B]`` batch they send.
One agent, one device: no populations, PBT or several devices there.

The executor (:class:`~evorl.engine.execution.Executor`) runs it in compiled chunks,
vmapped over a population (``training.num_seeds`` x hyperparameter lists); the host loop of
:class:`~evorl.engine.host_loop.ChunkedWorkflow` evaluates the greedy policy, logs and
checkpoints (the buffer is part of the state, so a resumed run continues exactly, unless
``checkpoint.save_buffer: false`` leaves it out). Each agent of a population keeps its own
buffer, and PBT's step copies a replaced agent's networks, Adam states and targets but not its
buffer. On several devices, ``distributed.layout=population`` puts whole agents on each device;
``distributed.layout=envs`` (the default) splits each agent's environments and its buffer's
columns (:mod:`evorl.rl.replay`: one column per environment) over the devices: each device steps
its environments and stores their transitions, every device draws the same batch from the
whole buffer and takes the same gradient steps (:func:`make_learner_update`), so the run
equals the 1-device run and its checkpoints resume on any device count.
An algorithm supplies an agent with ``init``, ``update_groups`` (each a params key, a loss
``(agent_state, target_params, batch, key) -> (loss, metrics)`` and a period), ``target_keys``,
``behaviour(agent_state, env_steps, random_actions)`` and ``evaluate_actions``
(:mod:`evorl.algorithms.dqn`, :mod:`evorl.algorithms.td3`, :mod:`evorl.algorithms.sac`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax import lax

from evorl import hardware
from evorl.config.training import OffPolicyTrainingConfig
from evorl.envs import EnvState, VectorEnv
from evorl.rl import metrics as M, replay
from evorl.rl.agent import Agent, AgentState, hparams_as_arrays
from evorl.rl.behaviour import BehaviourPolicy, acting_state
from evorl.rl.collectives import agent_gradient_update, axis_index, population_cond
from evorl.rl.learner import (
    acting_state as lagged_agent_state, anneal_iterations, init_lagged_params, scheduled_learning_rate,
)
from evorl.rl.on_policy import episode_metrics
from evorl.rl.rollout import Trajectory, rollout_with_policy_state
from evorl.rl.state_roles import role_field



@dataclass(frozen=True)
class UpdateGroup:
    """One parameter group of an off-policy agent and how a gradient step updates it:
    ``agent_state.params[key]`` descends ``loss(agent_state, target_params, batch, key) ->
    (scalar, metrics)`` (the gradient is taken with respect to this group only; the other
    groups enter the loss as constants) on gradient steps ``k`` with ``k % period == 0``
    (``k`` counts from 0; TD3's delayed actor has ``period = policy_delay``)."""

    key: str
    loss: Callable[..., tuple[jax.Array, dict]]
    period: int = 1


@struct.dataclass
class OffPolicyState:
    key: jax.Array
    agent_state: AgentState = role_field("frozen", "pbt_copy")
    opt_state: Any = role_field("frozen", "pbt_copy")  # {group key: that group's optimiser state}
    #: {target key: the target network's parameters} (the bootstrap values' networks)
    target_params: Any = role_field("frozen", "pbt_copy")
    #: Split over the devices (``distributed.layout=envs``) by its columns, the environments' axis;
    #: its rows stay whole on each device.
    buffer: replay.ReplayBuffer = role_field("env", "pbt_keep", "buffer",
                                             env_axis=replay.ReplayBuffer(data=1, position=None, size=None))
    #: Leading axis [B]; None in the asynchronous learner's state (its actors hold the envs).
    env_state: EnvState | None = role_field("env", "actor", "pbt_keep")
    learning_rate: jax.Array = role_field("pbt_copy")  # [] base learning rate
    iteration: jax.Array  # [] int32, completed iterations
    gradient_steps: jax.Array  # [] int32, gradient steps taken (the target update period counts them)
    #: Sums over the training episodes that ended since the last PBT step (its ``fitness:
    #: train``); None without PBT (see :mod:`evorl.engine.pbt`).
    fitness_episodes: Any = role_field("pbt_keep", default=None)
    #: The agent's parameters at the start of the last ``training.actor_lag`` iterations,
    #: oldest first (leaves ``[actor_lag, ...]``); the rollout acts with the oldest. None
    #: without lag (see :func:`evorl.rl.learner.acting_state`).
    lagged_params: Any = role_field("frozen", "pbt_copy", default=None)
    #: ``pbt.strategy: cso``: the velocity ``[H]`` of the evolving hyperparameters (see
    #: :mod:`evorl.engine.pbt`); None otherwise.
    pbt_velocity: Any = None
    #: ``[]`` int32, the iterations the learning rate anneals over; None without annealing
    #: (as :class:`evorl.rl.on_policy.OnPolicyState`'s: set from the config, never restored).
    anneal_iterations: Any = role_field("from_config", default=None)


def init_state(env: VectorEnv, agent: Agent, optimizer, tc: OffPolicyTrainingConfig,
               key: jax.Array, hparams: Any, learning_rate: jax.Array) -> OffPolicyState:
    """A fresh training state: agent with ``hparams``, one optimiser state per update group,
    targets = online parameters, an empty buffer of ``tc.buffer_size`` transitions in rows of
    one per environment (``tc.num_envs`` wide, the axis several devices split), reset
    environments (none for a host env: the actors that own them reset them), the annealing's
    length."""
    key, agent_key, env_key = jax.random.split(key, 3)
    agent_state = agent.init(agent_key).replace(hparams=hparams_as_arrays(hparams))
    env_state = None if env.on_host else env.reset(env_key)  # a host env's actors reset their own
    obs = jnp.zeros(env.obs_space.shape, env.obs_space.dtype) if env.on_host else \
        jnp.zeros(env_state.obs.shape[1:], env_state.obs.dtype)
    action = jax.eval_shape(agent.evaluate_actions, agent_state, obs[None])  # [1, ...]
    reward = jnp.zeros(getattr(env, "reward_shape", ()), jnp.float32)  # [n_agents] for a multi-agent env
    example = replay.Transition(obs=obs, action=jnp.zeros(action.shape[1:], action.dtype), reward=reward,
                                discount=jnp.zeros((), jnp.float32), next_obs=obs)
    return OffPolicyState(
        key=key, agent_state=agent_state,
        opt_state={group.key: optimizer.init(agent_state.params[group.key]) for group in agent.update_groups},
        target_params={k: agent_state.params[k] for k in agent.target_keys}, buffer=replay.init(example, tc.buffer_size, tc.num_envs), env_state=env_state,
        learning_rate=jnp.asarray(learning_rate, jnp.float32), iteration=jnp.zeros((), jnp.int32),
        gradient_steps=jnp.zeros((), jnp.int32), lagged_params=init_lagged_params(agent_state.params, tc.actor_lag),
        anneal_iterations=anneal_iterations(tc),
    )


def group_step(group: UpdateGroup, optimizer, named_grad_norm: bool, population_axis: str | None = None):
    """``step(opt_states, agent_state, target_params, batch, key, gradient_steps) -> (opt_states,
    agent_state, metrics, applied)``: one optimiser step on ``group``'s parameters when its
    period divides ``gradient_steps``, else nothing (``applied`` 0, metrics zeros); in a
    population vmapped over ``population_axis`` the step is skipped for all agents at once."""

    def loss_of_group(view, params, target_params, batch, key):  # view.params: this group's
        return group.loss(view.replace(params={**params, group.key: view.params}), target_params, batch, key)

    update = agent_gradient_update(loss_of_group, optimizer, has_aux=True)

    def apply(opt_states, agent_state, target_params, batch, key):
        view = agent_state.replace(params=agent_state.params[group.key])
        (_, metrics), view, opt_state = update(opt_states[group.key], view, agent_state.params, target_params, batch, key)
        if named_grad_norm:
            metrics = {(f"{group.key}_grad_norm" if k == "grad_norm" else k): v for k, v in metrics.items()}
        return ({**opt_states, group.key: opt_state}, agent_state.replace(params={**agent_state.params, group.key: view.params}),
                metrics)

    def step(opt_states, agent_state, target_params, batch, key, gradient_steps):
        if group.period == 1:
            return (*apply(opt_states, agent_state, target_params, batch, key), jnp.ones(()))
        shapes = jax.eval_shape(apply, opt_states, agent_state, target_params, batch, key)[2]
        skip = lambda o, a, *_: (o, a, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes))  # noqa: E731
        due = gradient_steps % group.period == 0
        return (*population_cond(due, apply, skip, opt_states, agent_state, target_params, batch, key,
                                 axis_name=population_axis), due.astype(jnp.float32))

    return step


def polyak(tau: jax.Array | float, online: Any, target: Any) -> Any:
    r"""Polyak averaging of target networks, :math:`\bar\theta \leftarrow \tau \theta + (1 - \tau) \bar\theta`
    leaf by leaf (``optax.incremental_update``; ``tau = 1``: a copy)."""
    return optax.incremental_update(online, target, tau)


def gradient_step(steps, opt_state, agent_state, target_params, batch, keys, gradient_steps):
    """One gradient step of an agent's update groups, in its order (a later group sees the
    earlier ones updated): ``steps`` are :func:`group_step`'s, ``keys`` one per group. Returns
    ``(opt_state, agent_state, metrics, applied)``, the last two one entry per group."""
    metrics, applied = [], []
    for step, key in zip(steps, keys):
        opt_state, agent_state, group_metrics, group_applied = step(opt_state, agent_state, target_params, batch, key,
                                                                    gradient_steps)
        metrics.append(group_metrics)
        applied.append(group_applied)
    return opt_state, agent_state, metrics, applied


def add_rollout(buffer, trajectory: Trajectory, gamma: jax.Array, tc: OffPolicyTrainingConfig,
                axis_name: str | None = None):
    """Step 2 of the module docstring: the ``[T, B]`` rollout as ``tc.n_step`` transitions
    (truncation-aware, discounted by ``gamma`` until a termination) added to ``buffer``, T rows
    of this device's B environments. Returns the buffer."""
    discounts = gamma * (1.0 - trajectory.terminated.astype(jnp.float32))  # [T, B]
    transitions = replay.n_step_transitions(
        trajectory.obs, trajectory.actions, trajectory.rewards, discounts,
        trajectory.terminated | trajectory.truncated, trajectory.next_obs, tc.n_step)  # [T, B]
    return replay.add(buffer, jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), transitions),
                      axis_name)  # T rows of this device's B environments


def make_gradient_steps(steps: list, tc: OffPolicyTrainingConfig, axis_name: str | None = None):
    """Step 3 of the module docstring once learning has started: ``learn(carry, buffer, key) ->
    (carry, metrics)``, ``tc.num_updates`` gradient steps (a ``lax.scan``), each on a batch
    sampled from ``buffer`` (:func:`gradient_step` with :func:`group_step`'s ``steps``), then
    the targets' Polyak move every ``tc.target_update_period`` steps. ``carry`` is
    ``(agent_state, opt_state, target_params, gradient_steps)``; each group's metrics are
    averaged over the steps that applied it."""

    def update_step(buffer, carry, key):
        agent_state, opt_state, target_params, gradient_steps = carry
        sample_key, *group_keys = jax.random.split(key, 1 + len(steps))  # one key per group
        batch = replay.sample(buffer, sample_key, tc.batch_size, axis_name)  # [batch_size, ...], the same on every device
        opt_state, agent_state, metrics, applied = gradient_step(steps, opt_state, agent_state, target_params, batch,
                                                                 group_keys, gradient_steps)
        gradient_steps = gradient_steps + 1
        move = gradient_steps % tc.target_update_period == 0
        online = {k: agent_state.params[k] for k in target_params}
        moved = polyak(agent_state.hparams.tau, online, target_params)  # tau: [] float32
        target_params = jax.tree.map(lambda new, old: jnp.where(move, new, old), moved, target_params)
        return (agent_state, opt_state, target_params, gradient_steps), (metrics, applied)

    def learn(carry, buffer, key):  # the buffer is read, never returned: no copy of it under vmap's select
        carry, (metrics, applied) = lax.scan(functools.partial(update_step, buffer), carry,
                                             jax.random.split(key, tc.num_updates))  # [U]
        return carry, {k: v for group_metrics, weights in zip(metrics, applied)
                       for k, v in M.over_steps(group_metrics, weights).items()}

    return learn


def make_learner_update(agent: Agent, optimizer, tc: OffPolicyTrainingConfig, axis_name: str | None = None,
                        population_axis: str | None = None, warmup: bool = False):
    """What the learner does with a rollout ``trajectory [T, B]``: steps 2 and 3 of the module
    docstring. Returns ``update(state, trajectory, key) -> (state, metrics)`` (``state.iteration``
    counts the update; ``key`` drives the minibatch sampling and the losses). ``population_axis``:
    the population's ``vmap`` axis when the update runs for a population (the executor's
    :data:`~evorl.engine.execution.POPULATION_AXIS`), so that the learning start and TD3's
    delayed actor branch once for all agents instead of every agent computing both branches.

    With ``axis_name`` (``distributed.layout=envs`` on several devices) the trajectory and the
    buffer's columns are this device's environments': each device adds its own transitions,
    every device draws the same batch from the whole buffer (:func:`evorl.rl.replay.sample`) and
    computes the same gradient steps on it, so the parameters stay equal on every device and
    equal to the 1-device run's.

    ``warmup``: the update as it is while the buffer holds fewer than ``learning_starts``
    transitions (the buffer add, the skipped learning's zeros), for updates known to come
    before the learning start (:func:`iterations_before_learning`).

    The fused iteration (:func:`make_iteration`) and the asynchronous learner
    (:mod:`evorl.engine.actor_learner`) both call it: one buffer, one update."""
    groups = agent.update_groups
    steps = [group_step(group, optimizer, len(groups) > 1, population_axis) for group in groups]
    policy = BehaviourPolicy(agent, tc.warmup_steps)
    learn = make_gradient_steps(steps, tc, axis_name)

    def update(state: OffPolicyState, trajectory: Trajectory, key: jax.Array) -> tuple[OffPolicyState, dict]:
        buffer = add_rollout(state.buffer, trajectory, state.agent_state.hparams.gamma, tc, axis_name)
        agent_state = agent.update_obs_statistics(state.agent_state, trajectory.obs, axis_name)

        # each group's optimiser at the agent's own (annealed) rate: a sweep's or PBT's value
        opt_state = {k: scheduled_learning_rate(o, state.learning_rate, state.iteration, state.anneal_iterations)
                     for k, o in state.opt_state.items()}
        carry = (agent_state, opt_state, state.target_params, state.gradient_steps)
        metric_shapes = jax.eval_shape(learn, carry, buffer, key)[1]
        def skip(carry, *_):
            return carry, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), metric_shapes)

        if warmup:
            learning = jnp.zeros((), bool)
            carry, loss_metrics = skip(carry)
        else:
            learning = buffer.size >= tc.learning_starts
            carry, loss_metrics = population_cond(learning, learn, skip, carry, buffer, key, axis_name=population_axis)
        agent_state, opt_state, target_params, gradient_steps = carry
        metrics = {
            **loss_metrics,
            "gradient_steps": learning.astype(jnp.float32) * tc.num_updates,
            **policy.behaviour(acting_state(state, tc)).metrics,  # the behaviour the trajectory was acted with
            "buffer_size": M.Metric(buffer.size.astype(jnp.float32), "max"),
        }
        state = state.replace(agent_state=agent_state, opt_state=opt_state, target_params=target_params, buffer=buffer,
                              iteration=state.iteration + 1, gradient_steps=gradient_steps)
        return state, metrics

    return update


def make_iteration(env: VectorEnv, agent: Agent, optimizer, tc: OffPolicyTrainingConfig, axis_name: str | None = None,
                   population_axis: str | None = None, warmup: bool = False):
    """One training iteration (see the module docstring): the behaviour policy's rollout, then
    :func:`make_learner_update` on it (``warmup``: its variant without the learning); metrics
    are scalars, reduced over ``axis_name`` (the device axis when the environments are split,
    :func:`make_learner_update`)."""
    learner_update = make_learner_update(agent, optimizer, tc, axis_name, population_axis, warmup)
    policy = BehaviourPolicy(agent, tc.warmup_steps)

    def iteration(state: OffPolicyState) -> tuple[OffPolicyState, dict]:
        key, rollout_key, update_key = jax.random.split(hardware.fast_key(state.key), 3)  # same bits (evorl.hardware)
        actor_state, lagged_params = lagged_agent_state(state.agent_state, state.lagged_params)  # training.actor_lag
        acting = acting_state(state, tc).replace(agent_state=actor_state)
        local_envs = state.env_state.reward.shape[0]
        env_ids = axis_index(axis_name) * local_envs + jnp.arange(local_envs)  # global env indices [B]
        env_state, _, trajectory, episodes = rollout_with_policy_state(
            env, policy.behaviour(acting), actor_state, state.env_state, None, rollout_key, tc.rollout_length,
            env_ids)  # [T, B, ...]
        state, metrics = learner_update(state, trajectory, update_key)
        state = state.replace(key=hardware.raw_key(key), env_state=env_state, lagged_params=lagged_params)
        return state, {**metrics, **episode_metrics(episodes, axis_name)}

    return iteration

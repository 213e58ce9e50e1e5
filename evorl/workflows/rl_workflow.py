"""``OnPolicyWorkflow``, the one training loop PPO, A2C and IMPALA share, on top of
``RLWorkflow`` (config, env, agent, recorders; defined in :mod:`evorl.workflows.rl_base`
and importable from here).

One iteration: roll out ``T`` steps in ``B`` envs, update the observation statistics, let
the agent compute its targets (GAE, or nothing when its loss computes V-trace), then run
``num_epochs`` x ``num_minibatches`` gradient steps. ``learn`` runs ``eval_interval``
iterations at a time inside one compiled ``lax.fori_loop`` (one XLA program, compiled once
for any chunk length), and only then moves scalar metrics to the host.

With ``training.actor_lag = k`` the rollout acts with the parameters of ``k`` iterations
ago (IMPALA's decoupled actors simulated on one machine; see :func:`acting_state`).

With ``enable_multi_devices`` the same iteration runs under ``jax.shard_map`` over all
local devices: environments are split across devices, parameters are replicated, and
gradients, observation statistics and metrics are reduced over the device axis.
"""

from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from evorl.agent import AgentState, hparams_as_arrays
from evorl.config import require, sweep_variants
from evorl.distributed import agent_gradient_update, axis_index, pmax, pmean, psum
from evorl.envs import EnvState
from evorl.evaluator import Evaluator
from evorl.rollout import Trajectory, rollout
from evorl.workflows.loop_utils import (
    acting_state,
    broadcast_prefix,
    init_lagged_params,
    jit_rarely_run,
    make_optimizer,
    set_learning_rate,
    summarize,
)
from evorl.workflows.population import aggregate_metrics, apply_variant
from evorl.workflows.rl_base import (  # noqa: F401  (RLWorkflow and its config are public here too)
    SWEEPABLE_TRAINING_KEYS,
    TOP_LEVEL_KEYS,
    ExperimentConfig,
    RLWorkflow,
    resolve_workflow_cls,
)

DEVICE_AXIS = "devices"


@struct.dataclass
class OnPolicyState:
    key: jax.Array
    agent_state: AgentState
    opt_state: Any
    env_state: EnvState  # leading axis [B], split across devices
    learning_rate: jax.Array  # [] base learning rate (annealed per iteration)
    iteration: jax.Array  # [] int32, completed iterations
    #: Parameters at the start of the last ``actor_lag`` iterations, oldest first (leaves
    #: ``[actor_lag, ...]``); the rollout acts with the oldest. None when ``actor_lag = 0``.
    lagged_params: Any = None


class OnPolicyWorkflow(RLWorkflow):
    """The one on-policy training loop (see the module docstring)."""

    def __init__(self, config, env, agent, enable_multi_devices=False, recorders=None):
        if enable_multi_devices:
            self.mesh = Mesh(np.asarray(jax.devices()), (DEVICE_AXIS,))
            self.axis_name = DEVICE_AXIS
            agent = agent.with_axis_name(DEVICE_AXIS)
        else:
            self.mesh, self.axis_name = None, None
        tc = config.training
        eval_env = env  # evaluation plays full episodes; training may cut them earlier
        if tc.train_episode_length is not None:
            require(tc.train_episode_length <= env.episode_length,
                    f"training.train_episode_length={tc.train_episode_length} must be <= the evaluation "
                    f"episodes' length {env.episode_length} (env.episode_length).")
            env = env.with_episode_length(tc.train_episode_length)
        super().__init__(config, env, agent, enable_multi_devices, recorders)
        self.optimizer = make_optimizer(tc)
        self._gradient_update = agent_gradient_update(
            agent.loss, self.optimizer, axis_name=self.axis_name, has_aux=True
        )
        self.evaluator = Evaluator(eval_env, agent, tc.eval_episodes)
        # A population: num_seeds seeds x the variants of any hyperparameter sweep.
        self.variants = sweep_variants(list(config.sweep))
        self.num_agents = len(self.variants) * tc.num_seeds
        self.population = self.num_agents > 1
        self._variant_data = [
            (type(self).variant_hparams(env, config, v), apply_variant(config.agent, tc, v)[1].learning_rate)
            for v in self.variants
        ]
        evaluate, init = self.evaluator.evaluate, self._init_state
        if self.population:
            evaluate, init = jax.vmap(evaluate), jax.vmap(init)
        self._evaluate = jax.jit(evaluate)  # runs at every eval_interval: optimised (see jit_rarely_run)
        self._init_fn, self._init_jit = init, None
        self._run_chunk = self._compile_chunk()
        self.compile_seconds: float | None = None

    @classmethod
    def check_config(cls, config, agent, num_devices):
        tc = config.training
        require(
            tc.num_envs % num_devices == 0,
            f"training.num_envs={tc.num_envs} must be divisible by the number of devices ({num_devices}).",
        )
        per_device_envs = tc.num_envs // num_devices
        if agent.sequence_minibatches:
            units, what = per_device_envs, "training.num_envs per device"
        else:
            units, what = per_device_envs * tc.rollout_length, "the batch (num_envs per device x rollout_length)"
        require(
            units % tc.num_minibatches == 0,
            f"training.num_minibatches={tc.num_minibatches} must divide {what} = {units}.",
        )

    # --- state ------------------------------------------------------------------------
    def _init_state(self, key: jax.Array, hparams: Any, learning_rate: jax.Array) -> OnPolicyState:
        key, agent_key, env_key = jax.random.split(key, 3)
        agent_state = self.agent.init(agent_key).replace(hparams=hparams_as_arrays(hparams))
        return OnPolicyState(
            key=key,
            agent_state=agent_state,
            opt_state=self.optimizer.init(agent_state.params),
            env_state=self.env.reset(env_key),
            learning_rate=jnp.asarray(learning_rate, jnp.float32),
            iteration=jnp.zeros((), jnp.int32),
            lagged_params=init_lagged_params(agent_state.params, self.config.training.actor_lag),
        )

    def _state_specs(self) -> OnPolicyState:
        """Partition specs: environments split over devices (after the population axis, if
        any), everything else replicated."""
        envs = P(None, DEVICE_AXIS) if self.population else P(DEVICE_AXIS)
        return OnPolicyState(key=P(), agent_state=P(), opt_state=P(), env_state=envs,
                             learning_rate=P(), iteration=P(), lagged_params=P())

    def init(self, key: jax.Array) -> OnPolicyState:
        """The initial state; for a population, agent ``v * num_seeds + s`` trains variant
        ``v`` with the ``s``-th key split from ``key`` (shared by all variants)."""
        if not self.population:
            hparams, learning_rate = self._variant_data[0]
            return self._init(key, hparams, learning_rate)
        num_seeds = self.config.training.num_seeds
        seed_keys = jax.random.split(key, num_seeds)
        keys = jnp.concatenate([seed_keys] * len(self.variants))
        per_agent = [data for data in self._variant_data for _ in range(num_seeds)]
        hparams = jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(x, jnp.float32) for x in xs]),
                               *[h for h, _ in per_agent])
        learning_rates = jnp.asarray([lr for _, lr in per_agent], jnp.float32)
        return self._init(keys, hparams, learning_rates)

    def _init(self, *args) -> OnPolicyState:
        """The initial state computed where it lives: with a mesh, each device (of each
        process) computes only its own environments."""
        if self._init_jit is None:
            shardings = self._shardings(jax.eval_shape(self._init_fn, *args))
            self._init_jit = jit_rarely_run(self._init_fn, out_shardings=shardings)
        return self._init_jit(*args)

    def _shardings(self, state: Any) -> Any:
        """Per-leaf shardings: environments split over the mesh and the rest replicated, or
        everything on the first device."""
        if self.mesh is None:
            device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
            return jax.tree.map(lambda _: device, state)
        shardings = jax.tree.map(
            lambda spec: NamedSharding(self.mesh, spec), self._state_specs(),
            is_leaf=lambda x: isinstance(x, P),
        )
        return broadcast_prefix(shardings, state)

    def place(self, state: OnPolicyState) -> OnPolicyState:
        """``state`` on the devices the compiled programs expect (a no-op when it already is)."""
        return jax.device_put(state, self._shardings(state))

    # --- one iteration ------------------------------------------------------------------
    def _iteration(self, state: OnPolicyState) -> tuple[OnPolicyState, dict]:
        tc = self.config.training
        key, rollout_key, update_key = jax.random.split(state.key, 3)
        actor_state, lagged_params = acting_state(state.agent_state, state.lagged_params)
        local_envs = state.env_state.reward.shape[0]
        env_ids = axis_index(self.axis_name) * local_envs + jnp.arange(local_envs)  # global env indices
        env_state, trajectory, episodes = rollout(
            self.env, self.agent, actor_state, state.env_state, rollout_key, tc.rollout_length, env_ids
        )
        agent_state = self.agent.update_obs_statistics(state.agent_state, trajectory.obs, self.axis_name)
        trajectory = self.agent.compute_targets(agent_state, trajectory)

        if tc.anneal_lr:  # linear decay to 0 at num_iterations (and 0 beyond, never negative)
            frac = jnp.maximum(1.0 - state.iteration.astype(jnp.float32) / tc.num_iterations, 0.0)
        else:
            frac = 1.0
        opt_state = set_learning_rate(state.opt_state, state.learning_rate * frac)
        agent_state, opt_state, loss_metrics = self._update_epochs(agent_state, opt_state, trajectory, update_key)

        episodes = psum(episodes, self.axis_name)
        metrics = {
            **loss_metrics,
            "episode_return_sum": episodes.return_sum,
            "episode_length_sum": episodes.length_sum,
            "episode_count": episodes.count,
        }
        state = state.replace(key=key, agent_state=agent_state, opt_state=opt_state,
                              env_state=env_state, iteration=state.iteration + 1, lagged_params=lagged_params)
        return state, metrics

    def _minibatches(self, trajectory: Trajectory, key: jax.Array) -> Trajectory:
        """Shuffled minibatches ``[M, ...]``: of transitions ``[M, T*B/M, ...]``, or of whole
        sequences ``[M, T, B/M, ...]`` for agents with ``sequence_minibatches``."""
        m = self.config.training.num_minibatches
        if self.agent.sequence_minibatches:
            num_envs = trajectory.rewards.shape[1]
            perm = jax.random.permutation(key, num_envs)

            def split(x):  # [T, B, ...] -> [M, T, B/M, ...]
                x = jnp.take(x, perm, axis=1)
                x = x.reshape((x.shape[0], m, num_envs // m) + x.shape[2:])
                return jnp.swapaxes(x, 0, 1)
        else:
            n = trajectory.rewards.size
            perm = jax.random.permutation(key, n)

            def split(x):  # [T, B, ...] -> [M, T*B/M, ...]
                x = jnp.take(x.reshape((n,) + x.shape[2:]), perm, axis=0)
                return x.reshape((m, n // m) + x.shape[1:])

        return jax.tree.map(split, trajectory)

    def _update_epochs(self, agent_state, opt_state, trajectory, key):
        """``num_epochs`` passes of ``num_minibatches`` gradient steps; metrics averaged over
        the steps taken (a metric named ``max_*`` is maximised instead)."""
        tc = self.config.training

        def minibatch_step(carry, inputs):
            agent_state, opt_state, stopped = carry
            batch, loss_key = inputs

            def do_update(_):
                (_, metrics), new_agent_state, new_opt_state = self._gradient_update(
                    opt_state, agent_state, batch, loss_key
                )
                metrics = {
                    k: pmax(jnp.max(v), self.axis_name) if k.startswith("max_") else pmean(jnp.mean(v), self.axis_name)
                    for k, v in metrics.items()
                }
                return new_agent_state, new_opt_state, metrics

            if stopped is None:
                agent_state, opt_state, metrics = do_update(None)
                return (agent_state, opt_state, None), (metrics, jnp.ones((), jnp.float32))
            # Once stopped, skip the work; a step whose KL check fails is computed, not applied.
            shapes = jax.eval_shape(do_update, None)[2]
            new_agent_state, new_opt_state, metrics = lax.cond(
                stopped,
                lambda _: (agent_state, opt_state, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)),
                do_update,
                None,
            )
            stopped = stopped | self.agent.stop_updates(agent_state, metrics)
            keep = lambda new, old: jnp.where(stopped, old, new)  # noqa: E731
            agent_state = jax.tree.map(keep, new_agent_state, agent_state)
            opt_state = jax.tree.map(keep, new_opt_state, opt_state)
            taken = 1.0 - stopped.astype(jnp.float32)
            return (agent_state, opt_state, stopped), (metrics, taken)

        def epoch(carry, epoch_key):
            perm_key, loss_key = jax.random.split(epoch_key)
            batches = self._minibatches(trajectory, perm_key)
            loss_keys = jax.random.split(loss_key, tc.num_minibatches)
            return lax.scan(minibatch_step, carry, (batches, loss_keys))

        probe = self.agent.stop_updates(agent_state, {})
        stopped = None if probe is None else jnp.zeros((), bool)
        (agent_state, opt_state, _), (metrics, taken) = lax.scan(
            epoch, (agent_state, opt_state, stopped), jax.random.split(key, tc.num_epochs)
        )
        # metrics [E, M], taken [E, M]
        steps = jnp.maximum(jnp.sum(taken), 1.0)
        reduced = {
            k: jnp.max(v) if k.startswith("max_") else jnp.sum(v * taken) / steps for k, v in metrics.items()
        }
        reduced["gradient_steps"] = jnp.sum(taken)
        return agent_state, opt_state, reduced

    # --- chunks of iterations -----------------------------------------------------------
    def _iterations(self, state: OnPolicyState, num_iterations: jax.Array):
        """``num_iterations`` (traced) iterations; metrics summed (``max_*``: maximised)."""
        metric_shapes = jax.eval_shape(self._iteration, state)[1]
        totals = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), metric_shapes)
        totals = {k: jnp.full((), -jnp.inf) if k.startswith("max_") else v for k, v in totals.items()}

        def body(_, carry):
            state, totals = carry
            state, metrics = self._iteration(state)
            totals = {
                k: jnp.maximum(totals[k], v) if k.startswith("max_") else totals[k] + v
                for k, v in metrics.items()
            }
            return state, totals

        return lax.fori_loop(0, num_iterations, body, (state, totals))

    def _compile_chunk(self):
        iterations = jax.vmap(self._iterations, in_axes=(0, None)) if self.population else self._iterations
        if self.mesh is None:
            return jax.jit(iterations, donate_argnums=0)
        specs = self._state_specs()
        sharded = jax.shard_map(
            iterations, mesh=self.mesh, in_specs=(specs, P()), out_specs=(specs, P()),
        )
        return jax.jit(sharded, donate_argnums=0)

    def run_iterations(self, state: OnPolicyState, num_iterations: int) -> tuple[OnPolicyState, dict]:
        """Runs ``num_iterations`` iterations in one compiled call; returns host metrics.

        The input state's buffers are donated to the call (no copy of the env states and
        parameters): keep using the returned state, not the one passed in.
        """
        state, totals = self._run_chunk(self.place(state), np.int32(num_iterations))
        metrics = summarize(jax.device_get(totals), num_iterations)
        return state, self._aggregate(metrics)

    def _aggregate(self, metrics: dict) -> dict[str, float]:
        if not self.population:
            return {k: float(v) for k, v in metrics.items()}
        self.last_metrics_per_agent = {**getattr(self, "last_metrics_per_agent", {}), **metrics}
        return aggregate_metrics(metrics, self.variants, self.config.training.num_seeds)

    def compile(self, state: OnPolicyState) -> float:
        """Compiles the training chunk ahead of time; returns the seconds it took."""
        start = time.perf_counter()
        self._run_chunk = self._run_chunk.lower(self.place(state), np.int32(1)).compile()
        self.compile_seconds = time.perf_counter() - start
        return self.compile_seconds

    def step(self, state: OnPolicyState) -> tuple[OnPolicyState, dict]:
        return self.run_iterations(state, 1)

    # --- evaluation ---------------------------------------------------------------------
    def evaluate(self, state: OnPolicyState) -> dict[str, float]:
        """Greedy evaluation; for a population, of every agent (metrics aggregated)."""
        fold = jax.vmap(jax.random.fold_in, in_axes=(0, None)) if self.population else jax.random.fold_in
        key = fold(state.key, 0x5EED)
        returns, lengths = jax.device_get(self._evaluate(state.agent_state, key))  # [(N,) E]
        return self._aggregate({
            "eval/episode_return": np.mean(returns, axis=-1),
            "eval/episode_return_std": np.std(returns, axis=-1),
            "eval/episode_return_min": np.min(returns, axis=-1),
            "eval/episode_return_max": np.max(returns, axis=-1),
            "eval/episode_length": np.mean(lengths, axis=-1),
        })

    # --- the host loop ------------------------------------------------------------------
    def learn(self, state: OnPolicyState) -> OnPolicyState:
        tc = self.config.training
        steps_per_iteration = tc.env_steps_per_iteration
        done = int(np.max(jax.device_get(state.iteration)))
        if self.compile_seconds is None:
            self.compile(state)
        self.last_metrics: dict[str, float] = {}
        while done < tc.num_iterations:
            n = min(tc.eval_interval, tc.num_iterations - done)
            start = time.perf_counter()
            state, metrics = self.run_iterations(state, n)
            elapsed = time.perf_counter() - start
            done += n
            metrics.update(self.evaluate(state))
            metrics.update(iteration=done, env_steps=done * steps_per_iteration,
                           steps_per_s=self.num_agents * n * steps_per_iteration / elapsed)
            self.last_metrics = metrics
            self.write_metrics(metrics, done * steps_per_iteration)
            if self.checkpointer is not None:
                self.checkpointer.maybe_save(state, done)
        return state

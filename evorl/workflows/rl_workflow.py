"""``RLWorkflow`` (config, env, agent, evaluation, logging) and ``OnPolicyWorkflow``, the
one training loop PPO, A2C and IMPALA share.

One iteration: roll out ``T`` steps in ``B`` envs, update the observation statistics, let
the agent compute its targets (GAE, or nothing when its loss computes V-trace), then run
``num_epochs`` x ``num_minibatches`` gradient steps. ``learn`` runs ``eval_interval``
iterations at a time inside one compiled ``lax.fori_loop`` (one XLA program, compiled once
for any chunk length), and only then moves scalar metrics to the host.

With ``enable_multi_devices`` the same iteration runs under ``jax.shard_map`` over all
local devices: environments are split across devices, parameters are replicated, and
gradients, observation statistics and metrics are reduced over the device axis.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from evorl.agent import Agent, AgentState
from evorl.config import (
    ConfigError,
    EnvConfig,
    TrainingConfig,
    parse_section,
    require,
    to_plain,
    unknown_key_error,
)
from evorl.distributed import agent_gradient_update, axis_index, pmax, pmean, psum
from evorl.envs import EnvState, VectorEnv, create_env
from evorl.recorders import ConsoleRecorder, Recorder
from evorl.rollout import EpisodeStats, Trajectory, rollout
from evorl.workflows.workflow import Workflow

DEVICE_AXIS = "devices"


@dataclass(frozen=True)
class ExperimentConfig:
    workflow_cls: str
    seed: int
    env: EnvConfig
    agent: Any  # the workflow's agent config dataclass
    training: TrainingConfig


TOP_LEVEL_KEYS = ("workflow_cls", "seed", "env", "agent", "training")


def resolve_workflow_cls(name: str | type) -> type:
    """``"evorl.workflows.PPOWorkflow"`` (or the class itself) to the workflow class."""
    if isinstance(name, type):
        return name
    module_name, _, attr = str(name).rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as e:
        from evorl.workflows import WORKFLOWS

        raise ConfigError(
            f"workflow_cls {name!r} cannot be imported ({e}). Known workflows: "
            + ", ".join(f"evorl.workflows.{w}" for w in WORKFLOWS)
        ) from None
    if not (isinstance(cls, type) and issubclass(cls, Workflow)):
        raise ConfigError(f"workflow_cls {name!r} is not a Workflow subclass.")
    return cls


@struct.dataclass
class OnPolicyState:
    key: jax.Array
    agent_state: AgentState
    opt_state: Any
    env_state: EnvState  # leading axis [B], split across devices
    learning_rate: jax.Array  # [] base learning rate (annealed per iteration)
    iteration: jax.Array  # [] int32, completed iterations


class RLWorkflow(Workflow):
    """Holds the parsed config, the env and the agent; subclasses define the training loop.

    A concrete algorithm sets ``agent_config_cls`` (the dataclass of its ``agent:`` keys) and
    ``build_agent(env, agent_cfg, training)``.
    """

    agent_config_cls: ClassVar[type]

    def __init__(self, config: ExperimentConfig, env: VectorEnv, agent: Agent,
                 enable_multi_devices: bool = False, recorders: list[Recorder] | None = None):
        self.config = config
        self.env = env
        self.agent = agent
        self.enable_multi_devices = enable_multi_devices
        self.recorders: list[Recorder] = [ConsoleRecorder(prefix=f"[{self.name()}] ")] if recorders is None else recorders

    @classmethod
    def build_agent(cls, env: VectorEnv, agent_cfg: Any, training: TrainingConfig) -> Agent:
        raise NotImplementedError

    @classmethod
    def parse_config(cls, cfg: Any) -> ExperimentConfig:
        """Validates a whole experiment config (dict or OmegaConf) for this workflow."""
        cfg = to_plain(cfg)
        if not isinstance(cfg, Mapping):
            raise ConfigError(f"config must be a mapping, got {type(cfg).__name__}")
        for key in cfg:
            if key not in TOP_LEVEL_KEYS:
                raise unknown_key_error(str(key), list(TOP_LEVEL_KEYS), "")
        workflow_cls = cfg.get("workflow_cls", f"{cls.__module__}.{cls.__qualname__}")
        named = resolve_workflow_cls(workflow_cls)
        if named is not cls:
            raise ConfigError(
                f"workflow_cls {workflow_cls!r} names {named.__name__}, but the config is being "
                f"built by {cls.__name__}; use {named.__name__}.build_from_config."
            )
        seed = cfg.get("seed", 0)
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ConfigError(f"'seed' = {seed!r} must be an integer.")
        return ExperimentConfig(
            workflow_cls=str(workflow_cls),
            seed=seed,
            env=parse_section(EnvConfig, cfg.get("env"), "env"),
            agent=parse_section(cls.agent_config_cls, cfg.get("agent"), "agent"),
            training=parse_section(TrainingConfig, cfg.get("training"), "training"),
        )

    @classmethod
    def build_from_config(cls, cfg: Any, enable_multi_devices: bool = False, **kwargs) -> "RLWorkflow":
        config = cls.parse_config(cfg)
        env = create_env(config.env, episode_length=config.env.episode_length, parallel=config.training.num_envs)
        agent = cls.build_agent(env, config.agent, config.training)
        cls.check_config(config, agent, num_devices=jax.local_device_count() if enable_multi_devices else 1)
        return cls(config, env, agent, enable_multi_devices=enable_multi_devices, **kwargs)

    @classmethod
    def check_config(cls, config: ExperimentConfig, agent: Agent, num_devices: int) -> None:
        """Cross-key checks, before anything is compiled."""

    def write_metrics(self, metrics: dict[str, float], step: int) -> None:
        for recorder in self.recorders:
            recorder.write(metrics, step)


class OnPolicyWorkflow(RLWorkflow):
    """The one on-policy training loop (see the module docstring)."""

    def __init__(self, config, env, agent, enable_multi_devices=False, recorders=None):
        super().__init__(config, env, agent, enable_multi_devices, recorders)
        tc = config.training
        self.optimizer = make_optimizer(tc)
        if enable_multi_devices:
            self.mesh = Mesh(np.asarray(jax.local_devices()), (DEVICE_AXIS,))
            self.axis_name = DEVICE_AXIS
        else:
            self.mesh, self.axis_name = None, None
        self._gradient_update = agent_gradient_update(
            agent.loss, self.optimizer, axis_name=self.axis_name, has_aux=True
        )
        self.eval_env = env.with_num_envs(tc.eval_episodes)
        self._run_chunk = self._compile_chunk()
        self._evaluate = jax.jit(self._evaluate_episodes)
        self._init = jax.jit(self._init_state)
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
    def _init_state(self, key: jax.Array) -> OnPolicyState:
        key, agent_key, env_key = jax.random.split(key, 3)
        agent_state = self.agent.init(agent_key)
        return OnPolicyState(
            key=key,
            agent_state=agent_state,
            opt_state=self.optimizer.init(agent_state.params),
            env_state=self.env.reset(env_key),
            learning_rate=jnp.asarray(self.config.training.learning_rate, jnp.float32),
            iteration=jnp.zeros((), jnp.int32),
        )

    def _state_specs(self) -> OnPolicyState:
        """Partition specs: environments split over devices, everything else replicated."""
        return OnPolicyState(key=P(), agent_state=P(), opt_state=P(), env_state=P(DEVICE_AXIS),
                             learning_rate=P(), iteration=P())

    def init(self, key: jax.Array) -> OnPolicyState:
        state = self._init(key)
        if self.mesh is not None:
            shardings = jax.tree.map(
                lambda spec: NamedSharding(self.mesh, spec), self._state_specs(),
                is_leaf=lambda x: isinstance(x, P),
            )
            state = jax.device_put(state, _broadcast_prefix(shardings, state))
        return state

    # --- one iteration ------------------------------------------------------------------
    def _iteration(self, state: OnPolicyState) -> tuple[OnPolicyState, dict]:
        tc = self.config.training
        key, rollout_key, update_key = jax.random.split(state.key, 3)
        rollout_key = jax.random.fold_in(rollout_key, axis_index(self.axis_name))
        env_state, trajectory, episodes = rollout(
            self.env, self.agent, state.agent_state, state.env_state, rollout_key, tc.rollout_length
        )
        agent_state = self.agent.update_obs_statistics(state.agent_state, trajectory.obs, self.axis_name)
        trajectory = self.agent.compute_targets(agent_state, trajectory)

        frac = 1.0 - state.iteration.astype(jnp.float32) / tc.num_iterations if tc.anneal_lr else 1.0
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
                              env_state=env_state, iteration=state.iteration + 1)
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
            shapes = jax.eval_shape(do_update, None)[2]
            agent_state, opt_state, metrics = lax.cond(
                stopped,
                lambda _: (agent_state, opt_state, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)),
                do_update,
                None,
            )
            taken = 1.0 - stopped.astype(jnp.float32)
            stopped = stopped | self.agent.stop_updates(agent_state, metrics)
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
        if self.mesh is None:
            return jax.jit(self._iterations, donate_argnums=0)
        specs = self._state_specs()
        sharded = jax.shard_map(
            self._iterations, mesh=self.mesh, in_specs=(specs, P()), out_specs=(specs, P()),
        )
        return jax.jit(sharded, donate_argnums=0)

    def run_iterations(self, state: OnPolicyState, num_iterations: int) -> tuple[OnPolicyState, dict]:
        """Runs ``num_iterations`` iterations in one compiled call; returns host metrics."""
        state, totals = self._run_chunk(state, np.int32(num_iterations))
        return state, summarize(jax.device_get(totals), num_iterations)

    def compile(self, state: OnPolicyState) -> float:
        """Compiles the training chunk ahead of time; returns the seconds it took."""
        start = time.perf_counter()
        self._run_chunk = self._run_chunk.lower(state, np.int32(1)).compile()
        self.compile_seconds = time.perf_counter() - start
        return self.compile_seconds

    def step(self, state: OnPolicyState) -> tuple[OnPolicyState, dict]:
        return self.run_iterations(state, 1)

    # --- evaluation ---------------------------------------------------------------------
    def _evaluate_episodes(self, agent_state: AgentState, key: jax.Array):
        """One greedy episode in each of ``eval_episodes`` envs: returns, lengths ``[E]``.

        Returns are the env's own (unscaled) episode returns, read when each episode ends.
        """
        env = self.eval_env
        env_state = env.reset(key)
        zeros = jnp.zeros((env.num_envs,), jnp.float32)

        def cond(carry):
            _, _, _, active, t = carry
            return jnp.any(active) & (t < env.episode_length)

        def body(carry):
            env_state, returns, lengths, active, t = carry
            actions = self.agent.evaluate_actions(agent_state, env_state.obs)
            env_state = env.step(env_state, self.agent.to_env_action(actions))
            ended = active & env_state.done
            returns = jnp.where(ended, env_state.episode_return, returns)
            lengths = jnp.where(ended, env_state.episode_length.astype(jnp.float32), lengths)
            return env_state, returns, lengths, active & ~env_state.done, t + 1

        init = (env_state, zeros, zeros, jnp.ones((env.num_envs,), bool), jnp.zeros((), jnp.int32))
        _, returns, lengths, _, _ = lax.while_loop(cond, body, init)
        return returns, lengths

    def evaluate(self, state: OnPolicyState) -> dict[str, float]:
        key = jax.random.fold_in(state.key, 0x5EED)
        returns, lengths = jax.device_get(self._evaluate(state.agent_state, key))
        return {
            "eval/episode_return": float(np.mean(returns)),
            "eval/episode_return_std": float(np.std(returns)),
            "eval/episode_return_min": float(np.min(returns)),
            "eval/episode_return_max": float(np.max(returns)),
            "eval/episode_length": float(np.mean(lengths)),
        }

    # --- the host loop ------------------------------------------------------------------
    def learn(self, state: OnPolicyState) -> OnPolicyState:
        tc = self.config.training
        steps_per_iteration = tc.env_steps_per_iteration
        done = int(jax.device_get(state.iteration))
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
                           steps_per_s=n * steps_per_iteration / elapsed)
            self.last_metrics = metrics
            self.write_metrics(metrics, done * steps_per_iteration)
        return state


def summarize(totals: dict, num_iterations: int) -> dict[str, float]:
    """Host-side metrics of a chunk: means per iteration, episode means over episodes."""
    count = float(totals.pop("episode_count"))
    return_sum = float(totals.pop("episode_return_sum"))
    length_sum = float(totals.pop("episode_length_sum"))
    metrics = {
        f"train/{k}": float(v) if k.startswith("max_") else float(v) / num_iterations
        for k, v in totals.items()
    }
    metrics["train/episode_return"] = return_sum / count if count else float("nan")
    metrics["train/episode_length"] = length_sum / count if count else float("nan")
    metrics["train/episodes"] = count
    return metrics


def make_optimizer(tc: TrainingConfig) -> optax.GradientTransformation:
    """Global-norm clipping then Adam; the learning rate lives in the optimiser state
    (``optax.inject_hyperparams``) so it is data: annealed per iteration, vmappable."""

    def optimizer(learning_rate):
        clip = [optax.clip_by_global_norm(tc.max_grad_norm)] if tc.max_grad_norm else []
        return optax.chain(*clip, optax.adam(learning_rate, eps=tc.adam_eps))

    return optax.inject_hyperparams(optimizer)(learning_rate=tc.learning_rate)


def set_learning_rate(opt_state, learning_rate: jax.Array):
    hyperparams = {**opt_state.hyperparams, "learning_rate": jnp.asarray(learning_rate, jnp.float32)}
    return opt_state._replace(hyperparams=hyperparams)


def _broadcast_prefix(prefix_tree: Any, full_tree: Any) -> Any:
    """Expands a pytree prefix (e.g. one sharding per state field) to ``full_tree``'s leaves."""
    return jax.tree.map(
        lambda p, sub: jax.tree.map(lambda _: p, sub), prefix_tree, full_tree,
        is_leaf=lambda x: isinstance(x, NamedSharding),
    )

"""``RLWorkflow`` (config, env, agent, evaluation, logging) and ``OnPolicyWorkflow``, the
one training loop PPO, A2C and IMPALA share.

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

from evorl.agent import Agent, AgentState, hparams_as_arrays
from evorl.checkpoint import CheckpointConfig
from evorl.config import (
    ConfigError,
    DistributedConfig,
    EnvConfig,
    TrainingConfig,
    extract_sweeps,
    parse_section,
    require,
    sweep_variants,
    to_plain,
    unknown_key_error,
)
from evorl.distributed import agent_gradient_update, axis_index, is_main_process, pmax, pmean, psum
from evorl.distributed import initialize as initialize_distributed
from evorl.envs import EnvState, VectorEnv, create_env
from evorl.evaluator import Evaluator
from evorl.recorders import ConsoleRecorder, LoggingConfig, Recorder
from evorl.rollout import EpisodeStats, Trajectory, rollout
from evorl.workflows.population import aggregate_metrics, apply_variant, check_axes_are_data
from evorl.workflows.workflow import Workflow

DEVICE_AXIS = "devices"


@dataclass(frozen=True)
class ExperimentConfig:
    workflow_cls: str
    seed: int
    env: EnvConfig
    agent: Any  # the workflow's agent config dataclass (first value of any swept key)
    training: TrainingConfig
    #: Hyperparameter axes ``(("agent.clip_epsilon", (0.1, 0.2)), ...)``: one agent per value.
    sweep: tuple[tuple[str, tuple[float, ...]], ...] = ()
    distributed: DistributedConfig = DistributedConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    logging: LoggingConfig = LoggingConfig()
    #: The run folder (the CLI sets it to Hydra's output dir); None: no files are written.
    output_dir: str | None = None
    #: A run folder to continue from its newest checkpoint (see ``evorl.experiment``).
    resume: str | None = None


TOP_LEVEL_KEYS = ("workflow_cls", "seed", "env", "agent", "training", "distributed", "checkpoint", "logging",
                  "output_dir", "resume")
#: Training keys that may take a list (one agent per value): they are data in the program.
SWEEPABLE_TRAINING_KEYS = ("learning_rate", "gamma", "gae_lambda")


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
    #: Parameters at the start of the last ``actor_lag`` iterations, oldest first (leaves
    #: ``[actor_lag, ...]``); the rollout acts with the oldest. None when ``actor_lag = 0``.
    lagged_params: Any = None


class RLWorkflow(Workflow):
    """Holds the parsed config, the env and the agent; subclasses define the training loop.

    A concrete algorithm sets ``agent_config_cls`` (the dataclass of its ``agent:`` keys) and
    ``build_agent(env, agent_cfg, training)``.
    """

    agent_config_cls: ClassVar[type]
    #: Training keys whose default differs for this algorithm (applied when the config
    #: does not set them), e.g. A2C's one gradient step per rollout.
    training_defaults: ClassVar[dict[str, Any]] = {}

    def __init__(self, config: ExperimentConfig, env: VectorEnv, agent: Agent,
                 enable_multi_devices: bool = False, recorders: list[Recorder] | None = None):
        self.config = config
        self.env = env
        self.agent = agent
        self.enable_multi_devices = enable_multi_devices
        self.recorders: list[Recorder] = [ConsoleRecorder(prefix=f"[{self.name()}] ")] if recorders is None else recorders
        #: Set by ``evorl.experiment`` to an ``evorl.checkpoint.Checkpointer``: ``learn`` calls
        #: its ``maybe_save(state, iteration)`` after each chunk.
        self.checkpointer = None

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
        for key in ("output_dir", "resume"):
            if cfg.get(key) is not None and not isinstance(cfg[key], str):
                raise ConfigError(f"'{key}' = {cfg[key]!r} must be a folder path or null.")
        agent, agent_axes = extract_sweeps(cfg.get("agent"), cls.agent_config_cls, "agent")
        training = {**cls.training_defaults, **(to_plain(cfg.get("training")) or {})}
        training, training_axes = extract_sweeps(training, TrainingConfig, "training", SWEEPABLE_TRAINING_KEYS)
        config = ExperimentConfig(
            workflow_cls=str(workflow_cls),
            seed=seed,
            env=parse_section(EnvConfig, cfg.get("env"), "env"),
            agent=parse_section(cls.agent_config_cls, agent, "agent"),
            training=parse_section(TrainingConfig, training, "training"),
            sweep=tuple(agent_axes + training_axes),
            distributed=parse_section(DistributedConfig, cfg.get("distributed"), "distributed"),
            checkpoint=parse_section(CheckpointConfig, cfg.get("checkpoint"), "checkpoint"),
            logging=parse_section(LoggingConfig, cfg.get("logging"), "logging"),
            output_dir=cfg.get("output_dir"),
            resume=cfg.get("resume"),
        )
        config.checkpoint.check_against(config.training.eval_interval)
        return config

    @classmethod
    def build_from_config(cls, cfg: Any, enable_multi_devices: bool = False, **kwargs) -> "RLWorkflow":
        """Validates ``cfg`` and builds the workflow. With ``enable_multi_devices`` (or
        ``distributed.multi_devices``, or several processes) training is data-parallel over
        every device of every process."""
        config = cls.parse_config(cfg)
        multi_process = initialize_distributed(config.distributed)  # before any JAX computation
        enable_multi_devices = enable_multi_devices or config.distributed.multi_devices or multi_process
        env = create_env(config.env, episode_length=config.env.episode_length, parallel=config.training.num_envs)
        agent = cls.build_agent(env, config.agent, config.training)
        cls.check_config(config, agent, num_devices=jax.device_count() if enable_multi_devices else 1)
        check_axes_are_data(config.sweep, lambda variant: cls.variant_hparams(env, config, variant))
        return cls(config, env, agent, enable_multi_devices=enable_multi_devices, **kwargs)

    @classmethod
    def variant_hparams(cls, env: VectorEnv, config: ExperimentConfig, variant: dict[str, float]) -> Any:
        """The agent hyperparameters (data) of one variant of a hyperparameter sweep."""
        agent_cfg, training = apply_variant(config.agent, config.training, variant)
        return cls.build_agent(env, agent_cfg, training).default_hparams()

    @classmethod
    def check_config(cls, config: ExperimentConfig, agent: Agent, num_devices: int) -> None:
        """Cross-key checks, before anything is compiled."""

    def write_metrics(self, metrics: dict[str, float], step: int) -> None:
        if not is_main_process():
            return
        for recorder in self.recorders:
            recorder.write(metrics, step)


class OnPolicyWorkflow(RLWorkflow):
    """The one on-policy training loop (see the module docstring)."""

    def __init__(self, config, env, agent, enable_multi_devices=False, recorders=None):
        if enable_multi_devices:
            self.mesh = Mesh(np.asarray(jax.devices()), (DEVICE_AXIS,))
            self.axis_name = DEVICE_AXIS
            agent = agent.with_axis_name(DEVICE_AXIS)
        else:
            self.mesh, self.axis_name = None, None
        super().__init__(config, env, agent, enable_multi_devices, recorders)
        tc = config.training
        self.optimizer = make_optimizer(tc)
        self._gradient_update = agent_gradient_update(
            agent.loss, self.optimizer, axis_name=self.axis_name, has_aux=True
        )
        self.evaluator = Evaluator(env, agent, tc.eval_episodes)
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
        self._evaluate = jit_rarely_run(evaluate)
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
        return _broadcast_prefix(shardings, state)

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


def jit_rarely_run(fn, **jit_kwargs):
    """``jax.jit`` with XLA's backend optimisations off, for programs that run once or rarely
    (state initialisation, evaluation), where compile time dominates: this roughly halves
    their compile time on the CPU."""
    return jax.jit(fn, compiler_options={"xla_backend_optimization_level": 0}, **jit_kwargs)


def summarize(totals: dict, num_iterations: int) -> dict[str, np.ndarray]:
    """Host-side metrics of a chunk (per agent for a population): means per iteration,
    episode means over the episodes that ended (NaN if none did)."""
    totals = {k: np.asarray(v, np.float64) for k, v in totals.items()}
    count = totals.pop("episode_count")
    return_sum = totals.pop("episode_return_sum")
    length_sum = totals.pop("episode_length_sum")
    metrics = {f"train/{k}": v if k.startswith("max_") else v / num_iterations for k, v in totals.items()}
    with np.errstate(invalid="ignore", divide="ignore"):
        metrics["train/episode_return"] = np.where(count > 0, return_sum / count, np.nan)
        metrics["train/episode_length"] = np.where(count > 0, length_sum / count, np.nan)
    metrics["train/episodes"] = count
    return metrics


def init_lagged_params(params: Any, actor_lag: int) -> Any:
    """``actor_lag`` copies of ``params`` (leaves ``[actor_lag, ...]``), or None for no lag."""
    if actor_lag == 0:
        return None
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (actor_lag,) + x.shape), params)


def acting_state(agent_state: AgentState, lagged_params: Any) -> tuple[AgentState, Any]:
    """The state the rollout acts with (the oldest snapshot) and the snapshots shifted by one
    with the current parameters appended; ``(agent_state, None)`` without lag."""
    if lagged_params is None:
        return agent_state, None
    oldest = jax.tree.map(lambda x: x[0], lagged_params)
    shifted = jax.tree.map(
        lambda past, now: jnp.concatenate([past[1:], now[None]]), lagged_params, agent_state.params
    )
    return agent_state.replace(params=oldest), shifted


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

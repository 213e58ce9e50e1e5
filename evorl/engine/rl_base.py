"""``RLWorkflow``: a parsed, validated experiment config with its env, agent and recorders.

:meth:`RLWorkflow.build_from_config` is the one entry point from a config (a dict or
OmegaConf): it validates every section (unknown keys, types, values, hyperparameter lists)
before anything is compiled, starts ``jax.distributed`` when asked, and builds the env and
the agent. The training loop itself is :class:`~evorl.engine.on_policy_workflow.OnPolicyWorkflow`.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import jax

from evorl.config import (
    CheckpointConfig, DistributedConfig, LoggingConfig, PBTConfig, RunnerConfig, TrainingConfig,
    config_mapping, extract_sweeps, parse_section, section_data, sweep_variants,
)
from evorl.config.env import EnvConfig, HOST_ENV_TYPES
from evorl.config.experiment import (  # noqa: F401  (importable from here too)
    RENAMED_KEYS, SEED_LIMIT, TOP_LEVEL_KEYS, check_agent_keys, check_run_folder_keys, check_top_level_keys,
    check_workflow_builds, check_workflow_cls, import_workflow_cls, parse_seed,
)
from evorl.config.hparams import checked_hparams
from evorl.config.runs import check_env_agents, check_save_buffer
from evorl.engine.memory_estimate import check_memory, on_policy_terms, sizes_from_config, sizes_of_agent
from evorl.engine.population import with_variant
from evorl.engine.processes import initialize as initialize_distributed, is_main_process
from evorl.engine.recording import ConsoleRecorder, Recorder, report_progress
from evorl.engine.services import RunServices
from evorl.engine.workflow import WORKFLOWS, Workflow
from evorl.envs import VectorEnv, create_env, step_size_before_building
from evorl.envs.multi_agent import is_multi_agent
from evorl.rl.actor_critic import NetworkFactory
from evorl.rl.agent import Agent
from evorl.rl.algorithm import Algorithm
from evorl.rl.state_roles import buffer_field

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
    #: How training runs: fused into compiled chunks, or actors and a learner.
    runner: RunnerConfig = RunnerConfig()
    #: Population-based training: exploit and explore the population every ``pbt.interval`` iterations.
    pbt: PBTConfig = PBTConfig()
    #: The run folder (the CLI sets it to Hydra's output dir); None: no files are written.
    output_dir: str | None = None
    #: A run folder to continue from its newest checkpoint (see ``evorl.app.experiment``).
    resume: str | None = None


def resolve_workflow_cls(name: str | type) -> type:
    """``"evorl.workflows.PPOWorkflow"`` (or the class itself) to the workflow class: a
    concrete algorithm workflow (an ``RLWorkflow`` subclass that declares its agent)."""
    known = [f"evorl.workflows.{w}" for w in WORKFLOWS]
    cls = name if isinstance(name, type) else import_workflow_cls(str(name), known)
    is_workflow = isinstance(cls, type) and issubclass(cls, Workflow)
    check_workflow_cls(name, is_workflow, is_workflow and issubclass(cls, RLWorkflow) and not inspect.isabstract(cls)
                       and hasattr(cls, "algorithm"), known)
    return cls


#: The fields of a workflow's :class:`~evorl.rl.algorithm.Algorithm` readable on the class.
ALGORITHM_FIELDS = ("label", "agent_factory", "hparams_cls", "training_hparams", "training_defaults",
                    "agent_options_cls", "section_hparams", "agent_config_cls")


class RLWorkflow(Workflow):
    """Holds the parsed config, the env and the agent; subclasses define the training loop.

    A concrete workflow declares the algorithm it runs, a record (``algorithm = PPO``): its
    agent factory, its loss hyperparameters' dataclass (whose fields are the keys a population
    may vary) and its ``agent:`` config section, ``agent_config_cls`` (derived from the
    factory's keyword parameters after the network keys of ``agent_options_cls``).
    """

    #: The algorithm the workflow runs (:class:`~evorl.rl.algorithm.Algorithm`), declared once by
    #: a concrete workflow (``algorithm = PPO``); its fields :data:`ALGORITHM_FIELDS` are readable
    #: on the class under their own names (``PPOWorkflow.hparams_cls``), derived from it.
    algorithm: ClassVar[Algorithm]
    #: Short name in logs (default: the class name).
    label: ClassVar[str | None] = None
    #: The algorithm's own config section beside ``agent:`` and ``training:`` (ES's ``es``,
    #: ERL's ``erl``); None: it has none.
    section: ClassVar[str | None] = None
    #: Builds the agent's networks (see :data:`evorl.rl.actor_critic.NetworkFactory`); None: the default MLPs/CNN.
    network_factory: ClassVar[NetworkFactory | None] = None
    #: The state field holding a replay buffer (off-policy workflows, CEM-RL), which
    #: ``checkpoint.save_buffer: false`` leaves out of checkpoints; None: the state has none.
    #: Read from the state's fields (:func:`~evorl.rl.state_roles.buffer_field`).
    replay_buffer_field: ClassVar[str | None] = None
    #: The ``training:`` section's dataclass (off-policy workflows have their own).
    training_config_cls: ClassVar[type] = TrainingConfig
    #: True when the workflow logs a population's fitness (``train/best_actor_return``,
    #: ``train/fitness_mean``, ``train/fitness_std``): ``logging.plot`` then also draws
    #: ``population.png`` (:func:`evorl.app.population_plot.plot_population`).
    population_plot: ClassVar[bool] = False
    #: The algorithm trains the agents of a multi-agent env (:mod:`evorl.envs.multi_agent`);
    #: the others take single-agent envs only.
    multi_agent: ClassVar[bool] = False
    #: What a multi-agent algorithm's refusal of a single-agent env suggests instead.
    single_agent_alternative: ClassVar[str] = "PPOWorkflow"
    #: Declared: the workflow writes each logging point's Pareto front to its services'
    #: ``front_recorder``, drawn as ``pareto.png`` (:func:`evorl.app.pareto_plot.plot_pareto`).
    pareto_plot: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        declared = sorted(set(ALGORITHM_FIELDS) & set(vars(cls)))
        if declared:
            raise TypeError(f"{cls.__name__} declares {', '.join(declared)}: an algorithm declares them once, in its "
                            f"record; set algorithm = dataclasses.replace(<the base's algorithm>, ...) instead.")
        if "algorithm" in vars(cls):
            for name in ALGORITHM_FIELDS:
                value = getattr(cls.algorithm, name)
                setattr(cls, name, staticmethod(value) if name == "agent_factory" else value)
            cls.replay_buffer_field = buffer_field(cls.algorithm.family.state_cls)

    def __init__(self, config: ExperimentConfig, env: VectorEnv, agent: Agent, services: RunServices | None = None):
        self.config = config
        self.env = env
        self.agent = agent
        services = RunServices() if services is None else services
        recorders = (ConsoleRecorder(prefix=f"[{self.name()}] "),) if services.recorders is None else services.recorders
        #: The run's recorders, checkpointer, run folder and stop request (:class:`~evorl.engine.services.RunServices`).
        self.services = dataclasses.replace(services, recorders=tuple(recorders))

    def with_services(self, services: RunServices) -> "RLWorkflow":
        """This workflow holding ``services``: a copy that shares its env, agent and compiled
        programs (``init``'s state fits both). A run folder's checkpointer and recorders exist
        only once the initial state is restored, after the workflow is built."""
        serviced = copy.copy(self)
        RLWorkflow.__init__(serviced, self.config, self.env, self.agent, services)
        return serviced

    @classmethod
    def name(cls) -> str:
        return cls.label or cls.__name__

    @classmethod
    def build_agent(cls, env: VectorEnv, config: ExperimentConfig) -> Agent:
        """``agent_factory`` for ``env`` with the ``agent:`` keys and the training keys that are
        hyperparameters (``training_hparams``)."""
        hparams = {key: getattr(config.training, key) for key in cls.training_hparams}
        return cls.agent_factory(env.action_space, env.obs_space, network_factory=cls.network_factory,
                                 **hparams, **vars(config.agent))

    @classmethod
    def envs_per_agent(cls, config: ExperimentConfig) -> int:
        """The environments the training env steps side by side: ``training.num_envs``."""
        return config.training.num_envs

    @classmethod
    def hparams_of(cls, agent_cfg: Any, training: TrainingConfig) -> Any:
        """The loss hyperparameters (data) of an agent and training config, validated (None
        for an algorithm without them): the check of every variant's values before anything is
        built; training uses the ones the agent's factory built (``agent.hparams_defaults``,
        :meth:`ChunkedWorkflow.variant_data`)."""
        if cls.hparams_cls is None:
            return None
        names = [f.name for f in dataclasses.fields(cls.hparams_cls)]
        values = {name: getattr(agent_cfg, name) for name in names if hasattr(agent_cfg, name)}
        values.update({key: getattr(training, key) for key in cls.training_hparams})
        return cls.checked_hparams(cls.hparams_cls(**values))

    @classmethod
    def checked_hparams(cls, hparams: Any) -> Any:
        """``hparams.validated()``, its error naming the key as the config does
        (``agent.target_noise must be >= 0``, ``training.tau ...``)."""
        return checked_hparams(hparams, cls.training_hparams)

    @classmethod
    def keys_set_elsewhere(cls) -> dict[str, str]:
        """The agent factory's keywords another section sets, each with its key there
        (``{"gamma": "training.gamma"}``): ``agent.gamma`` is refused with that key."""
        return {key: f"training.{key}" for key in cls.training_hparams}

    @classmethod
    def sweepable_keys(cls) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The agent and training keys that may take a list (one agent per value): the
        hyperparameters the compiled program reads as data, declared by ``hparams_cls``."""
        fields = set() if cls.hparams_cls is None else {f.name for f in dataclasses.fields(cls.hparams_cls)}
        agent_keys = tuple(f.name for f in dataclasses.fields(cls.agent_config_cls) if f.name in fields)
        return agent_keys, ("learning_rate", *cls.training_hparams)

    @classmethod
    def evolvable_keys(cls, config: ExperimentConfig) -> tuple[str, ...]:
        """The dotted keys PBT may evolve (``pbt.hyperparameters``): the keys that may take a list."""
        agent_keys, training_keys = cls.sweepable_keys()
        return tuple(f"agent.{k}" for k in agent_keys) + tuple(f"training.{k}" for k in training_keys)

    @classmethod
    def why_not_evolvable(cls, config: ExperimentConfig, key: str) -> str:
        """Why the config key ``key`` (not among :meth:`evolvable_keys`) cannot evolve, one sentence."""
        return "it shapes the compiled program (networks, batch or loop sizes), it is not data the program reads."

    @classmethod
    def check_variant(cls, config: ExperimentConfig) -> None:
        """Checks ``config`` with one variant's values set (:func:`~evorl.engine.population.with_variant`):
        each value of each list, and each PBT bound, is checked alike."""
        config.training.validate("training")
        cls.hparams_of(config.agent, config.training)

    @classmethod
    def parse_config(cls, cfg: Any) -> ExperimentConfig:
        """Validates a whole experiment config (dict or OmegaConf) for this workflow."""
        cfg = config_mapping(cfg)
        check_top_level_keys(cfg)
        workflow_cls = cfg.get("workflow_cls", f"{cls.__module__}.{cls.__qualname__}")
        named = resolve_workflow_cls(workflow_cls)
        check_workflow_builds(workflow_cls, named.__name__, named is cls, cls.__name__)
        seed = parse_seed(cfg.get("seed", 0))
        check_run_folder_keys(cfg)
        check_agent_keys(cfg, cls.keys_set_elsewhere(), cls.name())
        agent_keys, training_keys = cls.sweepable_keys()
        agent, agent_axes = extract_sweeps(cfg.get("agent", {}), cls.agent_config_cls, "agent", agent_keys)
        training = {**cls.training_defaults, **section_data(cfg.get("training", {}), "training")}
        training, training_axes = extract_sweeps(training, cls.training_config_cls, "training", training_keys)
        training = cls.training_config_cls.resolve_run_length(training, "training")
        config = ExperimentConfig(
            workflow_cls=str(workflow_cls),
            seed=seed,
            env=parse_section(EnvConfig, cfg.get("env", {}), "env"),
            agent=parse_section(cls.agent_config_cls, agent, "agent"),
            training=parse_section(cls.training_config_cls, training, "training"),
            sweep=tuple(agent_axes + training_axes),
            distributed=parse_section(DistributedConfig, cfg.get("distributed", {}), "distributed"),
            checkpoint=parse_section(CheckpointConfig, cfg.get("checkpoint", {}), "checkpoint"),
            logging=parse_section(LoggingConfig, cfg.get("logging", {}), "logging"),
            runner=parse_section(RunnerConfig, cfg.get("runner", {}), "runner"),
            pbt=parse_section(PBTConfig, cfg.get("pbt", {}), "pbt"),
            output_dir=cfg.get("output_dir"),
            resume=cfg.get("resume"),
        )
        config.checkpoint.check_against(config.training.eval_interval)
        check_save_buffer(config.checkpoint.save_buffer, cls.replay_buffer_field is not None, cls.name())
        config.pbt.check_against(config.training.eval_interval)
        config.runner.check_against(config.env.env_type in HOST_ENV_TYPES)
        for variant in sweep_variants(list(config.sweep)):  # every value of every list, checked alike
            cls.check_variant(with_variant(config, variant))
        return config

    @classmethod
    def build_from_config(cls, cfg: Any, enable_multi_devices: bool = False, *, services: RunServices | None = None,
                          recorders: Sequence[Recorder] | None = None) -> "RLWorkflow":
        """Validates ``cfg`` and builds the workflow. With ``enable_multi_devices`` (or
        ``distributed.multi_devices``, or several processes) training is data-parallel over
        every device of every process. ``services`` are the run's recorders, checkpointer and
        run folder (:class:`~evorl.engine.services.RunServices`; default: a console recorder
        and nothing else); ``recorders`` alone is short for ``RunServices(recorders=...)``."""
        if recorders is not None:
            if services is not None:
                raise TypeError("build_from_config takes recorders or services, not both: put the recorders "
                                "in services (RunServices(recorders=...)).")
            services = RunServices(recorders=tuple(recorders))
        config = cls.parse_config(cfg)
        multi_process = initialize_distributed(config.distributed)  # before any JAX computation
        enable_multi_devices = enable_multi_devices or config.distributed.multi_devices or multi_process
        num_devices = jax.device_count() if enable_multi_devices else 1
        asynchronous = config.runner.asynchronous(env_on_host=config.env.env_type in HOST_ENV_TYPES)
        lower_bounds = sizes_from_config(config.agent, default_networks=cls.network_factory is None,
                                         env_step=step_size_before_building(config.env))
        check_memory(cls.memory_terms(config, lower_bounds, num_devices, asynchronous), config.runner.max_memory_gb,
                     num_devices)  # before the envs and networks are built
        env = create_env(config.env, episode_length=config.env.episode_length, parallel=cls.envs_per_agent(config))
        cls.check_env(env, config)
        agent = cls.build_agent(env, config)
        cls.check_config(config, agent, num_devices=num_devices)
        check_memory(cls.memory_terms(config, sizes_of_agent(agent), num_devices, asynchronous),
                     config.runner.max_memory_gb, num_devices)
        return cls(config, env, agent, enable_multi_devices=enable_multi_devices, services=services)

    @classmethod
    def check_env(cls, env: VectorEnv, config: ExperimentConfig) -> None:
        """The built env fits the algorithm, before its agent is built: a multi-agent env for a
        single-agent algorithm, or the reverse, is a config error."""
        many = is_multi_agent(env)
        check_env_agents(env.num_agents if many else 1, many, cls.multi_agent, cls.name(),
                         config.env.env_name, config.env.env_type, cls.single_agent_alternative)

    @classmethod
    def check_config(cls, config: ExperimentConfig, agent: Agent, num_devices: int) -> None:
        """Cross-key checks, before anything is compiled."""

    @classmethod
    def memory_terms(cls, config: ExperimentConfig, sizes: Any, num_devices: int, asynchronous: bool) -> list:
        """The large contributors to a run's memory (:mod:`evorl.engine.memory_estimate`), for networks
        of ``sizes``: checked against ``runner.max_memory_gb`` before and after the agent is built."""
        return on_policy_terms(config, sizes, num_devices, asynchronous)

    def write_metrics(self, metrics: dict[str, float], step: int) -> None:
        if not is_main_process():
            return
        for recorder in self.services.recorders:
            recorder.write(metrics, step)

    def report_progress(self, step: int, compiling: bool = False) -> None:
        """Tells the recorders that show progress (the console) that training reached env step
        ``step``: when its program starts compiling (``compiling``), when it starts, after each
        learner update and after each compiled chunk."""
        if is_main_process():
            report_progress(self.services.recorders, step, compiling)

"""``ESWorkflow``: evolution strategies over policy parameters (``workflow_cls:
evorl.workflows.ESWorkflow`` with an ``es:`` section, see :class:`~evorl.algorithms.es.ESConfig`).

One generation (:func:`~evorl.algorithms.es.make_generation`) is one iteration of the
execution layer (:class:`~evorl.engine.execution.Executor`), so chunks of
``training.eval_interval`` generations compile into one program, and the host loop of
:class:`~evorl.engine.host_loop.ChunkedWorkflow` (health checks, greedy evaluation of
the mean, recorders, progress bar, checkpoints and exact resume) runs ES unchanged.
With several devices (``distributed.multi_devices``, or ``jax.distributed`` processes) the
ES state is replicated and each device plays ``population_size / D`` members; fitness and
observation sums are gathered, so every device takes the same step as one device would.

With ``training.num_seeds`` and lists of the hyperparameters the strategy holds in its state
(OpenES: ``es.learning_rate``, ``es.sigma``) the run trains a population of independent
searches, one per seed and value, vmapped into one program (a random search over those
hyperparameters); with ``pbt.enabled`` the population is PBT's
(:mod:`evorl.engine.pbt`): every ``pbt.interval`` generations the worst searches copy the
best ones' search state and perturb their learning rate and sigma.

The logged ``step`` counts each generation's env step budget, ``population_size x
episodes_per_member x env.episode_length``; episodes that end earlier step fewer
(``train/episode_length`` is their mean length, ``train/episodes`` their count), and
``steps_per_s`` counts the steps they took, not the budget.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np

from evorl.algorithms.es import ES, STRATEGIES, ESConfig, ESState, make_search
from evorl.config import (
    config_mapping, extract_sweeps, num_agents, parse_section, section_data, sweep_variants,
)
from evorl.config.runs import check_es_placement, check_es_runner
from evorl.config.training import check_training_keys
from evorl.engine.execution import Placement
from evorl.engine.health import TrainingDiverged
from evorl.engine.host_loop import ChunkedWorkflow
from evorl.engine.memory_estimate import es_terms
from evorl.engine.pbt import check_pbt_config
from evorl.engine.population import with_variant
from evorl.engine.rl_base import ExperimentConfig
from evorl.rl.optimisers import AskTell

def divergence_hint(es: ESConfig) -> str:
    """The ``es:`` keys whose smaller values make an ES run that diverged stay finite: the
    search distribution's ``sigma`` and, for the strategies that step with an optimiser, its
    ``learning_rate`` (ES refuses ``training.learning_rate`` and ``max_grad_norm``)."""
    keys = (["es.learning_rate"] if es.spec.optimizer else []) + ["es.sigma"]
    return f"Try a smaller {' or '.join(keys)}."


@dataclass(frozen=True)
class ESTrainingConfig:
    """The ``training:`` keys of ES: one iteration is one generation."""

    #: Generations.
    num_iterations: int = 100
    #: Generations between evaluations and log lines; each interval is one compiled call.
    eval_interval: int = 10
    #: Greedy episodes per evaluation of the mean.
    eval_episodes: int = 16
    #: Independent searches per hyperparameter variant (a population, one program).
    num_seeds: int = 1


@dataclass(frozen=True)
class SearchHyperparameters:
    """PBT's :class:`~evorl.engine.pbt.HyperparameterStore` for a population of searches: each
    search's state hyperparameters (:attr:`~evorl.rl.optimisers.AskTell.hyperparameters`), by name."""

    search: AskTell

    def read(self, state: ESState, field: str) -> jax.Array:
        return jax.vmap(self.search.hyperparameters[field].get)(state.search)  # [N]

    def write(self, state: ESState, values: dict) -> ESState:
        searched = state.search
        for field, value in values.items():  # value [N]
            searched = jax.vmap(self.search.hyperparameters[field].set)(searched, value)
        return state.replace(search=searched)


@dataclass(frozen=True)
class ESExperimentConfig(ExperimentConfig):
    es: ESConfig = ESConfig()


class ESWorkflow(ChunkedWorkflow):
    """Evolution strategies (OpenES, SNES, CMA-ES, ARS via evosax; sep-CEM and canonical ES,
    :mod:`evorl.rl.optimisers`) on the shared host loop: it inherits ``learn``, ``evaluate``,
    health checks and checkpoints, and replaces what an iteration is (a generation) and the
    state (:class:`~evorl.algorithms.es.ESState`)."""

    algorithm = ES
    #: The config section of the search (its dataclass), and the experiment config holding it.
    section, section_cls, experiment_cls = "es", ESConfig, ESExperimentConfig

    def __init__(self, config: ESExperimentConfig, env, agent, enable_multi_devices=False, services=None):
        self.variants, self.num_agents = sweep_variants(list(config.sweep)), num_agents(config)
        # layout envs: members split, state replicated; population: whole searches per device
        layout = config.distributed.layout if self.num_agents > 1 else "envs"
        self.placement = Placement.create(self.num_agents, enable_multi_devices, layout)
        num_devices = 1 if self.placement.step_axis_name is None else self.placement.mesh.size
        super().__init__(config, env, agent, services)
        es = config.es
        #: The strategy (``es.strategy``) as a population optimiser, :class:`~evorl.rl.optimisers.AskTell`.
        self.search = make_search(es, self.num_params)
        #: Per variant: the values of the search's state hyperparameters (``{"learning_rate": ..}``).
        self._variant_data = [({name: getattr(with_variant(config, variant).es, name)
                                for name in es.spec.state_hyperparameters},) for variant in self.variants]
        step = self.algorithm.family.make_iteration(env, agent, self.search, es, self.placement.step_axis_name,
                                                    num_devices)
        self.pbt = self.make_pbt(config, env, agent, SearchHyperparameters(self.search))
        if self.pbt is not None:
            step = self.pbt.summing_fitness_episodes(step)
        self.build_generation_runner(step, env, agent, config.training.eval_episodes)

    @property
    def num_params(self) -> int:
        """``D``, the number of policy parameters the strategy searches over."""
        params = jax.eval_shape(self.agent.init, jax.random.PRNGKey(0)).params
        return sum(x.size for x in jax.tree.leaves(params))

    @property
    def env_steps_per_iteration(self) -> int:
        es = self.config.es
        return es.population_size * es.episodes_per_member * self.env.episode_length

    def env_steps_taken(self, chunk_metrics: dict, num_iterations: int) -> float:
        """The steps the chunk's episodes took (they end before ``env.episode_length`` when
        they terminate): the sum of their lengths."""
        return float(np.sum(chunk_metrics["episode_length_sum"]))

    # --- config ---------------------------------------------------------------------------
    @classmethod
    def section_list_keys(cls, data: dict) -> tuple[str, ...]:
        """The keys of the ``es:`` section ``data`` that may take a list: the hyperparameters
        its strategy reads from its state."""
        spec = STRATEGIES.get(data.get("strategy", ESConfig.strategy))
        return () if spec is None else spec.state_hyperparameters

    @classmethod
    def evolvable_keys(cls, config: ESExperimentConfig) -> tuple[str, ...]:
        return tuple(f"es.{name}" for name in config.es.spec.state_hyperparameters)

    @classmethod
    def why_not_evolvable(cls, config: ESExperimentConfig, key: str) -> str:
        if key in {f"es.{name}" for spec in STRATEGIES.values() for name in spec.state_hyperparameters}:
            held = config.es.spec.state_hyperparameters
            return (f"es.strategy={config.es.strategy} does not read it from its search state (it holds "
                    f"{', '.join(held) if held else 'no hyperparameter'} there).")
        return super().why_not_evolvable(config, key)

    @classmethod
    def check_variant(cls, config: ESExperimentConfig) -> None:
        search = getattr(config, cls.section, None)
        if search is None:  # RLWorkflow.parse_config's config, the shared sections only (see parse_config)
            return super().check_variant(config)
        search.validate(cls.section)

    @classmethod
    def parse_config(cls, cfg) -> ESExperimentConfig:
        cfg = config_mapping(cfg)
        name, where = cls.__name__, cls.section
        data = section_data(cfg.pop(where, {}), where)
        data, axes = extract_sweeps(data, cls.section_cls, where, cls.section_list_keys(data))
        search = parse_section(cls.section_cls, data, where)
        training = section_data(cfg.get("training", {}), "training")
        keys = tuple(ESTrainingConfig.__dataclass_fields__)
        check_training_keys(training, name, keys, section=where, section_holds="the search's",
                            section_keys=cls.section_cls.__dataclass_fields__)
        base = vars(super().parse_config(cfg))  # training keys checked as TrainingConfig's
        check_es_runner(name, base["runner"].mode)
        training = ESTrainingConfig(**{key: getattr(base["training"], key) for key in keys})
        config = cls.experiment_cls(**{**base, "training": training, where: search, "sweep": tuple(axes)})
        for variant in sweep_variants(axes):  # every value of every list, checked alike
            cls.check_variant(with_variant(config, variant))
        return config

    @classmethod
    def envs_per_agent(cls, config: ESExperimentConfig) -> int:
        return getattr(config, cls.section).episodes_per_member  # each member's episodes, side by side

    @classmethod
    def build_agent(cls, env, config: ESExperimentConfig):
        return cls.agent_factory(env.action_space, env.obs_space, network_factory=cls.network_factory,
                                 normalize_obs=config.es.obs_norm, **vars(config.agent))

    @classmethod
    def memory_terms(cls, config: ESExperimentConfig, sizes, num_devices: int, asynchronous: bool) -> list:
        return es_terms(config, sizes)

    @classmethod
    def check_config(cls, config: ESExperimentConfig, agent, num_devices: int) -> None:
        name, where = cls.__name__, cls.section
        agents = num_agents(config)
        if config.pbt.enabled:
            check_pbt_config(config, cls, agents, asynchronous=False,
                             split_envs=num_devices > 1 and config.distributed.layout == "envs")
        check_es_placement(name, where, agents, config.distributed.layout, num_devices, config.env.env_type,
                           getattr(config, where).population_size)

    def check_health(self, per_agent_metrics: dict, iteration: int) -> None:
        """The shared health check, its divergence error naming ES's own keys."""
        try:
            super().check_health(per_agent_metrics, iteration)
        except TrainingDiverged as e:
            raise e.with_hint(divergence_hint(self.config.es)) from None

    # --- state ----------------------------------------------------------------------------
    def init(self, key: jax.Array) -> ESState:
        """The initial state; for a population, search ``v * num_seeds + s`` starts variant ``v``'s
        hyperparameters with the ``s``-th key split from ``key`` (shared by all variants)."""
        init_state = self.algorithm.family.init_state
        return self.init_agents(lambda k, hyperparameters: init_state(self.agent, self.search, k, hyperparameters), key)


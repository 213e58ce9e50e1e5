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

The logged ``step`` counts each generation's env step budget, ``population_size x
episodes_per_member x env.episode_length``; episodes that end earlier step fewer
(``train/episode_length`` is their mean length, ``train/episodes`` their count), and
``steps_per_s`` counts the steps they took, not the budget.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np

from evorl.algorithms.es import (
    ESConfig, ESPolicyOptions, ESState, init_es_state, make_generation, make_mlp_es_agent, make_search,
)
from evorl.config import config_mapping, parse_section, require, section_data
from evorl.config.env import HOST_ENV_TYPES
from evorl.engine.evaluator import make_evaluator
from evorl.engine.execution import Executor, Placement
from evorl.engine.health import TrainingDiverged
from evorl.engine.host_loop import ChunkedWorkflow, chunk_health
from evorl.engine.memory_estimate import es_terms
from evorl.engine.rl_base import ExperimentConfig



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


@dataclass(frozen=True)
class ESExperimentConfig(ExperimentConfig):
    es: ESConfig = ESConfig()


class ESWorkflow(ChunkedWorkflow):
    """Evolution strategies (OpenES, SNES, CMA-ES, ARS via evosax; sep-CEM and canonical ES,
    :mod:`evorl.rl.optimisers`) on the shared host loop: it inherits ``learn``, ``evaluate``,
    health checks and checkpoints, and replaces what an iteration is (a generation) and the
    state (:class:`~evorl.algorithms.es.ESState`)."""

    label = "ES"
    agent_factory = staticmethod(make_mlp_es_agent)
    agent_config_cls = ESPolicyOptions
    hparams_cls = None  # an ES agent has no loss, so no loss hyperparameters
    training_hparams = ()
    #: The config section of the search (its dataclass), and the experiment config holding it.
    section, section_cls, experiment_cls = "es", ESConfig, ESExperimentConfig

    def __init__(self, config: ESExperimentConfig, env, agent, enable_multi_devices=False, recorders=None):
        self.placement = Placement.create(1, enable_multi_devices, "envs")  # members split, state replicated
        num_devices = 1 if self.placement.mesh is None else self.placement.mesh.size
        super().__init__(config, env, agent, recorders)
        es = config.es
        #: The strategy (``es.strategy``) as a population optimiser, :class:`~evorl.rl.optimisers.AskTell`.
        self.search = make_search(es, self.num_params)
        step = make_generation(env, agent, self.search, es, self.placement.step_axis_name, num_devices)
        self.executor = Executor(step, self.placement, final_metrics=chunk_health)
        self.evaluator = make_evaluator(env, agent, config.training.eval_episodes)
        self._evaluate = self.executor.map_agents(self.evaluator.evaluate)
        self._evaluation_compiled = True

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
    def parse_config(cls, cfg) -> ESExperimentConfig:
        cfg = config_mapping(cfg)
        name, where = cls.__name__, cls.section
        search = parse_section(cls.section_cls, cfg.pop(where, {}), where)
        training = section_data(cfg.get("training", {}), "training")
        keys = tuple(ESTrainingConfig.__dataclass_fields__)
        for key in training:
            require(key in keys, f"'training.{key}' does not apply to {name}: its training keys are "
                                 f"{', '.join(keys)} (one iteration is one generation); the search's keys "
                                 f"are in {where}: ({', '.join(cls.section_cls.__dataclass_fields__)}).")
        base = vars(super().parse_config(cfg))  # training keys checked as TrainingConfig's
        require(base["runner"].mode != "async",
                f"runner.mode=async: {name} has no actors and learner, it plays its episodes inside compiled "
                "programs; set runner.mode=auto or fused (or leave runner out).")
        training = ESTrainingConfig(**{key: getattr(base["training"], key) for key in keys})
        return cls.experiment_cls(**{**base, "training": training, where: search})

    @classmethod
    def envs_per_agent(cls, config: ESExperimentConfig) -> int:
        return getattr(config, cls.section).episodes_per_member  # each member's episodes, side by side

    @classmethod
    def build_agent(cls, env, config: ESExperimentConfig):
        return make_mlp_es_agent(env.action_space, env.obs_space, network_factory=cls.network_factory,
                                 normalize_obs=config.es.obs_norm, **vars(config.agent))

    @classmethod
    def memory_terms(cls, config: ESExperimentConfig, sizes, num_devices: int, asynchronous: bool) -> list:
        return es_terms(config, sizes)

    @classmethod
    def check_config(cls, config: ESExperimentConfig, agent, num_devices: int) -> None:
        name, where = cls.__name__, cls.section
        require(not config.pbt.enabled, "pbt applies to the RL workflows' populations (PPO, A2C, IMPALA); "
                                         f"{name} evolves its policy parameters itself: set pbt.enabled=false.")
        require(config.env.env_type not in HOST_ENV_TYPES, f"{name} plays its episodes inside compiled programs: "
                                                           f"env_type {config.env.env_type!r} steps on the host; use "
                                                           f"a gymnax or brax env.")
        search = getattr(config, where)
        require(search.population_size % num_devices == 0,
                f"{where}.population_size={search.population_size} must divide evenly over the {num_devices} devices "
                f"(each device plays population_size / {num_devices} members).")

    def check_health(self, per_agent_metrics: dict, iteration: int) -> None:
        """The shared health check, its divergence error naming ES's own keys."""
        try:
            super().check_health(per_agent_metrics, iteration)
        except TrainingDiverged as e:
            raise e.with_hint(divergence_hint(self.config.es)) from None

    # --- state ----------------------------------------------------------------------------
    def init(self, key: jax.Array) -> ESState:
        return self.executor.init(lambda k: init_es_state(self.agent, self.search, k), key)


"""The host side of the evolution-guided algorithms (CEM-RL, ERL): one agent whose state holds a
population of actors, a shared critic and replay buffer; one generation is one iteration of
the execution layer, so chunks of ``training.eval_interval`` generations compile into one
program, and :class:`~evorl.workflows.host_loop.ChunkedWorkflow` runs it unchanged: health
checks, greedy evaluation of the state's ``agent_state`` (TD3's), recorders, checkpoints (the
population, the buffer, the critic and the Adam states are in the state, so a resumed run
continues exactly), ``population.png`` and ``evorl.load_policy``.

A subclass (:class:`~evorl.workflows.cemrl.CEMRLWorkflow`, :class:`~evorl.workflows.erl.ERLWorkflow`)
names its config section (``section``, a :class:`PopulationRLConfig`) and builds its state
and generation (``init_state``, ``make_generation``). The logged ``step`` counts each
generation's env steps, ``actors_per_generation x episodes_per_actor x env.episode_length``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import jax
import optax

from evorl.agent import hparams_as_arrays
from evorl.algorithms.td3 import TD3HParams, make_mlp_td3_agent
from evorl.config import config_mapping, parse_section, require, section_data
from evorl.continuous_control import ContinuousNetworkOptions
from evorl.envs import create_env
from evorl.evaluator import make_evaluator
from evorl.workflows.execution import Executor, Placement
from evorl.workflows.host_loop import ChunkedWorkflow, chunk_health
from evorl.workflows.rl_base import ExperimentConfig


@dataclass(frozen=True)
class PopulationRLConfig:
    """The keys every evolution-guided algorithm's section has: the population's episodes,
    the shared buffer and the TD3 gradient steps per generation."""

    #: Actors in the population (N).
    population_size: int = 10
    #: Episodes each actor plays per generation (its fitness is their mean return).
    episodes_per_actor: int = 1
    #: Critic gradient steps per generation.
    num_updates: int = 1000
    #: Transitions per gradient step (and learning actor).
    batch_size: int = 256
    #: Transitions the shared replay buffer holds.
    buffer_size: int = 1_000_000
    #: Transitions in the buffer before the first gradient step.
    learning_starts: int = 10_000
    #: Env steps with uniformly random actions (the population does not evolve in those generations).
    warmup_steps: int = 0
    #: Polyak coefficient of the target critic and target actors.
    tau: float = 0.005

    @property
    def actors_per_generation(self) -> int:
        """Actors that play episodes each generation."""
        return self.population_size

    def validate(self, where: str) -> None:
        for key in ("population_size", "episodes_per_actor", "num_updates", "batch_size", "buffer_size"):
            require(getattr(self, key) >= 1, f"{where}.{key} must be >= 1, got {getattr(self, key)}.")
        require(0.0 < self.tau <= 1.0, f"{where}.tau must be in (0, 1], got {self.tau}.")
        require(self.learning_starts >= 0 and self.warmup_steps >= 0,
                f"{where}.learning_starts and {where}.warmup_steps must be >= 0.")


@dataclass(frozen=True)
class PopulationRLTrainingConfig:
    """The ``training:`` keys of an evolution-guided run: one iteration is one generation."""

    #: Generations.
    num_iterations: int = 100
    #: Generations between evaluations and log lines; each interval is one compiled call.
    eval_interval: int = 10
    #: Greedy episodes per evaluation of the state's actor.
    eval_episodes: int = 16
    #: Adam's step size, of the critic and of each learning actor.
    learning_rate: float = 1e-3
    #: Discount factor of the critic's targets.
    gamma: float = 0.99


class PopulationRLWorkflow(ChunkedWorkflow):
    """An evolution-guided algorithm on the shared host loop (module docstring)."""

    #: The config section's name and dataclass.
    section: ClassVar[str]
    section_cls: ClassVar[type]
    #: The run's config dataclass, an :class:`~evorl.workflows.rl_base.ExperimentConfig` with the section.
    experiment_config_cls: ClassVar[type]
    #: ``init_state(env, agent, optimizer, cfg, hparams, key) -> state``.
    init_state: ClassVar[Any]
    #: ``generation_builder(env, agent, optimizer, cfg) -> generation(state) -> (state, metrics)``.
    generation_builder: ClassVar[Any]
    replay_buffer_field = "buffer"
    population_plot = True
    agent_factory = staticmethod(make_mlp_td3_agent)
    agent_options_cls = ContinuousNetworkOptions
    hparams_cls = TD3HParams
    training_hparams = {"gamma": "discount"}
    training_defaults = {"learning_rate": 1e-3, "gamma": 0.99}

    def __init__(self, config: ExperimentConfig, env, agent, enable_multi_devices=False, recorders=None):
        self.variants, self.num_agents = [{}], 1
        self.asynchronous = False
        self.placement = Placement.create(1, False)
        super().__init__(config, env, agent, recorders)
        tc = config.training
        self.optimizer = optax.adam(tc.learning_rate)
        self.hparams = hparams_as_arrays(self.hparams_of(config.agent, tc).replace(tau=self.section_config.tau))
        generation = type(self).generation_builder(env, agent, self.optimizer, self.section_config)
        self.executor = Executor(generation, self.placement, final_metrics=chunk_health)
        self.evaluator = make_evaluator(env, agent, tc.eval_episodes)
        self._evaluate = self.executor.map_agents(self.evaluator.evaluate)
        self._evaluation_compiled = True
        self._params_finite = None

    @property
    def section_config(self):
        return getattr(self.config, self.section)

    @property
    def env_steps_per_iteration(self) -> int:
        cfg = self.section_config
        return cfg.actors_per_generation * cfg.episodes_per_actor * self.env.episode_length

    def init(self, key: jax.Array):
        return self.executor.init(lambda k: type(self).init_state(self.env, self.agent, self.optimizer,
                                                                  self.section_config, self.hparams, k), key)

    # --- config ---------------------------------------------------------------------------
    @classmethod
    def parse_config(cls, cfg):
        cfg = config_mapping(cfg)
        section = parse_section(cls.section_cls, cfg.pop(cls.section, {}), cls.section)
        section.validate(cls.section)
        training = section_data(cfg.get("training", {}), "training")
        keys = tuple(PopulationRLTrainingConfig.__dataclass_fields__)
        name = cls.__name__
        for key in training:
            require(key in keys, f"'training.{key}' does not apply to {name}: its training keys are "
                                 f"{', '.join(keys)} (one iteration is one generation); the population's, the "
                                 f"buffer's and the gradient steps' keys are in {cls.section}: "
                                 f"({', '.join(cls.section_cls.__dataclass_fields__)}).")
        base = vars(super().parse_config(cfg))
        require(not base["sweep"], f"{name} trains one population of actors: give every agent and training "
                                   "key one value (no lists).")
        require(base["runner"].mode != "async", f"runner.mode=async: {name} plays its episodes inside the "
                                                "compiled generation; set runner.mode=auto or fused.")
        require(not base["pbt"].enabled, f"pbt does not apply to {name}: set pbt.enabled=false.")
        require(not base["distributed"].multi_devices and base["distributed"].coordinator_address is None
                and not base["distributed"].auto,
                f"{name} trains on one device for now: set distributed.multi_devices=false.")
        require(not base["agent"].normalize_obs, f"agent.normalize_obs: {name}'s actors act on raw "
                                                 "observations for now; set agent.normalize_obs=false.")
        training = PopulationRLTrainingConfig(**{key: getattr(base["training"], key) for key in keys})
        return cls.experiment_config_cls(**{**base, "training": training, cls.section: section})

    @classmethod
    def build_from_config(cls, cfg, enable_multi_devices: bool = False, **kwargs):
        config = cls.parse_config(cfg)
        require(not enable_multi_devices, f"{cls.__name__} trains on one device for now.")
        section = getattr(config, cls.section)
        env = create_env(config.env, episode_length=config.env.episode_length, parallel=section.episodes_per_actor)
        require(not env.on_host, f"{cls.__name__} plays its episodes inside compiled programs: env_type "
                                 f"{config.env.env_type!r} steps on the host; use a gymnax or brax env.")
        per_generation = section.actors_per_generation * section.episodes_per_actor * env.episode_length
        require(section.buffer_size >= per_generation,
                f"{cls.section}.buffer_size={section.buffer_size} must hold one generation's transitions, "
                f"{section.actors_per_generation} actors x episodes_per_actor x env.episode_length = "
                f"{per_generation}.")
        agent = cls.build_agent(env, config.agent, config.training)
        return cls(config, env, agent, **kwargs)


__all__ = ["PopulationRLConfig", "PopulationRLTrainingConfig", "PopulationRLWorkflow"]

"""``CEMRLWorkflow``: CEM-RL (Pourchot & Sigaud, 2019) on the shared host loop
(``workflow_cls: evorl.workflows.CEMRLWorkflow`` with a ``cemrl:`` section, see
:class:`CEMRLConfig`).

One generation (:func:`~evorl.algorithms.cemrl.make_generation`: sample ``N`` actors, the
first ``N/2`` improved by the shared TD3 critic, all ``N`` actors' episodes vmapped into the
shared buffer, the sep-CEM update) is one iteration of the execution layer, so chunks of
``training.eval_interval`` generations compile into one program, and
:class:`~evorl.workflows.host_loop.ChunkedWorkflow` runs it unchanged: health checks, greedy
evaluation of the distribution's mean actor, recorders, checkpoints (the buffer, the CEM
distribution, the critic and its Adam state are in the state, so a resumed run continues
exactly) and ``evorl.load_policy`` (the mean actor, as TD3's agent).

The logged ``step`` counts each generation's env steps, ``population_size x
episodes_per_actor x env.episode_length`` (every actor's rollout has that fixed length).
The agent is TD3's (``agent:`` takes :func:`~evorl.algorithms.td3.make_mlp_td3_agent`'s
keys); ``agent.exploration_noise`` is the noise on the population's actions during their
episodes (the paper's actors act without noise: set it to 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import optax

from evorl.agent import hparams_as_arrays
from evorl.algorithms.cemrl import CEMRLState, init_cemrl_state, make_generation
from evorl.algorithms.td3 import TD3HParams, make_mlp_td3_agent
from evorl.config import config_mapping, parse_section, require, section_data
from evorl.continuous_control import ContinuousNetworkOptions
from evorl.envs import create_env
from evorl.evaluator import make_evaluator
from evorl.workflows.execution import Executor, Placement
from evorl.workflows.host_loop import ChunkedWorkflow, chunk_health
from evorl.workflows.rl_base import ExperimentConfig


@dataclass(frozen=True)
class CEMRLConfig:
    """The ``cemrl:`` section of a :class:`~evorl.workflows.cemrl.CEMRLWorkflow` run (the
    actor and critic networks and TD3's noise keys are in ``agent:``; ``training.gamma`` and
    ``training.learning_rate``, the actors' and the critic's Adam step, in ``training:``)."""

    #: Actors sampled per generation (N).
    population_size: int = 10
    #: Elites the CEM update averages (K_e).
    num_elites: int = 5
    #: Actors improved by the critic each generation, the first ones sampled (null: N / 2).
    num_learning: int | None = None
    #: Initial variance of every coordinate of the search distribution.
    sigma_init: float = 1e-3
    #: Additive noise on the variance, initially; it decays towards eps_end with tau_eps.
    eps_init: float = 1e-2
    #: The additive noise's limit.
    eps_end: float = 1e-5
    #: Decay of the additive noise per generation.
    tau_eps: float = 0.95
    #: Episodes each actor plays per generation (its fitness is their mean return).
    episodes_per_actor: int = 1
    #: Critic gradient steps per generation (each learning actor takes num_updates / policy_delay).
    num_updates: int = 1000
    #: Transitions per gradient step and learning actor.
    batch_size: int = 256
    #: Transitions the shared replay buffer holds.
    buffer_size: int = 1_000_000
    #: Transitions in the buffer before the first gradient step.
    learning_starts: int = 10_000
    #: Env steps with uniformly random actions (no CEM update in those generations).
    warmup_steps: int = 0
    #: Polyak coefficient of the target critic and target actors.
    tau: float = 0.005

    @property
    def learners(self) -> int:
        return self.population_size // 2 if self.num_learning is None else self.num_learning

    def validate(self, where: str = "cemrl") -> None:
        for key in ("population_size", "num_elites", "episodes_per_actor", "num_updates", "batch_size", "buffer_size"):
            require(getattr(self, key) >= 1, f"{where}.{key} must be >= 1, got {getattr(self, key)}.")
        require(self.num_elites <= self.population_size,
                f"{where}.num_elites={self.num_elites} exceeds {where}.population_size={self.population_size}.")
        require(0 <= self.learners <= self.population_size,
                f"{where}.num_learning={self.learners} must be in [0, population_size={self.population_size}].")
        require(self.sigma_init > 0 and self.eps_init >= 0 and self.eps_end >= 0,
                f"{where}.sigma_init must be > 0 and eps_init, eps_end >= 0.")
        require(0.0 <= self.tau_eps <= 1.0, f"{where}.tau_eps must be in [0, 1], got {self.tau_eps}.")
        require(0.0 < self.tau <= 1.0, f"{where}.tau must be in (0, 1], got {self.tau}.")
        require(self.learning_starts >= 0 and self.warmup_steps >= 0,
                f"{where}.learning_starts and {where}.warmup_steps must be >= 0.")


@dataclass(frozen=True)
class CEMRLTrainingConfig:
    """The ``training:`` keys of CEM-RL: one iteration is one generation."""

    #: Generations.
    num_iterations: int = 100
    #: Generations between evaluations and log lines; each interval is one compiled call.
    eval_interval: int = 10
    #: Greedy episodes per evaluation of the mean actor.
    eval_episodes: int = 16
    #: Adam's step size, of the critic and of each learning actor.
    learning_rate: float = 1e-3
    #: Discount factor of the critic's targets.
    gamma: float = 0.99


@dataclass(frozen=True)
class CEMRLExperimentConfig(ExperimentConfig):
    cemrl: CEMRLConfig = CEMRLConfig()


class CEMRLWorkflow(ChunkedWorkflow):
    """CEM-RL (see the module docstring): one agent, a population of actors inside it."""

    label = "CEM-RL"
    replay_buffer_field = "buffer"
    agent_factory = staticmethod(make_mlp_td3_agent)
    agent_options_cls = ContinuousNetworkOptions
    hparams_cls = TD3HParams
    training_hparams = {"gamma": "discount"}
    training_defaults = {"learning_rate": 1e-3, "gamma": 0.99}
    population_plot = True

    def __init__(self, config: CEMRLExperimentConfig, env, agent, enable_multi_devices=False, recorders=None):
        self.variants, self.num_agents = [{}], 1
        self.asynchronous = False
        self.placement = Placement.create(1, False)
        super().__init__(config, env, agent, recorders)
        tc = config.training
        self.optimizer = optax.adam(tc.learning_rate)
        self.hparams = hparams_as_arrays(self.hparams_of(config.agent, tc))
        self.executor = Executor(make_generation(env, agent, self.optimizer, config.cemrl), self.placement,
                                 final_metrics=chunk_health)
        self.evaluator = make_evaluator(env, agent, tc.eval_episodes)
        self._evaluate = self.executor.map_agents(self.evaluator.evaluate)
        self._evaluation_compiled = True
        self._params_finite = None

    @property
    def env_steps_per_iteration(self) -> int:
        cfg = self.config.cemrl
        return cfg.population_size * cfg.episodes_per_actor * self.env.episode_length

    def init(self, key: jax.Array) -> CEMRLState:
        return self.executor.init(lambda k: init_cemrl_state(self.env, self.agent, self.optimizer, self.config.cemrl,
                                                             self.hparams, k), key)

    # --- config ---------------------------------------------------------------------------
    @classmethod
    def parse_config(cls, cfg) -> CEMRLExperimentConfig:
        cfg = config_mapping(cfg)
        cemrl = parse_section(CEMRLConfig, cfg.pop("cemrl", {}), "cemrl")
        cemrl.validate("cemrl")
        training = section_data(cfg.get("training", {}), "training")
        keys = tuple(CEMRLTrainingConfig.__dataclass_fields__)
        for key in training:
            require(key in keys, f"'training.{key}' does not apply to CEMRLWorkflow: its training keys are "
                                 f"{', '.join(keys)} (one iteration is one generation); the population's, the "
                                 f"buffer's and the gradient steps' keys are in cemrl: "
                                 f"({', '.join(CEMRLConfig.__dataclass_fields__)}).")
        base = vars(super().parse_config(cfg))
        require(not base["sweep"], "CEMRLWorkflow trains one population of actors: give every agent and training "
                                   "key one value (no lists).")
        require(base["runner"].mode != "async", "runner.mode=async: CEMRLWorkflow plays its episodes inside the "
                                                "compiled generation; set runner.mode=auto or fused.")
        require(not base["pbt"].enabled, "pbt does not apply to CEMRLWorkflow: set pbt.enabled=false.")
        require(not base["distributed"].multi_devices and base["distributed"].coordinator_address is None
                and not base["distributed"].auto,
                "CEMRLWorkflow trains on one device for now: set distributed.multi_devices=false.")
        require(not base["agent"].normalize_obs, "agent.normalize_obs: CEMRLWorkflow's actors act on raw "
                                                 "observations for now; set agent.normalize_obs=false.")
        training = CEMRLTrainingConfig(**{key: getattr(base["training"], key) for key in keys})
        return CEMRLExperimentConfig(**{**base, "training": training}, cemrl=cemrl)

    @classmethod
    def build_from_config(cls, cfg, enable_multi_devices: bool = False, **kwargs) -> "CEMRLWorkflow":
        config = cls.parse_config(cfg)
        require(not enable_multi_devices, "CEMRLWorkflow trains on one device for now.")
        cemrl = config.cemrl
        env = create_env(config.env, episode_length=config.env.episode_length, parallel=cemrl.episodes_per_actor)
        require(not env.on_host, f"CEMRLWorkflow plays its episodes inside compiled programs: env_type "
                                 f"{config.env.env_type!r} steps on the host; use a gymnax or brax env.")
        per_generation = cemrl.population_size * cemrl.episodes_per_actor * env.episode_length
        require(cemrl.buffer_size >= per_generation,
                f"cemrl.buffer_size={cemrl.buffer_size} must hold one generation's transitions, population_size x "
                f"episodes_per_actor x env.episode_length = {per_generation}.")
        agent = cls.build_agent(env, config.agent, config.training)
        return cls(config, env, agent, **kwargs)


__all__ = ["CEMRLConfig", "CEMRLExperimentConfig", "CEMRLTrainingConfig", "CEMRLWorkflow"]

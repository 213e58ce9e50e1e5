"""The config sections of the evolution-guided algorithms (:mod:`evorl.algorithms.population_rl`):
the keys every one has (:class:`PopulationRLConfig`), ERL's (:class:`ERLConfig`) and CEM-RL's
(:class:`CEMRLConfig`), their ``training:`` keys (:class:`PopulationRLTrainingConfig`), and the
rules of such a run that read other sections or the built env."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evorl.config.env import HOST_ENV_TYPES
from evorl.config.errors import require
from evorl.config.es import OPTIMIZERS as ES_OPTIMIZERS


#: ``optimiser`` names of the evosax strategies (:data:`evorl.algorithms.es.STRATEGIES`).
EVOSAX_OPTIMISERS = {"openes": "OpenES", "snes": "SNES", "cma_es": "CMA_ES", "ars": "ARS"}
#: Every valid ``optimiser``: sep-CEM, ERL's genetic algorithm, canonical ES, the evosax strategies.
OPTIMISERS = ("cem", "ga", "vanilla_es", *EVOSAX_OPTIMISERS)


@dataclass(frozen=True)
class PopulationRLConfig:
    """The keys every evolution-guided algorithm's section has: the population's episodes,
    the shared buffer, the TD3 gradient steps per generation, and the population optimiser
    (``optimiser``, :mod:`evorl.rl.optimisers`) with the keys of each (read only by it)."""

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
    #: The population optimiser: cem (sep-CEM), ga (ERL's genetic algorithm), vanilla_es
    #: (canonical ES: es_sigma fixed, the mean recombined from num_elites elites), or an evosax
    #: strategy: openes, snes, cma_es, ars.
    optimiser: str = "cem"
    #: cem, vanilla_es: elites the update averages (K_e); ga: actors kept unchanged each generation, the fittest (E).
    num_elites: int = 5
    #: cem: initial variance of every coordinate of the search distribution.
    sigma_init: float = 1e-3
    #: cem: additive noise on the variance, initially; it decays towards eps_end with tau_eps.
    eps_init: float = 1e-2
    #: cem: the additive noise's limit.
    eps_end: float = 1e-5
    #: cem: decay of the additive noise per generation.
    tau_eps: float = 0.95
    #: cem: factor c on the elites' weighted squared deviations in the variance update (null: 1 /
    #: num_elites, the authors' code; 1.0 is the paper's eq. 2, which made CEM-RL's mean actor swing).
    var_scale: float | None = None
    #: ga: actors drawn per tournament.
    tournament_size: int = 3
    #: ga: probability that a pair of selected parents crosses.
    crossover_prob: float = 0.1
    #: ga: probability that a child mutates.
    mutation_prob: float = 0.9
    #: ga: fraction of a mutating child's weights that are perturbed.
    mutation_frac: float = 0.1
    #: ga: std of a perturbation, relative to the weight's magnitude.
    mutation_strength: float = 0.1
    #: ga: probability that a perturbation is a super-mutation, with this relative std.
    super_mutation_prob: float = 0.05
    super_mutation_strength: float = 10.0
    #: ga: probability that a perturbed weight is reset to N(0, 1) instead.
    reset_prob: float = 0.05
    #: ga: mutated weights are clipped to [-weight_clip, weight_clip].
    weight_clip: float = 1e6
    #: evosax strategies: initial standard deviation of the search distribution (mirrored sampling);
    #: vanilla_es: its fixed standard deviation.
    es_sigma: float = 0.01
    #: evosax strategies (but CMA-ES): step size of the mean's optimiser.
    es_learning_rate: float = 0.01
    #: evosax strategies (but CMA-ES): the mean's optimiser, adam or sgd.
    es_optimizer: str = "adam"

    @property
    def elite_var_scale(self) -> float:
        """cem: ``var_scale``, its null resolved (1 / num_elites)."""
        return 1.0 / self.num_elites if self.var_scale is None else self.var_scale

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
        for key in ("batch_size", "learning_starts"):
            require(getattr(self, key) <= self.buffer_size,
                    f"{where}.{key}={getattr(self, key)} exceeds {where}.buffer_size={self.buffer_size}.")
        require(self.optimiser in OPTIMISERS, f"Unknown {where}.optimiser {self.optimiser!r}; valid: "
                                              f"{', '.join(OPTIMISERS)}.")
        {"cem": self._validate_cem, "ga": self._validate_ga, "vanilla_es": self._validate_vanilla_es}.get(
            self.optimiser, self._validate_evosax)(where)

    def _validate_elites(self, where: str) -> None:
        require(self.num_elites >= 1, f"{where}.num_elites must be >= 1, got {self.num_elites}.")
        require(self.num_elites <= self.population_size,
                f"{where}.num_elites={self.num_elites} exceeds {where}.population_size={self.population_size}.")

    def _validate_cem(self, where: str) -> None:
        self._validate_elites(where)
        require(self.sigma_init > 0 and self.eps_init >= 0 and self.eps_end >= 0,
                f"{where}.sigma_init must be > 0 and eps_init, eps_end >= 0.")
        require(0.0 <= self.tau_eps <= 1.0, f"{where}.tau_eps must be in [0, 1], got {self.tau_eps}.")
        require(self.var_scale is None or self.var_scale > 0, f"{where}.var_scale must be > 0, got {self.var_scale}.")

    def _validate_ga(self, where: str) -> None:
        require(0 <= self.num_elites < self.population_size,
                f"{where}.num_elites={self.num_elites} must be in [0, population_size={self.population_size}): "
                f"an actor put into the population replaces a child.")
        require(self.tournament_size >= 1, f"{where}.tournament_size must be >= 1.")
        for key in ("crossover_prob", "mutation_prob", "mutation_frac", "super_mutation_prob", "reset_prob"):
            require(0.0 <= getattr(self, key) <= 1.0, f"{where}.{key} must be in [0, 1], got {getattr(self, key)}.")
        require(self.super_mutation_prob + self.reset_prob <= 1.0,
                f"{where}.super_mutation_prob + {where}.reset_prob must be <= 1.")
        require(self.mutation_strength >= 0 and self.super_mutation_strength >= 0 and self.weight_clip > 0,
                f"{where}.mutation_strength and super_mutation_strength must be >= 0, weight_clip > 0.")

    def _validate_vanilla_es(self, where: str) -> None:
        self._validate_elites(where)
        require(self.es_sigma > 0, f"{where}.es_sigma must be > 0, got {self.es_sigma}.")

    def _validate_evosax(self, where: str) -> None:
        require(self.population_size % 2 == 0, f"{where}.population_size={self.population_size} must be even: "
                                               f"{where}.optimiser={self.optimiser} samples mirrored pairs.")
        require(self.es_sigma > 0 and self.es_learning_rate > 0,
                f"{where}.es_sigma and {where}.es_learning_rate must be > 0.")
        require(self.es_optimizer in ES_OPTIMIZERS,
                f"Unknown {where}.es_optimizer {self.es_optimizer!r}; valid: {', '.join(ES_OPTIMIZERS)}.")


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


@dataclass(frozen=True)
class ERLConfig(PopulationRLConfig):
    """The ``erl:`` section (the genetic operators: :mod:`evorl.algorithms.erl`; the learner's
    networks and noise are in ``agent:``, ``training.gamma`` and ``training.learning_rate`` in
    ``training:``). ``num_updates`` is the learner's TD3 steps per generation."""

    #: The population optimiser: ga (ERL's genetic algorithm), cem, vanilla_es (canonical ES), or an evosax
    #: strategy (openes, snes, cma_es, ars).
    optimiser: str = "ga"
    #: ga: actors kept unchanged each generation, the fittest (E); cem: elites the update averages.
    num_elites: int = 1
    #: Generations between copies of the learner into the population (omega).
    sync_period: int = 1
    #: How the learner enters the search: ``sample`` (it replaces the GA's last child, or the
    #: last sample of the next generation) or ``mean`` (ERL-EDA: the search distribution's
    #: mean moves towards it by injection_step; not with the ga, which has no mean).
    injection: str = "sample"
    #: mean: the step beta of m <- m + beta (learner - m); 1 puts the mean on the learner.
    injection_step: float = 1.0
    #: The actor evaluated, checkpointed as the agent's and loaded by load_policy: ``learner``
    #: (the trained TD3 actor) or ``champion`` (the last generation's fittest actor).
    deploy: str = "learner"

    @property
    def actors_per_generation(self) -> int:
        return self.population_size + 1  # and the learner

    def validate(self, where: str = "erl") -> None:
        super().validate(where)
        require(self.sync_period >= 1, f"{where}.sync_period must be >= 1, got {self.sync_period}.")
        require(self.deploy in ("learner", "champion"),
                f"{where}.deploy must be 'learner' or 'champion', got {self.deploy!r}.")
        require(self.injection in ("sample", "mean"),
                f"Unknown {where}.injection {self.injection!r}; valid: sample, mean.")
        require(self.injection == "sample" or self.optimiser != "ga",
                f"{where}.injection=mean moves a search distribution's mean; {where}.optimiser=ga keeps a "
                f"population and has none: set {where}.optimiser to cem, vanilla_es, openes, snes, cma_es or ars.")
        require(0.0 < self.injection_step <= 1.0,
                f"{where}.injection_step must be in (0, 1], got {self.injection_step}.")


@dataclass(frozen=True)
class CEMRLConfig(PopulationRLConfig):
    """The ``cemrl:`` section of a :class:`~evorl.algorithms.cemrl.CEMRLWorkflow` run (the
    actor and critic networks and TD3's noise keys are in ``agent:``; ``training.gamma`` and
    ``training.learning_rate``, the actors' and the critic's Adam step, in ``training:``).
    ``population_size`` is N, the actors sampled per generation; ``num_updates`` the critic's
    gradient steps per generation (each learning actor takes num_updates / policy_delay)."""

    #: Actors improved by the critic each generation, the first ones sampled (null: N / 2).
    num_learning: int | None = None

    @property
    def learners(self) -> int:
        return self.population_size // 2 if self.num_learning is None else self.num_learning

    def validate(self, where: str = "cemrl") -> None:
        super().validate(where)
        require(0 <= self.learners <= self.population_size,
                f"{where}.num_learning={self.learners} must be in [0, population_size={self.population_size}].")


def check_population_run(name: str, sweep: tuple, runner: Any, pbt: Any, distributed: Any, normalize_obs: bool) -> None:
    """What an evolution-guided run does not do: lists of values, the actor-learner, PBT, several
    devices, normalised observations."""
    require(not sweep, f"{name} trains one population of actors: give every agent and training "
                       "key one value (no lists).")
    require(runner.mode != "async", f"runner.mode=async: {name} plays its episodes inside the "
                                    "compiled generation; set runner.mode=auto or fused.")
    require(not pbt.enabled, f"pbt does not apply to {name}: set pbt.enabled=false.")
    require(not distributed.multi_devices and distributed.coordinator_address is None and not distributed.auto,
            f"{name} trains on one device for now: set distributed.multi_devices=false.")
    require(not normalize_obs, f"agent.normalize_obs: {name}'s actors act on raw "
                               "observations for now; set agent.normalize_obs=false.")


def check_population_placement(name: str, num_devices: int, env_type: str) -> None:
    """An evolution-guided run trains on one device, with an env stepped in compiled programs."""
    require(num_devices == 1, f"{name} trains on one device for now.")
    require(env_type not in HOST_ENV_TYPES, f"{name} plays its episodes inside compiled "
                                            f"programs: env_type {env_type!r} steps on the "
                                            f"host; use a gymnax or brax env.")


def check_buffer_holds_generation(section: PopulationRLConfig, episode_length: int, where: str) -> None:
    """The shared buffer holds one generation's transitions (``episode_length``: the env's)."""
    per_generation = section.actors_per_generation * section.episodes_per_actor * episode_length
    require(section.buffer_size >= per_generation,
            f"{where}.buffer_size={section.buffer_size} must hold one generation's transitions, "
            f"{section.actors_per_generation} actors x episodes_per_actor x env.episode_length = "
            f"{per_generation}.")

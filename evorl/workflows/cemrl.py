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

from evorl.algorithms.cemrl import init_cemrl_state, make_generation
from evorl.config import require
from evorl.workflows.population_rl import PopulationRLConfig, PopulationRLTrainingConfig, PopulationRLWorkflow
from evorl.workflows.rl_base import ExperimentConfig


@dataclass(frozen=True)
class CEMRLConfig(PopulationRLConfig):
    """The ``cemrl:`` section of a :class:`~evorl.workflows.cemrl.CEMRLWorkflow` run (the
    actor and critic networks and TD3's noise keys are in ``agent:``; ``training.gamma`` and
    ``training.learning_rate``, the actors' and the critic's Adam step, in ``training:``).
    ``population_size`` is N, the actors sampled per generation; ``num_updates`` the critic's
    gradient steps per generation (each learning actor takes num_updates / policy_delay)."""

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

    @property
    def learners(self) -> int:
        return self.population_size // 2 if self.num_learning is None else self.num_learning

    def validate(self, where: str = "cemrl") -> None:
        super().validate(where)
        require(self.num_elites >= 1, f"{where}.num_elites must be >= 1, got {self.num_elites}.")
        require(self.num_elites <= self.population_size,
                f"{where}.num_elites={self.num_elites} exceeds {where}.population_size={self.population_size}.")
        require(0 <= self.learners <= self.population_size,
                f"{where}.num_learning={self.learners} must be in [0, population_size={self.population_size}].")
        require(self.sigma_init > 0 and self.eps_init >= 0 and self.eps_end >= 0,
                f"{where}.sigma_init must be > 0 and eps_init, eps_end >= 0.")
        require(0.0 <= self.tau_eps <= 1.0, f"{where}.tau_eps must be in [0, 1], got {self.tau_eps}.")


#: The ``training:`` keys of CEM-RL: one iteration is one generation.
CEMRLTrainingConfig = PopulationRLTrainingConfig


@dataclass(frozen=True)
class CEMRLExperimentConfig(ExperimentConfig):
    cemrl: CEMRLConfig = CEMRLConfig()


class CEMRLWorkflow(PopulationRLWorkflow):
    """CEM-RL (see the module docstring): one agent, a population of actors inside it."""

    label = "CEM-RL"
    section = "cemrl"
    section_cls = CEMRLConfig
    experiment_config_cls = CEMRLExperimentConfig
    init_state = staticmethod(init_cemrl_state)
    generation_builder = staticmethod(make_generation)


__all__ = ["CEMRLConfig", "CEMRLExperimentConfig", "CEMRLTrainingConfig", "CEMRLWorkflow"]

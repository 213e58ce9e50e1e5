"""``ERLWorkflow``: ERL (Khadka & Tumer, 2018) on the shared host loop
(``workflow_cls: evorl.workflows.ERLWorkflow`` with an ``erl:`` section, see :class:`ERLConfig`;
the generation is :func:`~evorl.algorithms.erl.make_generation`, the host side
:class:`~evorl.workflows.population_rl.PopulationRLWorkflow`).

The learner is TD3's (``agent:`` takes :func:`~evorl.algorithms.td3.make_mlp_td3_agent`'s keys;
the paper's DDPG update is ``policy_delay: 1, target_noise: 0`` with twin critics); it explores
with ``agent.exploration_noise`` while the population acts without noise. A generation plays
``population_size + 1`` actors' episodes. The evaluated agent and ``evorl.load_policy`` act
with the trained learner (``erl.deploy: learner``) or the last generation's champion
(``erl.deploy: champion``).
"""

from __future__ import annotations

from dataclasses import dataclass

from evorl.algorithms.erl import init_erl_state, make_generation
from evorl.config import require
from evorl.workflows.population_rl import PopulationRLConfig, PopulationRLWorkflow
from evorl.workflows.rl_base import ExperimentConfig


@dataclass(frozen=True)
class ERLConfig(PopulationRLConfig):
    """The ``erl:`` section (the genetic operators: :mod:`evorl.algorithms.erl`; the learner's
    networks and noise are in ``agent:``, ``training.gamma`` and ``training.learning_rate`` in
    ``training:``). ``num_updates`` is the learner's TD3 steps per generation."""

    #: Actors kept unchanged each generation, the fittest (E).
    num_elites: int = 1
    #: Actors drawn per tournament.
    tournament_size: int = 3
    #: Probability that a pair of selected parents crosses.
    crossover_prob: float = 0.1
    #: Probability that a child mutates.
    mutation_prob: float = 0.9
    #: Fraction of a mutating child's weights that are perturbed.
    mutation_frac: float = 0.1
    #: Std of a perturbation, relative to the weight's magnitude.
    mutation_strength: float = 0.1
    #: Probability that a perturbation is a super-mutation, with this relative std.
    super_mutation_prob: float = 0.05
    super_mutation_strength: float = 10.0
    #: Probability that a perturbed weight is reset to N(0, 1) instead.
    reset_prob: float = 0.05
    #: Mutated weights are clipped to [-weight_clip, weight_clip].
    weight_clip: float = 1e6
    #: Generations between copies of the learner into the population (omega).
    sync_period: int = 1
    #: The actor evaluated, checkpointed as the agent's and loaded by load_policy: ``learner``
    #: (the trained TD3 actor) or ``champion`` (the last generation's fittest actor).
    deploy: str = "learner"

    @property
    def actors_per_generation(self) -> int:
        return self.population_size + 1  # and the learner

    def validate(self, where: str = "erl") -> None:
        super().validate(where)
        require(0 <= self.num_elites < self.population_size,
                f"{where}.num_elites={self.num_elites} must be in [0, population_size={self.population_size}): "
                f"the learner replaces a child.")
        require(self.tournament_size >= 1 and self.sync_period >= 1,
                f"{where}.tournament_size and {where}.sync_period must be >= 1.")
        for key in ("crossover_prob", "mutation_prob", "mutation_frac", "super_mutation_prob", "reset_prob"):
            require(0.0 <= getattr(self, key) <= 1.0, f"{where}.{key} must be in [0, 1], got {getattr(self, key)}.")
        require(self.super_mutation_prob + self.reset_prob <= 1.0,
                f"{where}.super_mutation_prob + {where}.reset_prob must be <= 1.")
        require(self.deploy in ("learner", "champion"),
                f"{where}.deploy must be 'learner' or 'champion', got {self.deploy!r}.")
        require(self.mutation_strength >= 0 and self.super_mutation_strength >= 0 and self.weight_clip > 0,
                f"{where}.mutation_strength and super_mutation_strength must be >= 0, weight_clip > 0.")


@dataclass(frozen=True)
class ERLExperimentConfig(ExperimentConfig):
    erl: ERLConfig = ERLConfig()


class ERLWorkflow(PopulationRLWorkflow):
    """ERL (see the module docstring): one agent, a genetic population and a TD3 learner inside it."""

    label = "ERL"
    section = "erl"
    section_cls = ERLConfig
    experiment_config_cls = ERLExperimentConfig
    init_state = staticmethod(init_erl_state)
    generation_builder = staticmethod(make_generation)


__all__ = ["ERLConfig", "ERLExperimentConfig", "ERLWorkflow"]

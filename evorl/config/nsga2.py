"""The ``nsga2:`` config section of an NSGA-II run (:class:`NSGA2Config`), and the rules that need
the built env (:func:`check_nsga2_env`) or the run's other sections (:func:`check_nsga2_run`)."""

from __future__ import annotations

from dataclasses import dataclass

from evorl.config.errors import require

#: ``nsga2.rescore_survivors``' values (:mod:`evorl.algorithms.nsga2`'s docstring).
RESCORE_MODES = ("mean", "latest", "never")


@dataclass(frozen=True)
class NSGA2Config:
    """The ``nsga2:`` section of an :class:`~evorl.workflows.NSGA2Workflow` run."""

    #: The env's reward terms to maximise, their episode sums the objectives (at least 2).
    objectives: tuple[str, ...] = ()
    #: Hypervolume's reference point, one value per objective (below every return that counts).
    reference_point: tuple[float, ...] = ()
    #: Members N; each generation plays N children.
    population_size: int = 32
    #: Standard deviation of the Gaussian mutation of every parameter.
    sigma: float = 0.02
    #: Probability that a pair of parents is crossed neuron-wise before mutation.
    crossover_prob: float = 0.0
    #: Greedy episodes each child plays; its objectives are their mean term returns.
    episodes_per_member: int = 1
    #: How the population's objectives are kept from one generation to the next
    #: (:mod:`evorl.algorithms.nsga2`'s docstring): ``mean`` (re-scored on fresh episodes each
    #: generation, the running mean of every episode played), ``latest`` (re-scored outright) or
    #: ``never`` (scored once).
    rescore_survivors: str = "mean"

    def validate(self, where: str) -> None:
        require(len(self.objectives) >= 2, f"{where}.objectives must name at least 2 reward terms, got "
                                           f"{list(self.objectives)}.")
        require(len(set(self.objectives)) == len(self.objectives),
                f"{where}.objectives names a term twice: {list(self.objectives)}.")
        require(len(self.objectives) == 2, f"{where}.objectives has {len(self.objectives)} terms: the hypervolume is "
                                           f"computed exactly for 2 objectives only; choose 2.")
        require(len(self.reference_point) == len(self.objectives),
                f"{where}.reference_point has {len(self.reference_point)} values; it needs one per objective "
                f"({len(self.objectives)}: {', '.join(self.objectives)}).")
        require(self.population_size >= 4 and self.population_size % 2 == 0,
                f"{where}.population_size must be even and >= 4, got {self.population_size}.")
        require(self.sigma > 0, f"{where}.sigma must be > 0, got {self.sigma}.")
        require(0.0 <= self.crossover_prob <= 1.0, f"{where}.crossover_prob must be in [0, 1], got {self.crossover_prob}.")
        require(self.episodes_per_member >= 1,
                f"{where}.episodes_per_member must be >= 1, got {self.episodes_per_member}.")
        require(self.rescore_survivors in RESCORE_MODES,
                f"Unknown {where}.rescore_survivors {self.rescore_survivors!r}; valid: {', '.join(RESCORE_MODES)}.")

    @property
    def episodes_per_generation(self) -> int:
        """Episodes one generation plays: ``N E`` children, and the population again unless
        ``rescore_survivors`` is ``never``."""
        members = self.population_size * (1 if self.rescore_survivors == "never" else 2)
        return members * self.episodes_per_member


def check_nsga2_env(nsga2: NSGA2Config, reward_terms: tuple[str, ...], action_repeat: int, env_name: str,
                    where: str = "nsga2") -> None:
    """The objectives are reward terms the env (``env_name``, with ``reward_terms`` and
    ``action_repeat``) declares, read per env step."""
    terms = tuple(reward_terms)
    require(bool(terms), f"{where}.objectives: env {env_name!r} declares no reward terms; NSGA-II needs an env "
                         f"whose reward is a sum of named terms (brax).")
    unknown = [name for name in nsga2.objectives if name not in terms]
    require(not unknown, f"{where}.objectives: {', '.join(unknown)} not among the env's reward terms "
                         f"({', '.join(terms)}).")
    require(action_repeat == 1, f"{where}: reward terms are read per env step; env.action_repeat must be 1.")


def check_nsga2_run(name: str, pbt_enabled: bool, num_seeds: int) -> None:
    """NSGA-II trains one population, one Pareto front, per run."""
    require(not pbt_enabled, f"pbt evolves a population of scalar-fitness searches (ESWorkflow); "
                             f"{name} evolves one Pareto front: set pbt.enabled=false.")
    require(num_seeds == 1, f"training.num_seeds={num_seeds}: {name} trains one population per run; run seeds as "
                            f"separate runs.")

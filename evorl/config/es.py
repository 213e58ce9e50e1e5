"""The ``es:`` config section of an ES run (:class:`ESConfig`), the strategies it can name
(:data:`STRATEGIES`), and the rules that need the env (:func:`check_objectives`) or the
optional evosax package (:func:`import_evosax_algorithms`)."""

from __future__ import annotations

from dataclasses import dataclass

from evorl.config.errors import ConfigError, install_hint, require


@dataclass(frozen=True)
class StrategySpec:
    """How a strategy is built and told. ``evosax_name``: its evosax class (None: one of
    ours, :mod:`evorl.rl.optimisers`). ``shaped_sign``: the sign our centred
    ranks of the cost ``-R`` take for its update (+1: it minimises the values it is told, -1:
    it ascends them as utilities); None: it keeps its own rank weights (CMA-ES's recombination
    weights, sep-CEM's and canonical ES's log-rank weights of the elites). ``optimizer``: the
    mean follows ``es.optimizer`` with ``es.learning_rate``."""

    evosax_name: str | None
    shaped_sign: float | None
    optimizer: bool
    #: Its own sampling is antithetic (``[+z, -z]``), which its update relies on.
    always_mirrored: bool = False
    #: Its search distribution's std stays ``sigma`` (OpenES, ARS; SNES adapts its own).
    fixed_std: bool = False

    @property
    def state_hyperparameters(self) -> tuple[str, ...]:
        """The ``es:`` keys its search reads from its state (:attr:`~evorl.rl.optimisers.AskTell.hyperparameters`):
        each may take a list (one run per value) and evolve under PBT."""
        return ("learning_rate",) * self.optimizer + ("sigma",) * self.fixed_std


STRATEGIES = {
    "OpenES": StrategySpec("Open_ES", shaped_sign=1.0, optimizer=True, fixed_std=True),
    "ARS": StrategySpec("ARS", shaped_sign=1.0, optimizer=True, always_mirrored=True, fixed_std=True),
    "SNES": StrategySpec("SNES", shaped_sign=-1.0, optimizer=True),
    "CMA_ES": StrategySpec("CMA_ES", shaped_sign=None, optimizer=False),
    "SepCEM": StrategySpec(None, shaped_sign=None, optimizer=False),
    "VanillaES": StrategySpec(None, shaped_sign=None, optimizer=False),
}
FITNESS_SHAPINGS = ("centered_rank", "raw", "strategy")
OPTIMIZERS = ("adam", "sgd")


@dataclass(frozen=True)
class ESConfig:
    """The ``es:`` section of an :class:`~evorl.workflows.ESWorkflow` run."""

    #: The strategy: OpenES, SNES, CMA_ES or ARS (evosax's), SepCEM (sep-CEM) or VanillaES
    #: (canonical ES), the last two :mod:`evorl.rl.optimisers`'.
    strategy: str = "OpenES"
    #: Candidates per generation (even with mirrored sampling).
    population_size: int = 64
    #: Initial standard deviation of the search distribution (OpenES, ARS and VanillaES keep it
    #: fixed; SepCEM's initial variance is sigma^2 in every coordinate).
    sigma: float = 0.1
    #: Step size of the mean (OpenES, ARS, SNES; CMA-ES steps with its own rule).
    learning_rate: float = 0.01
    #: Optimiser of the mean's update for OpenES, ARS, SNES: adam or sgd.
    optimizer: str = "adam"
    #: Antithetic pairs mean +- sigma eps (ARS always samples them).
    mirrored: bool = True
    #: centered_rank (ours, ranks in [-0.5, 0.5]), raw (the returns as they are) or strategy
    #: (evosax's default shaping of the strategy). SNES steps by ``lr * std * sum_i u_i z_i``
    #: (no ``1 / N``) and is made for its own utilities (``sum |u_i| ~ 2``): centred ranks
    #: (``sum |u_i| ~ N / 4``) scale its mean and std steps by ~N / 8.
    fitness_shaping: str = "centered_rank"
    #: Greedy episodes each candidate plays; its fitness is their mean return.
    episodes_per_member: int = 1
    #: Normalise observations with running statistics shared by the whole population.
    obs_norm: bool = False
    #: Reward terms of the env (``env.reward_terms``) whose weighted episode sums are the
    #: fitness, with ``objective_weights``; empty: the env's reward.
    objectives: tuple[str, ...] = ()
    objective_weights: tuple[float, ...] = ()
    #: SepCEM, VanillaES: elites the mean recombines (K_e; null: population_size / 2).
    num_elites: int | None = None
    #: SepCEM: additive noise on the variance, initially; it decays towards eps_end with tau_eps.
    eps_init: float = 1e-3
    #: SepCEM: the additive noise's limit.
    eps_end: float = 1e-5
    #: SepCEM: decay of the additive noise per generation (eps <- tau_eps eps + (1 - tau_eps) eps_end).
    tau_eps: float = 0.95
    #: SepCEM: factor c on the elites' weighted squared deviations in the variance update (1:
    #: the paper's eq. 2 and EvoRL's SepCEM; CEM-RL's section defaults to 1 / num_elites).
    var_scale: float = 1.0

    @property
    def spec(self) -> StrategySpec:
        return STRATEGIES[self.strategy]

    @property
    def elites(self) -> int:
        """SepCEM, VanillaES: ``num_elites``, its null resolved (population_size / 2)."""
        return self.population_size // 2 if self.num_elites is None else self.num_elites

    def validate(self, where: str) -> None:
        require(self.strategy in STRATEGIES,
                f"Unknown {where}.strategy {self.strategy!r}; valid: {', '.join(STRATEGIES)}.")
        require(self.population_size >= 2, f"{where}.population_size must be >= 2, got {self.population_size}.")
        require(self.sigma > 0, f"{where}.sigma must be > 0, got {self.sigma}.")
        require(self.learning_rate > 0, f"{where}.learning_rate must be > 0, got {self.learning_rate}.")
        require(self.optimizer in OPTIMIZERS, f"Unknown {where}.optimizer {self.optimizer!r}; valid: adam, sgd.")
        require(self.fitness_shaping in FITNESS_SHAPINGS,
                f"Unknown {where}.fitness_shaping {self.fitness_shaping!r}; valid: {', '.join(FITNESS_SHAPINGS)}.")
        require(self.episodes_per_member >= 1,
                f"{where}.episodes_per_member must be >= 1, got {self.episodes_per_member}.")
        require(len(self.objective_weights) == len(self.objectives),
                f"{where}.objective_weights has {len(self.objective_weights)} values; it needs one per entry of "
                f"{where}.objectives ({len(self.objectives)}).")
        spec = self.spec
        require(not (self.mirrored or spec.always_mirrored) or self.population_size % 2 == 0,
                f"{where}.population_size={self.population_size} must be even for mirrored sampling.")
        require(self.mirrored or not spec.always_mirrored,
                f"{where}.mirrored=false: {self.strategy} always samples mirrored pairs (its update uses them).")
        require(spec.shaped_sign is not None or self.fitness_shaping == "strategy",
                f"{where}.fitness_shaping={self.fitness_shaping}: {self.strategy} ranks the population with its own "
                f"recombination weights; set {where}.fitness_shaping=strategy.")
        if spec.evosax_name is None:
            require(1 <= self.elites <= self.population_size,
                    f"{where}.num_elites={self.elites} must be in [1, population_size={self.population_size}].")
        if self.strategy == "SepCEM":
            require(self.eps_init >= 0 and self.eps_end >= 0 and 0.0 <= self.tau_eps <= 1.0 and self.var_scale > 0,
                    f"{where}.eps_init and {where}.eps_end must be >= 0, {where}.tau_eps in [0, 1] and "
                    f"{where}.var_scale > 0.")



def check_objectives(objectives: tuple[str, ...], reward_terms: tuple[str, ...] | list[str], where: str) -> None:
    """Each of ``objectives`` is one of the env's ``reward_terms``."""
    missing = [name for name in objectives if name not in reward_terms]
    require(not missing, f"{where}: {', '.join(missing)} not among the env's reward terms "
                         f"({', '.join(reward_terms) or 'none declared'}).")


def import_evosax_algorithms():
    """``evosax.algorithms``; a missing evosax is the error naming the pip extra that installs it."""
    try:
        import evosax.algorithms as algorithms
    except ImportError:
        raise ConfigError(f"ESWorkflow needs evosax: {install_hint('es')} (evosax>=0.3).") from None
    return algorithms

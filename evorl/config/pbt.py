"""The ``pbt:`` config section: population-based training (:mod:`evorl.engine.pbt`)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

import numpy as np

from evorl.config.errors import ConfigError, require, unknown_key_error
from evorl.config.parsing import dotted_keys

FITNESS = ("eval", "train")
#: How the population exchanges weights and hyperparameters: truncation selection with
#: perturbation (Jaderberg et al., 2017), or a competitive swarm (Cheng & Jin, 2015).
STRATEGIES = ("truncation", "cso")
#: The keys of truncation selection (``strategy: cso`` refuses values other than their defaults).
TRUNCATION_KEYS = ("exploit_fraction", "perturb_factors", "resample_probability")
#: The hyperparameters resampled log-uniformly, and moved in log space by the swarm (their
#: bounds must be > 0): learning rates, and ES's search std.
LOG_SCALE_KEYS = ("training.learning_rate", "es.learning_rate", "es.sigma")


@dataclass(frozen=True)
class PBTConfig:
    """The ``pbt:`` section: population-based training over the ``num_seeds`` x variants agents."""

    #: Evolve the population (exploit and explore every ``interval`` iterations).
    enabled: bool = False
    #: Iterations between exploit/explore steps.
    interval: int = 10
    #: The exploit/explore step: ``truncation`` (the worst ``exploit_fraction`` copy the best
    #: and perturb or resample the copied hyperparameters) or ``cso`` (random pairs; each
    #: pair's loser copies its winner's weights and moves its hyperparameters towards the
    #: winner's with a velocity, ``evorl.rl.evolution.cso_step``).
    strategy: str = "truncation"
    #: How agents are ranked: ``eval`` (mean greedy return of ``eval_episodes`` episodes) or
    #: ``train`` (mean return of the training episodes that ended since the last step).
    fitness: str = "eval"
    #: Greedy episodes per agent for ``fitness: eval``.
    eval_episodes: int = 8
    #: ``strategy: truncation``: the worst fraction of agents replaced by copies of the best
    #: fraction (in (0, 0.5]).
    exploit_fraction: float = 0.25
    #: ``strategy: truncation``: a copied hyperparameter is multiplied by one of these, drawn uniformly.
    perturb_factors: tuple[float, ...] = (0.8, 1.2)
    #: ``strategy: truncation``: the probability that a copied hyperparameter is resampled
    #: from its range instead (log-uniformly for learning rates).
    resample_probability: float = 0.25
    #: ``strategy: cso``: the weight of a loser's pull towards the population's mean
    #: hyperparameters (the paper's phi; 0, as in EvoRL's PBT-CSO, leaves the pull out).
    cso_phi: float = 0.0
    #: The hyperparameters that evolve, with their bounds: ``{agent.clip_epsilon: [0.05, 0.5]}``.
    hyperparameters: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):  # nested keys (``{agent: {clip_epsilon: [..]}}``, a CLI override) to dotted ones
        object.__setattr__(self, "hyperparameters",
                           {key: plain_bounds(b) for key, b in dotted_keys(self.hyperparameters).items()})

    def validate(self, where: str) -> None:
        require(self.interval >= 1, f"{where}.interval must be >= 1, got {self.interval}.")
        require(self.eval_episodes >= 1, f"{where}.eval_episodes must be >= 1, got {self.eval_episodes}.")
        require(self.fitness in FITNESS, f"{where}.fitness must be one of {', '.join(FITNESS)}; got {self.fitness!r}.")
        require(0 < self.exploit_fraction <= 0.5,
                f"{where}.exploit_fraction must be in (0, 0.5] (the worst fraction copies the best), "
                f"got {self.exploit_fraction}.")
        require(len(self.perturb_factors) >= 1 and all(f > 0 for f in self.perturb_factors),
                f"{where}.perturb_factors must be a non-empty list of factors > 0, got {list(self.perturb_factors)}.")
        require(0 <= self.resample_probability <= 1,
                f"{where}.resample_probability must be in [0, 1], got {self.resample_probability}.")
        require(self.strategy in STRATEGIES,
                f"{where}.strategy must be one of {', '.join(STRATEGIES)}; got {self.strategy!r}.")
        require(math.isfinite(self.cso_phi) and self.cso_phi >= 0,
                f"{where}.cso_phi must be a finite number >= 0, got {self.cso_phi}.")
        require(self.strategy == "cso" or self.cso_phi == 0,
                f"{where}.cso_phi={self.cso_phi} applies to {where}.strategy=cso, not {self.strategy}.")
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for key in TRUNCATION_KEYS:
            value = getattr(self, key)
            require(self.strategy != "cso" or (tuple(value) if isinstance(value, list) else value) == defaults[key],
                    f"{where}.{key}={value} applies to {where}.strategy=truncation; {where}.strategy=cso replaces "
                    f"the loser of every random pair (half the agents) and moves its hyperparameters towards "
                    f"the winner's: remove {key}.")
        require(not self.enabled or bool(self.hyperparameters),
                f"{where}.enabled=true but {where}.hyperparameters is empty: PBT evolves the hyperparameters "
                f"listed there with their bounds, e.g. {{training.learning_rate: [1e-5, 1e-2]}}; list at least "
                f"one, or set {where}.enabled=false.")
        for key, bounds in self.hyperparameters.items():
            name = f"{where}.hyperparameters.{key}"
            ok = (isinstance(bounds, (list, tuple)) and len(bounds) == 2
                  and all(isinstance(b, (int, float)) and not isinstance(b, bool) and math.isfinite(b) for b in bounds))
            require(ok, f"{name} must be [low, high], two finite numbers; got {bounds!r}.")
            require(bounds[0] < bounds[1], f"{name} = {list(bounds)}: low must be < high.")
            require(key not in LOG_SCALE_KEYS or bounds[0] > 0,
                    f"{name} = {list(bounds)}: {key} is resampled log-uniformly, its bounds must be > 0.")

    def check_against(self, eval_interval: int) -> None:
        """With ``fitness: eval``, PBT steps fall at the ends of the logged chunks."""
        require(not self.enabled or self.fitness != "eval" or self.interval % eval_interval == 0,
                f"pbt.interval={self.interval} must be a multiple of training.eval_interval={eval_interval} with "
                f"pbt.fitness=eval (a PBT step then ends a chunk of eval_interval iterations); change one of "
                f"them, or use pbt.fitness=train.")


def check_pbt_run(pbt: PBTConfig, num_agents: int, split_envs: bool) -> None:
    """An enabled ``pbt:`` section against the run: whole agents on each device, and enough agents
    for the strategy (``split_envs``: several devices with ``distributed.layout: envs``)."""
    require(not split_envs, "pbt.enabled on several devices needs distributed.layout=population (whole agents on "
                            "each device), not distributed.layout=envs.")
    if pbt.strategy == "cso":
        require(num_agents >= 2, f"pbt.strategy=cso pairs the agents, and {num_agents} agent (training.num_seeds x "
                                 f"hyperparameter variants) has no partner; train at least 2.")
    else:
        num_replaced = int(num_agents * pbt.exploit_fraction)
        require(num_replaced >= 1,
                f"pbt: {num_agents} agents (training.num_seeds x hyperparameter variants) x pbt.exploit_fraction="
                f"{pbt.exploit_fraction} replaces no agent; train more agents or raise exploit_fraction.")


def check_pbt_hyperparameters(pbt: PBTConfig, config_keys: list[str], evolvable: tuple[str, ...],
                              why_not_evolvable: Callable[[str], str], check_value: Callable[[str, float], None],
                              initial_values: Callable[[str], list]) -> None:
    """Each ``pbt.hyperparameters`` key is a config key (``config_keys``) that may evolve
    (``evolvable``; else ``why_not_evolvable(key)`` says why); each bound is a valid value of it
    (``check_value(key, bound)`` raises the config's error otherwise); every agent's initial value
    (``initial_values(key)``, one per variant) lies within the bounds; ``strategy: cso`` needs two."""
    for key, (low, high) in pbt.hyperparameters.items():
        name = f"pbt.hyperparameters.{key}"
        if key not in config_keys:
            error = unknown_key_error(key, config_keys, "")
            raise ConfigError(f"{name}: {error} Keys that can evolve: {', '.join(evolvable) or 'none'}.")
        require(key in evolvable,
                f"{name}: '{key}' cannot evolve: {why_not_evolvable(key)} "
                f"Keys that can evolve: {', '.join(evolvable) or 'none'}.")
        for bound in (low, high):
            try:
                check_value(key, float(bound))
            except ConfigError as e:
                raise ConfigError(f"{name} = {[low, high]}: the bound {bound} is not a valid value: {e}") from None
        starts = set()
        for value in initial_values(key):
            require(value is not None, f"{name}: {key} is null; give it a value to evolve it.")
            require(low <= value <= high, f"{name} = {[low, high]}: the initial value {key}={value} lies outside "
                                          f"the bounds; widen them or change the initial value.")
            starts.add(value)
        require(pbt.strategy != "cso" or len(starts) > 1,
                f"{name}: every agent starts with {key}={value}, and pbt.strategy=cso moves an agent's value only "
                f"towards the other agents' values (from a zero velocity), so it would never change. Give {key} a "
                f"list of initial values, or use pbt.strategy=truncation.")


def plain_bounds(bounds: Any) -> Any:
    """``[low, high]`` with NumPy scalars (``np.float32(0.1)``, ``np.int64(1)``) or a NumPy array as
    the Python numbers they hold; anything else unchanged (``validate`` names what is wrong)."""
    if isinstance(bounds, np.ndarray):
        return bounds.tolist()
    if isinstance(bounds, (list, tuple)):
        return type(bounds)(b.item() if isinstance(b, np.generic) else b for b in bounds)
    return bounds

r"""Population optimisers behind one ask/tell interface (:class:`AskTell`), over a flat
parameter vector ``x [D]`` (``jax.flatten_util.ravel_pytree`` of a network's parameters):

.. code-block:: text

    state               = init(key, mean [D], population [N, D] | None)
    population, state   = ask(key, state)                      # [N, D]
    state               = tell(key, state, population, fitness) # fitness [N], higher is better
    mean(state) -> [D]      metrics(state) -> {name: []}

Every function is pure and traceable, so a whole generation (ask, play, learn, tell) is one
jitted program, vmappable over seeds. ``tell`` takes the population that was evaluated,
which need not be the one ``ask`` returned: CEM-RL tells the members after its TD3 steps,
and every optimiser here recomputes its update from the members it is told. Implemented:

* :func:`cem` -- sep-CEM (Pourchot & Sigaud, 2019) over :math:`\mathcal N(\mu, \mathrm{diag}(v))`;
* :func:`vanilla_es` -- canonical ES (Chrabaszcz et al., 2018): a fixed :math:`\sigma`, the mean
  recombined from the elites with log-rank weights;
* :func:`genetic` -- ERL's genetic algorithm (Khadka & Tumer, 2018): elites, tournaments,
  neuron-wise crossover, mutation; it keeps its population between generations;
* :func:`evosax_strategy` -- any evosax strategy (OpenES, SNES, CMA-ES, ARS), which minimises,
  told ``-fitness``.

An optimiser declares what it can do (``keeps_population``, ``recentre``) and which of its
hyperparameters it reads from its state (``hyperparameters``: then every member of a population
of optimisers, vmapped, holds its own, and PBT can copy and perturb them) rather than being
probed for it.
Fitness is ranked by one rule (:func:`~evorl.rl.evolution.ranked`): a non-finite fitness (NaN,
+inf or -inf, a diverged agent) ranks last. The operators these optimisers are built from
(sep-CEM's update, the genetic operators, the ranking, mirrored sampling) live in
:mod:`evorl.rl.evolution` and are importable from here too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from evorl.rl.evolution import (  # noqa: F401  (the operators, importable from here too)
    CEMState, cem_init, cem_sample, cem_update, crossover, elites, ga_step, log_rank_weights, mirror, mutate,
    neuron_segments, ranked, ranking, tournament_select, vanilla_es_update,
)


# --------------------------------------------------------------------------------------
# The interface
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StateHyperparameter:
    """A hyperparameter an optimiser reads from its state, not from a closure: ``get(state) -> []``
    and ``set(state, value []) -> state`` (float32)."""

    get: Callable[[Any], jax.Array]
    set: Callable[[Any, jax.Array], Any]


@dataclass(frozen=True)
class AskTell:
    r"""A population optimiser as a record of pure functions (module docstring).

    ``keeps_population``: ``ask`` returns the members the last ``tell`` kept (a genetic
    algorithm: elites survive, an actor put in by ``inject(state, index, x [D])`` stays until
    selection drops it, ``parents(state) [N]`` says which member each descends from). False:
    ``ask`` samples new members around ``mean`` every generation, and an outside actor joins
    a generation by replacing a sampled member before ``tell``.

    ``recentre(state, x [D], step)``: a search distribution's mean moved towards ``x``,
    :math:`m \leftarrow m + \beta (x - m)` with :math:`\beta` = ``step`` (:func:`move_mean`;
    ERL-EDA puts its learner there); None for an optimiser without a mean to move (the GA).

    ``hyperparameters``: ``{name: StateHyperparameter}``, the hyperparameters held in the state
    (named as the ``es:`` keys that set them: ``learning_rate``, ``sigma``); the others are
    fixed when the optimiser is built."""

    name: str
    population_size: int
    init: Callable[..., Any]
    ask: Callable[[jax.Array, Any], tuple[jax.Array, Any]]
    tell: Callable[[jax.Array, Any, jax.Array, jax.Array], Any]
    mean: Callable[[Any], jax.Array]
    metrics: Callable[[Any], dict]
    keeps_population: bool = False
    inject: Callable[[Any, int, jax.Array], Any] | None = None
    parents: Callable[[Any], jax.Array] | None = None
    recentre: Callable[[Any, jax.Array, Any], Any] | None = None
    hyperparameters: Mapping[str, StateHyperparameter] = dataclasses.field(default_factory=dict, compare=False)


def with_hyperparameters(search: AskTell, state: Any, values: Mapping[str, Any]) -> Any:
    """``state`` of ``search`` with the state hyperparameters ``values`` (``{name: value}``) set;
    a name the optimiser does not hold in its state is an error naming the ones it does."""
    for name, value in values.items():
        if name not in search.hyperparameters:
            raise ValueError(f"{search.name} holds no hyperparameter {name!r} in its state; it holds "
                             f"{', '.join(search.hyperparameters) or 'none'}.")
        state = search.hyperparameters[name].set(state, value)
    return state


def move_mean(state: Any, x: jax.Array, step: Any) -> Any:
    r"""``state`` (any state with a ``mean [D]``) with :math:`m \leftarrow m + \beta (x - m)`,
    :math:`\beta` = ``step`` (1: the mean becomes ``x``); the rest of the state as it was."""
    return state.replace(mean=(1.0 - step) * state.mean + step * x)  # exactly x at step 1


def mirrored_if(mirrored: bool, population: jax.Array, mean: jax.Array) -> jax.Array:
    """``population [N, D]``, its second half mirrored through ``mean`` when ``mirrored`` (:func:`mirror`)."""
    return mirror(population, mean) if mirrored else population


# --------------------------------------------------------------------------------------
# sep-CEM
# --------------------------------------------------------------------------------------
def cem(population_size: int, num_elites: int, sigma_init: float, eps_init: float, eps_end: float,
        tau_eps: float, var_scale: float = 1.0, mirrored: bool = False) -> AskTell:
    """sep-CEM as an :class:`AskTell`: ``ask`` is :func:`~evorl.rl.evolution.cem_sample`
    (mirrored through the mean with ``mirrored``), ``tell``
    :func:`~evorl.rl.evolution.cem_update` (no randomness; the elites' variance times
    ``var_scale``, CEM-RL's ``cemrl.var_scale``), the initial variance ``sigma_init`` in every
    coordinate."""
    return AskTell(
        name="cem", population_size=population_size,
        init=lambda key, mean, population=None: cem_init(mean, sigma_init, eps_init),
        ask=lambda key, state: (mirrored_if(mirrored, cem_sample(state, key, population_size), state.mean), state),
        tell=lambda key, state, population, fitness: cem_update(state, population, fitness, num_elites, tau_eps,
                                                                eps_end, var_scale),
        mean=lambda state: state.mean,
        metrics=lambda state: {"cem_std": jnp.mean(jnp.sqrt(state.var)), "cem_eps": state.eps},
        recentre=move_mean,
    )


# --------------------------------------------------------------------------------------
# Canonical ES
# --------------------------------------------------------------------------------------
@struct.dataclass
class VanillaESState:
    mean: jax.Array  # [D] the search distribution's mean; its std is the fixed sigma


def vanilla_es(population_size: int, num_elites: int, sigma: float, mirrored: bool = False) -> AskTell:
    r"""Canonical ES (Chrabaszcz et al., 2018; EvoRL's ``VanillaES``) as an :class:`AskTell`:
    ``ask`` samples :math:`x_i = m + \sigma n_i`, :math:`n_i \sim \mathcal N(0, I)` (mirrored
    pairs with ``mirrored``), ``tell`` is :func:`~evorl.rl.evolution.vanilla_es_update`, the
    elites' log-rank-weighted mean (no randomness; members told need not be the ones asked)."""

    def ask(key, state):
        noise = jax.random.normal(key, (population_size,) + state.mean.shape)  # [N, D]
        return mirrored_if(mirrored, state.mean + sigma * noise, state.mean), state

    return AskTell(
        name="vanilla_es", population_size=population_size,
        init=lambda key, mean, population=None: VanillaESState(mean=jnp.asarray(mean, jnp.float32)),
        ask=ask,
        tell=lambda key, state, population, fitness: VanillaESState(
            mean=vanilla_es_update(state.mean, population, fitness, num_elites)),
        mean=lambda state: state.mean,
        metrics=lambda state: {"sigma": jnp.asarray(sigma, jnp.float32)},
        recentre=move_mean,
    )


# --------------------------------------------------------------------------------------
# The genetic algorithm
# --------------------------------------------------------------------------------------
@struct.dataclass
class GAState:
    population: jax.Array  # [N, D] the members the next generation plays
    parents: jax.Array  # [N] int32, the member of the previous population each descends from


def genetic(population_size: int, segments: np.ndarray, cfg: Any) -> AskTell:
    """ERL's genetic algorithm (:func:`ga_step`) as an :class:`AskTell` that keeps its
    population: ``init`` takes the initial population (fresh network initialisations), ``ask``
    returns the kept members, ``tell`` makes the next ones. ``cfg`` has the operators' keys
    (``num_elites``, ``tournament_size``, ``crossover_prob``, ``mutation_*``, ...)."""

    def init(key, mean, population=None):
        if population is None:
            raise ValueError("the genetic algorithm starts from a population [N, D] of initialised actors")
        return GAState(population=population, parents=jnp.arange(population_size, dtype=jnp.int32))

    def tell(key, state, population, fitness):
        population, parents = ga_step(key, population, fitness, segments, cfg)
        return GAState(population=population, parents=parents.astype(jnp.int32))

    return AskTell(
        name="ga", population_size=population_size, init=init, ask=lambda key, state: (state.population, state),
        tell=tell, mean=lambda state: state.population[0], metrics=lambda state: {}, keeps_population=True,
        inject=lambda state, index, x: state.replace(population=state.population.at[index].set(x)),
        parents=lambda state: state.parents,
    )


# --------------------------------------------------------------------------------------
# evosax strategies
# --------------------------------------------------------------------------------------
def evosax_strategy(name: str, strategy: Any, params: Any, mirrored: bool, learning_rate_in_state: bool = False,
                    fixed_std: bool = False) -> AskTell:
    """An evosax (>= 0.3) ``strategy`` with its ``params`` as an :class:`AskTell`: ``ask`` its
    samples (mirrored through the mean with ``mirrored``), ``tell`` the cost ``-fitness``
    (evosax minimises; a non-finite fitness is a cost of ``+inf``, :func:`~evorl.rl.evolution.ranked`).

    ``learning_rate_in_state``: the strategy's optimiser was built with
    ``optax.inject_hyperparams``, so its learning rate is a leaf of ``state.opt_state``
    (state hyperparameter ``learning_rate``). ``fixed_std``: the search distribution's std
    ``state.std`` stays what it is (OpenES's and ARS's constant schedule, read from the state
    instead: state hyperparameter ``sigma``)."""

    def ask(key, state):
        population, new_state = strategy.ask(key, state, params)
        return mirrored_if(mirrored, population, state.mean), new_state

    def tell(key, state, population, fitness):
        told = strategy.tell(key, population, -ranked(fitness), state, params)[0]
        return told.replace(std=state.std) if fixed_std else told

    hyperparameters = {}
    if learning_rate_in_state:
        hyperparameters["learning_rate"] = StateHyperparameter(
            get=lambda state: state.opt_state.hyperparams["learning_rate"],
            set=lambda state, value: state.replace(opt_state=state.opt_state._replace(hyperparams={
                **state.opt_state.hyperparams, "learning_rate": jnp.asarray(value, jnp.float32)})))
    if fixed_std:
        hyperparameters["sigma"] = StateHyperparameter(
            get=lambda state: state.std, set=lambda state, value: state.replace(std=jnp.asarray(value, jnp.float32)))
    return AskTell(
        name=name, population_size=strategy.population_size,
        init=lambda key, mean, population=None: strategy.init(key, mean, params), ask=ask, tell=tell,
        mean=lambda state: state.mean, metrics=lambda state: {"sigma": jnp.mean(state.std)}, recentre=move_mean,
        hyperparameters=hyperparameters,
    )


__all__ = [
    "AskTell", "CEMState", "GAState", "StateHyperparameter", "VanillaESState", "cem", "cem_init", "cem_sample",
    "cem_update", "crossover", "elites", "evosax_strategy", "ga_step", "genetic", "log_rank_weights", "mirror", "mirrored_if", "move_mean",
    "mutate", "neuron_segments", "ranked", "ranking", "tournament_select", "vanilla_es", "vanilla_es_update",
    "with_hyperparameters",
]

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
* :func:`genetic` -- ERL's genetic algorithm (Khadka & Tumer, 2018): elites, tournaments,
  neuron-wise crossover, mutation; it keeps its population between generations;
* :func:`evosax_strategy` -- any evosax strategy (OpenES, SNES, CMA-ES, ARS), which minimises,
  told ``-fitness``.

An optimiser declares what it can do (``keeps_population``) rather than being probed for it.
Fitness is ranked by one rule (:func:`ranked`): a non-finite fitness (NaN, +inf or -inf, a
diverged agent) ranks last.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax import lax


# --------------------------------------------------------------------------------------
# Ranking
# --------------------------------------------------------------------------------------
def ranked(fitness: jax.Array) -> jax.Array:
    """``fitness [N]`` for ranking, higher is better: every non-finite value (NaN, +inf,
    -inf: a diverged member) becomes ``-inf``, below every finite value; ties keep the lower
    index first (``lax.top_k``, a stable sort)."""
    return jnp.where(jnp.isfinite(fitness), fitness, -jnp.inf)


def ranking(fitness: jax.Array) -> jax.Array:
    """Indices ``[N]`` from worst to best by :func:`ranked` (ties: the lower index ranks lower)."""
    return jnp.argsort(ranked(fitness), stable=True)


# --------------------------------------------------------------------------------------
# The interface
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AskTell:
    """A population optimiser as a record of pure functions (module docstring).

    ``keeps_population``: ``ask`` returns the members the last ``tell`` kept (a genetic
    algorithm: elites survive, an actor put in by ``inject(state, index, x [D])`` stays until
    selection drops it, ``parents(state) [N]`` says which member each descends from). False:
    ``ask`` samples new members around ``mean`` every generation, and an outside actor joins
    a generation by replacing a sampled member before ``tell``."""

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


# --------------------------------------------------------------------------------------
# sep-CEM
# --------------------------------------------------------------------------------------
@struct.dataclass
class CEMState:
    mean: jax.Array  # [D] the distribution's mean
    var: jax.Array  # [D] its diagonal covariance
    eps: jax.Array  # [] the additive noise the next update adds to var


def log_rank_weights(num_elites: int) -> jax.Array:
    r""":math:`\lambda_j \propto \log(1 + K_e) - \log j`, ``j = 1..K_e``, summing to 1: ``[K_e]``."""
    w = jnp.log(1.0 + num_elites) - jnp.log(jnp.arange(1, num_elites + 1, dtype=jnp.float32))
    return w / jnp.sum(w)


def cem_init(mean: jax.Array, sigma_init: float, eps_init: float) -> CEMState:
    return CEMState(mean=jnp.asarray(mean, jnp.float32), var=jnp.full(jnp.shape(mean), sigma_init, jnp.float32),
                    eps=jnp.asarray(eps_init, jnp.float32))


def cem_sample(cem: CEMState, key: jax.Array, num: int) -> jax.Array:
    r""":math:`x_i = \mu + \sqrt v \odot n_i`, :math:`n_i \sim \mathcal N(0, I)`: ``[num, D]``."""
    return cem.mean + jnp.sqrt(cem.var) * jax.random.normal(key, (num,) + cem.mean.shape)


def cem_update(cem: CEMState, population: jax.Array, fitness: jax.Array, num_elites: int, tau_eps: float,
               eps_end: float) -> CEMState:
    r"""The sep-CEM update from ``population [N, D]`` and ``fitness [N]`` (higher is better,
    :func:`ranked`): with the ``K_e`` elites :math:`z_j`, best first, and :func:`log_rank_weights`
    :math:`\lambda_j`,

    .. math::
        \mu' = \sum_j \lambda_j z_j, \qquad
        v' = \sum_j \lambda_j (z_j - \mu)^2 + \epsilon_t, \qquad
        \epsilon_{t+1} = \tau_\epsilon \epsilon_t + (1 - \tau_\epsilon) \epsilon_{end}

    (the squares around the *old* mean, the paper's eq. 2 on the diagonal)."""
    elites = population[lax.top_k(ranked(fitness), num_elites)[1]]  # [K_e, D], best first
    weights = log_rank_weights(num_elites)  # [K_e]
    mean = weights @ elites  # [D]
    var = weights @ jnp.square(elites - cem.mean) + cem.eps  # [D]
    eps = tau_eps * cem.eps + (1.0 - tau_eps) * eps_end
    return CEMState(mean=mean, var=var, eps=eps)


def cem(population_size: int, num_elites: int, sigma_init: float, eps_init: float, eps_end: float,
        tau_eps: float) -> AskTell:
    """sep-CEM as an :class:`AskTell`: ``ask`` is :func:`cem_sample`, ``tell`` :func:`cem_update`
    (no randomness), the initial variance ``sigma_init`` in every coordinate."""
    return AskTell(
        name="cem", population_size=population_size,
        init=lambda key, mean, population=None: cem_init(mean, sigma_init, eps_init),
        ask=lambda key, state: (cem_sample(state, key, population_size), state),
        tell=lambda key, state, population, fitness: cem_update(state, population, fitness, num_elites, tau_eps,
                                                                eps_end),
        mean=lambda state: state.mean,
        metrics=lambda state: {"cem_std": jnp.mean(jnp.sqrt(state.var)), "cem_eps": state.eps},
    )


# --------------------------------------------------------------------------------------
# The genetic algorithm
# --------------------------------------------------------------------------------------
def neuron_segments(actor_params: Any) -> np.ndarray:
    """``[D]`` int: for each coordinate of ``ravel_pytree(actor_params)``, its neuron: leaves of
    one module (a kernel ``[in, out]`` and its bias ``[out]``) share the ids of their last axis,
    so a neuron is a column of incoming weights with its bias."""
    leaves = jax.tree_util.tree_flatten_with_path(actor_params)[0]  # ravel_pytree's order
    last = [int(leaf.shape[-1]) if leaf.shape else 1 for _, leaf in leaves]  # works on shapes too
    width = 1 + max(last)
    modules: dict[tuple, int] = {}
    ids = []
    for (path, leaf), columns in zip(leaves, last):
        module = modules.setdefault(tuple(path[:-1]), len(modules))
        column = np.arange(int(np.prod(leaf.shape))) % columns  # row-major: the last axis runs fastest
        ids.append(module * width + column)
    _, dense = np.unique(np.concatenate(ids), return_inverse=True)
    return dense.astype(np.int32)


def tournament_select(key: jax.Array, fitness: jax.Array, num: int, size: int) -> jax.Array:
    """``[num]`` indices: each the fittest of ``size`` indices drawn uniformly with replacement
    (the first drawn among equals)."""
    drawn = jax.random.randint(key, (num, size), 0, fitness.shape[0])  # [num, size]
    return drawn[jnp.arange(num), jnp.argmax(ranked(fitness)[drawn], axis=1)]


def crossover(key: jax.Array, a: jax.Array, b: jax.Array, segments: np.ndarray) -> tuple[jax.Array, jax.Array]:
    """Two children of ``a, b [D]``: each neuron (``segments [D]``, a NumPy array) from ``a`` or
    ``b`` with probability 1/2, the second child taking the other parent's."""
    take_a = jax.random.bernoulli(key, 0.5, (int(np.max(segments)) + 1,))[segments]  # [D]
    return jnp.where(take_a, a, b), jnp.where(take_a, b, a)


def mutate(key: jax.Array, x: jax.Array, cfg: Any) -> jax.Array:
    r"""ERL's mutation of one actor ``x [D]``: a fraction ``mutation_frac`` of its weights
    :math:`w` is perturbed, :math:`w \leftarrow w + \mathcal N(0, (s\,|w|)^2)` with ``s =
    mutation_strength``, or ``super_mutation_strength`` with probability ``super_mutation_prob``,
    or reset to :math:`\mathcal N(0, 1)` with probability ``reset_prob``; then clipped to
    :math:`\pm` ``weight_clip``."""
    chosen_key, kind_key, noise_key, reset_key = jax.random.split(key, 4)
    chosen = jax.random.uniform(chosen_key, x.shape) < cfg.mutation_frac  # [D]
    u = jax.random.uniform(kind_key, x.shape)
    strength = jnp.where(u < cfg.super_mutation_prob, cfg.super_mutation_strength, cfg.mutation_strength)
    reset = (u >= cfg.super_mutation_prob) & (u < cfg.super_mutation_prob + cfg.reset_prob)
    perturbed = x + strength * jnp.abs(x) * jax.random.normal(noise_key, x.shape)
    new = jnp.where(reset, jax.random.normal(reset_key, x.shape), perturbed)
    return jnp.where(chosen, jnp.clip(new, -cfg.weight_clip, cfg.weight_clip), x)


def ga_step(key: jax.Array, population: jax.Array, fitness: jax.Array, segments: np.ndarray, cfg: Any):
    """The next population ``[N, D]`` and each row's first parent ``[N]`` (an elite is its own
    parent): the ``num_elites`` fittest kept, best first; ``N - E`` children of tournament
    winners, consecutive pairs crossed with ``crossover_prob`` (:func:`crossover`), each child
    mutated with ``mutation_prob`` (:func:`mutate`)."""
    num, elites = population.shape[0], cfg.num_elites
    children = num - elites
    select_key, cross_key, pair_key, mutate_key, mutation_key = jax.random.split(key, 5)
    elite_ids = lax.top_k(ranked(fitness), elites)[1]  # [E], best first
    parents = tournament_select(select_key, fitness, children, cfg.tournament_size)  # [C]
    offspring = population[parents]  # [C, D]
    pairs = children // 2
    if pairs:
        a, b = offspring[0:2 * pairs:2], offspring[1:2 * pairs:2]  # [P, D] each
        child_a, child_b = jax.vmap(lambda k, x, y: crossover(k, x, y, segments))(
            jax.random.split(cross_key, pairs), a, b)
        crossing = jax.random.uniform(pair_key, (pairs, 1)) < cfg.crossover_prob  # [P, 1]
        crossed = jnp.stack([jnp.where(crossing, child_a, a), jnp.where(crossing, child_b, b)], 1)  # [P, 2, D]
        offspring = offspring.at[:2 * pairs].set(crossed.reshape((2 * pairs, -1)))
    mutated = jax.vmap(mutate, in_axes=(0, 0, None))(jax.random.split(mutate_key, children), offspring, cfg)
    mutating = jax.random.uniform(mutation_key, (children, 1)) < cfg.mutation_prob  # [C, 1]
    offspring = jnp.where(mutating, mutated, offspring)
    return jnp.concatenate([population[elite_ids], offspring]), jnp.concatenate([elite_ids, parents])


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
def mirror(population: jax.Array, mean: jax.Array) -> jax.Array:
    """Mirrored (antithetic) sampling: ``[x_1..x_{P/2}, 2m - x_1, .., 2m - x_{P/2}]`` from the
    first half of ``population [P, D]``: member ``i + P/2`` is ``m - sigma eps_i``."""
    half = population[: population.shape[0] // 2]
    return jnp.concatenate([half, 2.0 * mean - half])


def evosax_strategy(name: str, strategy: Any, params: Any, mirrored: bool) -> AskTell:
    """An evosax (>= 0.3) ``strategy`` with its ``params`` as an :class:`AskTell`: ``ask`` its
    samples (mirrored through the mean with ``mirrored``), ``tell`` the cost ``-fitness``
    (evosax minimises; a non-finite fitness is a cost of ``+inf``, :func:`ranked`)."""

    def ask(key, state):
        population, new_state = strategy.ask(key, state, params)
        return (mirror(population, state.mean) if mirrored else population), new_state

    def tell(key, state, population, fitness):
        return strategy.tell(key, population, -ranked(fitness), state, params)[0]

    return AskTell(
        name=name, population_size=strategy.population_size,
        init=lambda key, mean, population=None: strategy.init(key, mean, params), ask=ask, tell=tell,
        mean=lambda state: state.mean, metrics=lambda state: {"sigma": jnp.mean(state.std)},
    )


__all__ = [
    "AskTell", "CEMState", "GAState", "cem", "cem_init", "cem_sample", "cem_update", "crossover", "evosax_strategy",
    "ga_step", "genetic", "log_rank_weights", "mirror", "mutate", "neuron_segments", "ranked", "ranking",
    "tournament_select",
]

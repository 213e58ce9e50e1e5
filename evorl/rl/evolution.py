r"""Evolution operators on arrays: pure functions over a population's flat members ``[N, D]``
and fitness ``[N]``, each also importable from the algorithm that uses it. The optimisers
built from them, behind one ask/tell interface, are :mod:`evorl.rl.optimisers`.

* the one ranking rule (:func:`ranked`, :func:`ranking`): a non-finite fitness (NaN, +inf,
  -inf: a diverged member) ranks last;
* evolution strategies (:mod:`evorl.algorithms.es`): fitness shaping (:func:`centered_rank`)
  and mirrored sampling (:func:`mirror`);
* sep-CEM (:mod:`evorl.algorithms.cemrl`, the update's equations in :func:`cem_update`):
  :class:`CEMState`, :func:`cem_init`, :func:`cem_sample`, :func:`cem_update`; the elites
  (:func:`elites`) and their log-rank weights (:func:`log_rank_weights`), shared with canonical
  ES (:func:`vanilla_es_update`);
* the genetic operators of ERL (:mod:`evorl.algorithms.erl`): :func:`tournament_select`,
  :func:`crossover` by neurons (:func:`neuron_segments`, :func:`cross_pairs`), :func:`mutate`,
  :func:`ga_step`; NSGA-II's are in :mod:`evorl.rl.multi_objective`;
* PBT's exploit/explore steps: truncation selection (:func:`exploit_explore`, its random
  numbers drawn by :func:`draw`) and the competitive swarm (:func:`cso_step`, drawn by
  :func:`cso_draw`); a diverged agent that a step leaves in place copies a good one
  instead (:func:`replace_diverged`) and explores from its hyperparameters (:func:`explore`);
  the step on the training state and its schedule are
  :mod:`evorl.engine.pbt`, the equations in its docstring and :func:`cso_step`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax import lax


# --- ranking ---------------------------------------------------------------------------
def ranked(fitness: jax.Array) -> jax.Array:
    """``fitness [N]`` for ranking, higher is better: every non-finite value (NaN, +inf,
    -inf: a diverged member) becomes ``-inf``, below every finite value; ties keep the lower
    index first (``lax.top_k``, a stable sort). The one ranking rule of sep-CEM, the GA,
    ERL, ES's :func:`centered_rank` and PBT's :func:`ranking`."""
    return jnp.where(jnp.isfinite(fitness), fitness, -jnp.inf)


def ranking(fitness: jax.Array) -> jax.Array:
    """Indices ``[N]`` from worst to best by :func:`ranked` (ties: the lower index ranks lower)."""
    return jnp.argsort(ranked(fitness), stable=True)


# --- evolution strategies --------------------------------------------------------------
def centered_rank(fitness: jax.Array) -> jax.Array:
    r"""Centred ranks of the costs ``fitness [P]`` (lower is better: the strategies minimise
    ``-R``) in ``[-0.5, 0.5]``: ``rank_i / (P - 1) - 0.5`` with
    ``rank_i = #\{j: f_j < f_i\} + (#\{j: f_j = f_i\} - 1) / 2`` (0 for the smallest; tied
    values share the mean of their ranks, so the shaped values still sum to 0).

    A non-finite cost (NaN, or +-inf: a member whose return diverged) ranks as the worst,
    ``+inf`` (:func:`ranked`'s rule, on the return ``-cost``); all of them tie above every
    finite cost."""
    fitness = -ranked(-fitness)
    f = fitness[:, None], fitness[None, :]
    below = jnp.sum(f[1] < f[0], axis=1)
    ties = jnp.sum(f[1] == f[0], axis=1)
    ranks = below + (ties - 1) / 2.0
    return (ranks / (fitness.shape[0] - 1) - 0.5).astype(jnp.float32)


def mirror(population: jax.Array, mean: jax.Array) -> jax.Array:
    """Mirrored (antithetic) sampling: ``[x_1..x_{P/2}, 2m - x_1, .., 2m - x_{P/2}]`` from the
    first half of ``population [P, D]``: member ``i + P/2`` is ``m - sigma eps_i``."""
    half = population[: population.shape[0] // 2]
    return jnp.concatenate([half, 2.0 * mean - half])


# --- sep-CEM ---------------------------------------------------------------------------
@struct.dataclass
class CEMState:
    mean: jax.Array  # [D] the distribution's mean
    var: jax.Array  # [D] its diagonal covariance
    eps: jax.Array  # [] the additive noise the next update adds to var


def log_rank_weights(num_elites: int, shift: float = 1.0) -> jax.Array:
    r""":math:`\lambda_j \propto \log(K_e + s) - \log j`, ``j = 1..K_e``, summing to 1: ``[K_e]``;
    :math:`s` = ``shift`` is 1 in sep-CEM (CEM-RL), 1/2 in canonical ES and CMA-ES."""
    w = jnp.log(num_elites + shift) - jnp.log(jnp.arange(1, num_elites + 1, dtype=jnp.float32))
    return w / jnp.sum(w)


def elites(population: jax.Array, fitness: jax.Array, num_elites: int) -> jax.Array:
    """The ``num_elites`` fittest rows of ``population [N, D]`` by :func:`ranked`, best first: ``[K_e, D]``."""
    return population[lax.top_k(ranked(fitness), num_elites)[1]]


def cem_init(mean: jax.Array, sigma_init: float, eps_init: float) -> CEMState:
    return CEMState(mean=jnp.asarray(mean, jnp.float32), var=jnp.full(jnp.shape(mean), sigma_init, jnp.float32),
                    eps=jnp.asarray(eps_init, jnp.float32))


def cem_sample(cem: CEMState, key: jax.Array, num: int) -> jax.Array:
    r""":math:`x_i = \mu + \sqrt v \odot n_i`, :math:`n_i \sim \mathcal N(0, I)`: ``[num, D]``."""
    return cem.mean + jnp.sqrt(cem.var) * jax.random.normal(key, (num,) + cem.mean.shape)


def cem_update(cem: CEMState, population: jax.Array, fitness: jax.Array, num_elites: int, tau_eps: float,
               eps_end: float, var_scale: float) -> CEMState:
    r"""The sep-CEM update from ``population [N, D]`` and ``fitness [N]`` (higher is better,
    :func:`ranked`): with the ``K_e`` elites :math:`z_j`, best first, :func:`log_rank_weights`
    :math:`\lambda_j` and :math:`c` = ``var_scale``,

    .. math::
        \mu' = \sum_j \lambda_j z_j, \qquad
        v' = c \sum_j \lambda_j (z_j - \mu)^2 + \epsilon_t, \qquad
        \epsilon_{t+1} = \tau_\epsilon \epsilon_t + (1 - \tau_\epsilon) \epsilon_{end}

    (the squares around the *old* mean, the paper's eq. 2 on the diagonal with :math:`c = 1`;
    :mod:`evorl.algorithms.cemrl` defaults to the authors' :math:`c = 1 / K_e`)."""
    best = elites(population, fitness, num_elites)  # [K_e, D], best first
    weights = log_rank_weights(num_elites)  # [K_e]
    mean = weights @ best  # [D]
    var = var_scale * (weights @ jnp.square(best - cem.mean)) + cem.eps  # [D]
    eps = tau_eps * cem.eps + (1.0 - tau_eps) * eps_end
    return CEMState(mean=mean, var=var, eps=eps)


# --- canonical ES ----------------------------------------------------------------------
def vanilla_es_update(mean: jax.Array, population: jax.Array, fitness: jax.Array, num_elites: int) -> jax.Array:
    r"""Canonical ES's new mean (Chrabaszcz et al., 2018) from ``population [N, D]`` and ``fitness
    [N]`` (higher is better, :func:`ranked`): with the ``K_e`` elites :math:`z_j`, best first,

    .. math::
        m' = m + \sum_j \lambda_j (z_j - m) = \sum_j \lambda_j z_j, \qquad
        \lambda_j \propto \log(K_e + 1/2) - \log j

    (:func:`log_rank_weights` with shift 1/2; the weights sum to 1). The step size is the
    sampling's fixed :math:`\sigma`, so no learning rate and no optimiser state."""
    weights = log_rank_weights(num_elites, 0.5)  # [K_e]
    return mean + weights @ (elites(population, fitness, num_elites) - mean)  # [D]


# --- the genetic operators (ERL) ------------------------------------------------------
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


def cross_pairs(cross_key: jax.Array, pair_key: jax.Array, members: jax.Array, crossover_prob: float,
                segments: np.ndarray) -> jax.Array:
    """``members [C, D]`` with each consecutive pair (0-1, 2-3, ...) replaced, with probability
    ``crossover_prob``, by its two children of :func:`crossover` (an odd last one is kept)."""
    pairs = members.shape[0] // 2
    if not pairs:
        return members
    a, b = members[0:2 * pairs:2], members[1:2 * pairs:2]  # [P, D] each
    child_a, child_b = jax.vmap(lambda k, x, y: crossover(k, x, y, segments))(
        jax.random.split(cross_key, pairs), a, b)
    crossing = jax.random.uniform(pair_key, (pairs, 1)) < crossover_prob  # [P, 1]
    crossed = jnp.stack([jnp.where(crossing, child_a, a), jnp.where(crossing, child_b, b)], 1)  # [P, 2, D]
    return members.at[:2 * pairs].set(crossed.reshape((2 * pairs, -1)))


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
    offspring = cross_pairs(cross_key, pair_key, offspring, cfg.crossover_prob, segments)
    mutated = jax.vmap(mutate, in_axes=(0, 0, None))(jax.random.split(mutate_key, children), offspring, cfg)
    mutating = jax.random.uniform(mutation_key, (children, 1)) < cfg.mutation_prob  # [C, 1]
    offspring = jnp.where(mutating, mutated, offspring)
    return jnp.concatenate([population[elite_ids], offspring]), jnp.concatenate([elite_ids, parents])


# --- PBT's exploit/explore -------------------------------------------------------------
@dataclass(frozen=True)
class Evolving:
    """One evolving hyperparameter: its config key, where the state holds it (a field of
    ``AgentState.hparams``, or None for the base learning rate), bounds and scale."""

    key: str
    field: str | None
    low: float
    high: float
    log_scale: bool


@struct.dataclass
class Draws:
    """The random numbers of one exploit/explore step, per agent (``[N]``) and per agent and
    hyperparameter (``[N, H]``)."""

    winner: jax.Array  # [N] uniform in [0, 1): which of the k best a replaced agent copies
    resample: jax.Array  # [N, H] uniform: resample when < resample_probability
    factor: jax.Array  # [N, H] int32 index into perturb_factors
    value: jax.Array  # [N, H] uniform: the resampled value's position in its range


def draw(key: jax.Array, num_agents: int, num_hparams: int, num_factors: int) -> Draws:
    k_winner, k_resample, k_factor, k_value = jax.random.split(key, 4)
    shape = (num_agents, num_hparams)
    return Draws(jax.random.uniform(k_winner, (num_agents,)), jax.random.uniform(k_resample, shape),
                 jax.random.randint(k_factor, shape, 0, num_factors), jax.random.uniform(k_value, shape))


def exploit_explore(fitness: jax.Array, values: jax.Array, draws: Draws, num_replaced: int,
                    evolving: tuple[Evolving, ...], perturb_factors: tuple[float, ...],
                    resample_probability: float) -> tuple[jax.Array, jax.Array]:
    """One PBT step (see the module docstring) on ``fitness [N]`` and the evolving
    hyperparameters ``values [N, H]`` (in the order of ``evolving``).

    Returns ``source [N]`` (the agent each agent now copies: itself unless replaced) and the
    new ``values [N, H]``."""
    num_agents = fitness.shape[0]
    order = ranking(fitness)
    losers, winners = order[:num_replaced], order[num_agents - num_replaced:]  # [k], [k]
    pick = jnp.minimum((draws.winner[losers] * num_replaced).astype(jnp.int32), num_replaced - 1)
    source = jnp.arange(num_agents).at[losers].set(winners[pick])  # [N]
    replaced = (source != jnp.arange(num_agents))[:, None]  # [N, 1]
    if not evolving:
        return source, values
    return source, jnp.where(replaced, explore(values, source, draws, evolving, perturb_factors,
                                               resample_probability), values)


def explore(values: jax.Array, source: jax.Array, draws: Draws, evolving: tuple[Evolving, ...],
            perturb_factors: tuple[float, ...], resample_probability: float) -> jax.Array:
    """PBT's explore: each agent's copy of ``values[source] [N, H]`` perturbed by a drawn factor
    of ``perturb_factors``, or resampled (log-uniformly for a learning rate) with probability
    ``resample_probability``, then clipped to the bounds (the module docstring of
    :mod:`evorl.engine.pbt` has the rule)."""
    if not evolving:
        return values[source]
    low = jnp.asarray([e.low for e in evolving], jnp.float32)  # [H]
    high = jnp.asarray([e.high for e in evolving], jnp.float32)
    log_scale = jnp.asarray([e.log_scale for e in evolving])
    inherited = values[source]  # [N, H]
    perturbed = inherited * jnp.asarray(perturb_factors, jnp.float32)[draws.factor]
    log_low, log_high = jnp.log(jnp.where(log_scale, low, 1.0)), jnp.log(jnp.where(log_scale, high, 1.0))
    resampled = jnp.where(log_scale, jnp.exp(log_low + draws.value * (log_high - log_low)),
                          low + draws.value * (high - low))
    return jnp.clip(jnp.where(draws.resample < resample_probability, resampled, perturbed), low, high)


def replace_diverged(source: jax.Array, alive: jax.Array, fitness: jax.Array, winner: jax.Array,
                     num_donors: int) -> tuple[jax.Array, jax.Array]:
    """``source [N]`` of a PBT step (whom each agent copies) with every agent whose source has
    diverged (``alive [N]`` false: a frozen agent that the strategy left in place, or that copied
    another frozen one) copying instead one of the ``num_donors`` best agents that are alive, by
    :func:`ranked` ``fitness [N]`` (``winner [N]``, uniform in [0, 1), picks which). Returns the
    new ``source`` and which agents were so replaced ``[N]``. With no agent alive nothing changes."""
    num_agents = alive.shape[0]
    order = jnp.lexsort((ranked(fitness), alive))  # [N] worst to best, the diverged first
    donors = jnp.clip(jnp.minimum(num_donors, jnp.sum(alive)), 1, num_agents)
    pick = jnp.minimum((winner * donors).astype(jnp.int32), donors - 1)
    stranded = ~alive[source] & jnp.any(alive)
    return jnp.where(stranded, order[num_agents - 1 - pick], source), stranded




# --- PBT's competitive swarm (CSO) ---------------------------------------------------
@struct.dataclass
class CSODraws:
    """The random numbers of one competitive swarm step over ``N`` members of ``D`` coordinates."""

    pairing: jax.Array  # [N] int32, a permutation: pair j is (pairing[j], pairing[j + N // 2])
    r1: jax.Array  # [N // 2, D] uniform in [0, 1): the weight of a loser's velocity
    r2: jax.Array  # [N // 2, D] uniform: of the pull towards its winner
    r3: jax.Array  # [N // 2, D] uniform: of the pull towards the population's mean


def cso_draw(key: jax.Array, num_members: int, num_coordinates: int) -> CSODraws:
    pairing_key, k1, k2, k3 = jax.random.split(key, 4)
    shape = (num_members // 2, num_coordinates)
    return CSODraws(jax.random.permutation(pairing_key, num_members).astype(jnp.int32),
                    jax.random.uniform(k1, shape), jax.random.uniform(k2, shape), jax.random.uniform(k3, shape))


def cso_step(fitness: jax.Array, x: jax.Array, velocity: jax.Array, draws: CSODraws, low: jax.Array,
             high: jax.Array, phi: float) -> tuple[jax.Array, jax.Array, jax.Array]:
    r"""One step of the competitive swarm optimiser (Cheng & Jin, 2015) on the members
    ``x [N, D]`` with their velocities ``velocity [N, D]`` and ``fitness [N]`` (higher is
    better). The members are drawn into ``N // 2`` random pairs (``draws.pairing``); in each
    pair the one :func:`ranking` ranks higher (non-finite fitness last; on a tie the higher
    index) is the winner :math:`w`, and only the loser :math:`l` moves:

    .. math::
        v_l' = r_1 v_l + r_2 (x_w - x_l) + \varphi\, r_3 (\bar x - x_l), \qquad
        x_l' = \mathrm{clip}(x_l + v_l',\; lo,\; hi)

    with :math:`r_1, r_2, r_3 \sim U[0, 1)^D` per loser, :math:`\bar x` the mean of all ``N``
    members and :math:`\varphi` = ``phi``; the velocity is kept unclipped. Winners keep their
    ``x`` and velocity. With ``N`` odd the last member of the permutation sits this step out
    (unchanged, its own source).

    Returns ``source [N]`` (each loser's winner, every other member itself: PBT copies the
    winner's weights into the loser), the new ``x [N, D]`` and the new ``velocity [N, D]``."""
    num_members, half = x.shape[0], x.shape[0] // 2
    position = jnp.argsort(ranking(fitness))  # [N] each member's rank, 0 the worst
    first, second = draws.pairing[:half], draws.pairing[half:2 * half]  # [N // 2] each
    first_wins = position[first] > position[second]
    winners, losers = jnp.where(first_wins, first, second), jnp.where(first_wins, second, first)
    mean = jnp.mean(x, axis=0)  # [D]
    x_l = x[losers]  # [N // 2, D]
    v_l = draws.r1 * velocity[losers] + draws.r2 * (x[winners] - x_l) + phi * draws.r3 * (mean - x_l)
    source = jnp.arange(num_members).at[losers].set(winners)
    return (source, x.at[losers].set(jnp.clip(x_l + v_l, low, high)), velocity.at[losers].set(v_l))

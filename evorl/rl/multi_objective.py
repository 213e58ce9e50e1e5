r"""NSGA-II's operators on arrays (Deb et al. 2002, "A fast and elitist multiobjective genetic
algorithm: NSGA-II"): pure, fixed-shape functions over a population's objective vectors
``F [N, K]``, every objective **maximised** (returns).

* :func:`sanitize`: a row with a non-finite entry (a diverged policy) becomes ``-inf``
  everywhere, so every finite row dominates it and it is never on the front;
* :func:`dominates`: ``D[i, j] = F_i >= F_j`` in every objective and ``>`` in one;
* :func:`non_dominated_ranks`: the fronts peeled one after another (rank 0 is the
  non-dominated set, rank 1 the non-dominated set of the rest, ...);
* :func:`crowding_distance`: within each front, for each objective, the members sorted by it;
  the two ends get ``inf``, the others ``(f_{next} - f_{prev}) / (f_{max} - f_{min})`` summed
  over objectives (0 where a front's span is 0);
* :func:`binary_tournament`: of two members drawn uniformly, the lower rank, then the larger
  crowding distance (the first drawn among equals);
* :func:`gaussian_offspring`: ``x' = x + sigma eps``, optionally after ERL's neuron-wise
  crossover (:func:`~evorl.rl.evolution.cross_pairs`) of consecutive pairs;
* :func:`environmental_selection`: the ``N`` of parents + offspring ``[2N]`` first by
  (rank, then crowding distance descending);
* :func:`hypervolume_2d`: the area the points dominate above a reference point, exactly.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from evorl.rl.evolution import cross_pairs


def sanitize(objectives: jax.Array) -> jax.Array:
    """``objectives [N, K]`` with every row holding a NaN or +-inf set to ``-inf``."""
    finite = jnp.all(jnp.isfinite(objectives), axis=1, keepdims=True)  # [N, 1]
    return jnp.where(finite, objectives, -jnp.inf)


def dominates(objectives: jax.Array) -> jax.Array:
    """``[N, N]`` bool, ``D[i, j]``: member ``i`` dominates member ``j`` (maximising)."""
    a, b = objectives[:, None, :], objectives[None, :, :]  # [N, 1, K], [1, N, K]
    return jnp.all(a >= b, axis=2) & jnp.any(a > b, axis=2)


class RankingStuck(RuntimeError):
    """:func:`non_dominated_ranks` left members unranked after ``N`` rounds: the dominance
    relation it was given has a cycle (a bug in it, not in the data)."""


def _raise_if_stuck(unranked) -> None:
    """Raises :class:`RankingStuck` if any member was left unranked (``unranked``: how many, of
    each ranking under ``vmap``)."""
    if np.any(np.asarray(unranked) > 0):
        raise RankingStuck(f"non_dominated_ranks: {int(np.max(unranked))} members still unranked after as many rounds "
                           f"as members: the dominance relation has a cycle (every round must rank one at least).")


def non_dominated_ranks(objectives: jax.Array) -> jax.Array:
    """``[N]`` int32 front index of each member of ``objectives [N, K]`` (0: non-dominated).
    Non-finite rows (:func:`sanitize`) rank after every finite one; equal rows share a rank.

    Each round ranks the members no remaining member dominates; under a strict partial order
    (:func:`dominates`) every round ranks one at least, so ``N`` rounds rank all. The loop stops
    there whatever the relation, and raises :class:`RankingStuck` (from inside a compiled
    program too) if any member is left, instead of looping forever."""
    num = objectives.shape[0]
    dom = dominates(sanitize(objectives)).astype(jnp.int32)  # [N, N]

    def body(carry):
        rank, count, ranks, remaining = carry
        front = remaining & (count == 0)  # [N]: dominated by nobody left
        ranks = jnp.where(front, rank, ranks)
        count = count - front.astype(jnp.int32) @ dom
        return rank + 1, count, ranks, remaining & ~front

    init = (jnp.zeros((), jnp.int32), jnp.sum(dom, axis=0), jnp.full((num,), num, jnp.int32), jnp.ones((num,), bool))
    _, _, ranks, remaining = lax.while_loop(lambda c: jnp.any(c[3]) & (c[0] < num), body, init)
    jax.debug.callback(_raise_if_stuck, jnp.sum(remaining))  # a host check (not a branch: vmap makes one a select)
    return ranks


def crowding_distance(objectives: jax.Array, ranks: jax.Array) -> jax.Array:
    """``[N]`` crowding distance of each member within its front (module docstring). Members
    equal in an objective keep index order when sorted by it."""
    num, num_obj = objectives.shape
    objectives = sanitize(objectives)
    index = jnp.arange(num)
    distance = jnp.zeros((num,), jnp.float32)
    for m in range(num_obj):
        f = objectives[:, m]
        order = jnp.lexsort((index, f, ranks))  # by rank, then f_m, then index
        r, fs = ranks[order], f[order]
        first = jnp.concatenate([jnp.ones((1,), bool), r[1:] != r[:-1]])
        last = jnp.concatenate([r[1:] != r[:-1], jnp.ones((1,), bool)])
        span = (jax.ops.segment_max(f, ranks, num) - jax.ops.segment_min(f, ranks, num))[r]  # [N]
        gap = (jnp.roll(fs, -1) - jnp.roll(fs, 1)) / span
        gap = jnp.where(jnp.isfinite(gap) & (span > 0), gap, 0.0)
        distance = distance.at[order].add(jnp.where(first | last, jnp.inf, gap))
    return distance


def crowded_order(ranks: jax.Array, distance: jax.Array) -> jax.Array:
    """``[N]`` indices, best first: by rank, then crowding distance descending, then index."""
    return jnp.lexsort((jnp.arange(ranks.shape[0]), -distance, ranks))


def binary_tournament(key: jax.Array, ranks: jax.Array, distance: jax.Array, num: int) -> jax.Array:
    """``[num]`` parent indices, each the better of two drawn uniformly with replacement."""
    drawn = jax.random.randint(key, (num, 2), 0, ranks.shape[0])  # [num, 2]
    a, b = drawn[:, 0], drawn[:, 1]
    b_better = (ranks[b] < ranks[a]) | ((ranks[b] == ranks[a]) & (distance[b] > distance[a]))
    return jnp.where(b_better, b, a)


def gaussian_offspring(key: jax.Array, parents: jax.Array, sigma: float, crossover_prob: float,
                       segments: np.ndarray | None) -> jax.Array:
    """Children ``[N, D]`` of ``parents [N, D]``: consecutive pairs crossed neuron-wise with
    probability ``crossover_prob`` (``segments [D]``, :func:`~evorl.rl.evolution.neuron_segments`),
    then every coordinate perturbed, ``x + sigma eps``, ``eps ~ N(0, 1)``."""
    cross_key, pair_key, noise_key = jax.random.split(key, 3)
    if crossover_prob > 0:
        if segments is None:
            raise ValueError("gaussian_offspring: crossover_prob > 0 crosses neurons: pass the parameters' segments.")
        parents = cross_pairs(cross_key, pair_key, parents, crossover_prob, segments)
    return parents + sigma * jax.random.normal(noise_key, parents.shape, parents.dtype)


def environmental_selection(objectives: jax.Array, num: int) -> jax.Array:
    """``[num]`` indices of the survivors among ``objectives [M, K]`` (parents + offspring):
    the first ``num`` in :func:`crowded_order`, so whole fronts while they fit, then the
    least crowded of the front that does not."""
    ranks = non_dominated_ranks(objectives)
    return crowded_order(ranks, crowding_distance(objectives, ranks))[:num]


def hypervolume_2d(points: jax.Array, reference: jax.Array) -> jax.Array:
    r"""The area dominated by ``points [N, 2]`` (maximised) and dominating ``reference [2]``:
    :math:`\lambda(\bigcup_i [r_1, p_{i,1}] \times [r_2, p_{i,2}])`. Points are clipped to the
    reference (a point below it, or non-finite, adds nothing), sorted by the first objective
    descending, and each adds the strip its second objective gains over those before it:
    :math:`\sum_i (p_{i,1} - r_1) \max(0, p_{i,2} - \max(r_2, \max_{j<i} p_{j,2}))`."""
    points = jnp.where(jnp.all(jnp.isfinite(points), axis=1, keepdims=True), points, reference)
    points = jnp.maximum(points, reference)
    order = jnp.lexsort((-points[:, 1], -points[:, 0]))
    x, y = points[order, 0], points[order, 1]
    best_before = jnp.concatenate([reference[1:2], lax.cummax(y)[:-1]])
    best_before = jnp.maximum(best_before, reference[1])
    return jnp.sum((x - reference[0]) * jnp.maximum(0.0, y - best_before))

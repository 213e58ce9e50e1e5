"""Gathers written without XLA's gather: what a TPU runs fast.

A TPU runs XLA's ``gather`` one element at a time: in PPO on CartPole with 1024 seeds in one
program, the minibatch shuffles (``x[perm]``) and the log-probability of the action taken
(``logp[a]``) were 78% of the iteration's device time (``benchmarks/tpu_scale.py --profile``).
Sorts and elementwise selections run on the vector units at full width. Both functions here
compute what the gather does: the shuffle moves the same bits (a sort's payload), the pick
returns the same values (see :func:`pick_by_mask` for the one sign of zero it changes).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax


def inverse_permutation(perm: jax.Array) -> jax.Array:
    """``inv`` with ``inv[perm[i]] = i``, by sorting ``(perm, iota)`` on ``perm``."""
    return lax.sort((perm, lax.iota(perm.dtype, perm.shape[0])), num_keys=1)[1]


def permute_by_sort(tree: Any, perm: jax.Array, axis: int = 0, max_columns: int = 64) -> Any:
    """Every leaf of ``tree`` reordered along ``axis`` by the permutation ``perm [n]``:
    ``jnp.take(x, perm, axis)``. With ``inv`` the inverse permutation, sorting the pairs
    ``(inv[j], x[j])`` on ``inv`` puts ``x[j]`` at position ``inv[j]``, i.e. ``x[perm[i]]`` at
    ``i``. The leaves' other axes are split into columns ``[..., n]`` that ride along as the
    sort's payload, all in one sort on ``inv`` (a TPU lays a ``[4, n]`` payload out in padded
    tiles: one ``[n]`` operand per column is what it sorts at full width). A leaf of more than
    ``max_columns`` columns (an image) keeps XLA's gather: each index then moves a whole row of
    contiguous values, not one element, and sorting such a leaf as a ``[columns, n]`` payload
    was the slower of the two on the chip (PPO on MinAtar Asterix, 400 columns of observation:
    211k env steps/s sorting every leaf, 243k gathering every leaf;
    ``benchmarks/results/tpu/config_speed.jsonl``)."""
    inverse = inverse_permutation(perm)
    flat, treedef = jax.tree.flatten(tree)
    moved = [jnp.moveaxis(x.astype(jnp.uint8) if x.dtype == jnp.bool_ else x, axis, -1) for x in flat]  # [..., n]
    width = [m.size // m.shape[-1] for m in moved]
    columns = [c for m, w in zip(moved, width) if w <= max_columns for c in m.reshape(w, m.shape[-1])]  # each [n]
    sorted_columns = iter(lax.sort((inverse, *columns), num_keys=1)[1:] if columns else ())
    out = []
    for x, m, w in zip(flat, moved, width):
        if w <= max_columns:
            y = jnp.stack([next(sorted_columns) for _ in range(w)]).reshape(m.shape)
            out.append(jnp.moveaxis(y, -1, axis).astype(x.dtype))
        else:
            out.append(jnp.take(x, perm, axis))
    return jax.tree.unflatten(treedef, out)


def pick_by_mask(x: jax.Array, index: jax.Array) -> jax.Array:
    """``x[..., index]`` per row: ``x [..., K]``, ``index [...]`` (integers in ``[0, K)``),
    as ``jnp.take_along_axis(x, index[..., None], -1)[..., 0]``. The row's other entries are
    replaced by zeros and the row summed: ``x_a + 0 + ... + 0 = x_a`` for every ``x_a`` (inf
    and NaN included; only a ``-0.0`` comes back as ``+0.0``), and the gradient reaches
    ``x_a`` alone, as the gather's does."""
    hit = lax.broadcasted_iota(jnp.int32, x.shape, x.ndim - 1) == index[..., None].astype(jnp.int32)
    return jnp.sum(jnp.where(hit, x, jnp.zeros_like(x)), axis=-1)

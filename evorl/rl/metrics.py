"""Metrics that declare their own reduction.

A loss or a training step returns a dict of scalar metrics. A plain array is averaged
wherever metrics are combined (over devices, minibatch steps and iterations); a
:class:`Metric` says how it combines instead, e.g. ``Metric(jnp.max(ratios), "max")``
for a maximum, ``Metric(episode_count, "sum")`` for a count. The reduction travels with
the value through ``lax.scan``, ``vmap`` and ``shard_map`` (it is static pytree
metadata), so the code that combines metrics never guesses it from the metric's name.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from evorl.rl.collectives import pmax, pmean, pmin, psum

REDUCTIONS = ("mean", "max", "min", "sum")


@struct.dataclass
class Metric:
    """A scalar metric and how several of its values combine: ``mean``, ``max``, ``min`` or ``sum``."""

    value: Any
    reduction: str = struct.field(pytree_node=False, default="mean")

    def __post_init__(self):
        if self.reduction not in REDUCTIONS:
            raise ValueError(f"Metric reduction must be one of {REDUCTIONS}, got {self.reduction!r}")


def is_metric(x: Any) -> bool:
    return isinstance(x, Metric)


def declared(metrics: dict[str, Any]) -> dict[str, Metric]:
    """Every entry as a :class:`Metric` (plain values are means)."""
    return {k: v if is_metric(v) else Metric(v) for k, v in metrics.items()}


def _map(fn, metrics: dict[str, Metric]) -> dict[str, Metric]:
    return {k: dataclasses.replace(m, value=fn(m.reduction, m.value)) for k, m in declared(metrics).items()}


def over_devices(metrics: dict[str, Any], axis_name: str | None) -> dict[str, Metric]:
    """Each metric reduced over the device axis (identity when ``axis_name`` is None)."""
    collective = {"mean": pmean, "max": pmax, "min": pmin, "sum": psum}
    return _map(lambda r, v: collective[r](v, axis_name), metrics)


def over_steps(metrics: dict[str, Any], weights: jax.Array) -> dict[str, Metric]:
    """Metrics stacked over steps ``[S...]`` reduced to scalars, counting only the steps with
    weight 1 (``weights`` ``[S...]`` of 0/1): the weighted mean, the max, the min, or the sum."""
    steps = jnp.maximum(jnp.sum(weights), 1.0)

    def reduce(reduction, v):
        if reduction == "mean":
            return jnp.sum(v * weights) / steps
        if reduction == "max":
            return jnp.max(jnp.where(weights > 0, v, -jnp.inf))
        if reduction == "min":
            return jnp.min(jnp.where(weights > 0, v, jnp.inf))
        return jnp.sum(v * weights)

    return _map(reduce, metrics)


def zeros_like_totals(metrics: dict[str, Any]) -> dict[str, Metric]:
    """The identity of :func:`accumulate` for metrics shaped like ``metrics`` (abstract ok)."""
    identity = {"max": -jnp.inf, "min": jnp.inf}
    return _map(lambda r, v: jnp.full(v.shape, identity.get(r, 0.0), v.dtype), metrics)


def accumulate(totals: dict[str, Metric], metrics: dict[str, Any]) -> dict[str, Metric]:
    """Running totals over iterations: maxima for ``max``, minima for ``min``, sums otherwise."""
    metrics = declared(metrics)
    combine = {"max": jnp.maximum, "min": jnp.minimum}
    return {k: dataclasses.replace(t, value=combine.get(t.reduction, jnp.add)(t.value, metrics[k].value))
            for k, t in totals.items()}


def per_iteration(totals: dict[str, Metric], num_iterations: int) -> dict[str, np.ndarray]:
    """Host values of :func:`accumulate`'d totals: means per iteration for ``mean``, the
    totals for ``max``, ``min`` and ``sum`` (float64 NumPy arrays, per agent for a population)."""
    out = {}
    for k, m in totals.items():
        value = np.asarray(m.value, np.float64)
        out[k] = value / num_iterations if m.reduction == "mean" else value
    return out

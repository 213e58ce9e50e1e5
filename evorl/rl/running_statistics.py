"""Running mean and variance of observations, merged exactly across batches and devices."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from evorl.rl.collectives import psum


@struct.dataclass
class RunningStatistics:
    count: jax.Array  # [] number of samples seen
    mean: jax.Array  # [*shape]
    var: jax.Array  # [*shape] population variance


def init_running_statistics(shape: tuple[int, ...]) -> RunningStatistics:
    return RunningStatistics(
        count=jnp.zeros((), jnp.float32),
        mean=jnp.zeros(shape, jnp.float32),
        var=jnp.ones(shape, jnp.float32),
    )


def update_running_statistics(
    stats: RunningStatistics, batch: jax.Array, axis_name: str | None = None
) -> RunningStatistics:
    r"""Merges ``batch [..., *shape]`` (all devices' batches with ``axis_name``) into ``stats``.

    Chan et al.'s parallel update with ``n_a = count``, ``n_b`` the batch size and
    ``\Delta = \bar x_b - \bar x_a``:
    ``mean = \bar x_a + \Delta n_b / n``,
    ``M2 = M2_a + M2_b + \Delta^2 n_a n_b / n``, ``var = M2 / n``.
    """
    shape = stats.mean.shape
    x = batch.reshape((-1,) + shape).astype(jnp.float32)
    n_b = psum(jnp.asarray(x.shape[0], jnp.float32), axis_name)
    mean_b = psum(jnp.sum(x, axis=0), axis_name) / n_b
    m2_b = psum(jnp.sum(jnp.square(x - mean_b), axis=0), axis_name)
    return merge_moments(stats, n_b, mean_b, m2_b)


def merge_moments(stats: RunningStatistics, n_b: jax.Array, mean_b: jax.Array, m2_b: jax.Array) -> RunningStatistics:
    """Merges a batch of ``n_b`` samples with mean ``mean_b`` and sum of squared deviations
    ``m2_b`` into ``stats`` (Chan et al.'s update above); an empty batch changes nothing."""
    n_a = stats.count
    n = n_a + n_b
    safe_n = jnp.maximum(n, 1.0)
    delta = mean_b - stats.mean
    mean = stats.mean + delta * (n_b / safe_n)
    m2 = stats.var * n_a + m2_b + jnp.square(delta) * (n_a * n_b / safe_n)
    merged = RunningStatistics(count=n, mean=mean, var=m2 / safe_n)
    return jax.tree.map(lambda new, old: jnp.where(n_b > 0, new, old), merged, stats)


def moments_from_shifted_sums(count: jax.Array, sum_d: jax.Array, sum_d2: jax.Array,
                              shift: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    r"""``(n, mean, M2)`` of samples known by the sums of ``d = x - shift``:
    ``mean = shift + \sum d / n``, ``M2 = \sum d^2 - (\sum d)^2 / n`` (shifting by a value
    close to the mean, e.g. the running mean, keeps the float32 sums accurate)."""
    safe = jnp.maximum(count, 1.0)
    return count, shift + sum_d / safe, jnp.maximum(sum_d2 - jnp.square(sum_d) / safe, 0.0)


def normalize(stats: RunningStatistics, x: jax.Array, clip: float = 10.0, eps: float = 1e-8) -> jax.Array:
    """``clip((x - mean) / sqrt(var + eps), -clip, clip)``; identity before any update."""
    normalized = (x - stats.mean) / jnp.sqrt(stats.var + eps)
    normalized = jnp.clip(normalized, -clip, clip)
    return jnp.where(stats.count > 0, normalized, x)

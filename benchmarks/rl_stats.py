"""Aggregate statistics over runs of normalised scores, after Agarwal et al. (2021), "Deep
Reinforcement Learning at the Edge of the Statistical Precipice" (the ``rliable`` library), in
NumPy alone so that the results page renders without it.

A **run** is one seed of one config and a **task** is one config. A score is normalised:
``s = (R - R_random) / (R_target - R_random)``, 0 at a random policy, 1 at the target.
Scores arrive as a list of per-task arrays (tasks may have different run counts).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

#: Bootstrap resamples for every interval on the results page (fixed, with the seed, so the
#: page renders to the same text every time).
DEFAULT_REPS = 2000
DEFAULT_SEED = 0


def iqm(scores: np.ndarray, axis: int | None = None) -> np.ndarray | float:
    """The interquartile mean: the mean of the middle 50% of the scores.

    With the ``n`` scores sorted, ``x_(1) <= ... <= x_(n)``, and ``k = floor(n / 4)``::

        IQM = 1 / (n - 2k) * sum_{i = k+1}^{n-k} x_(i)

    which is ``scipy.stats.trim_mean(x, 0.25)``, what ``rliable.metrics.aggregate_iqm``
    computes. ``axis=None`` pools every score; an int takes the IQM along that axis.
    """
    x = np.asarray(scores, dtype=float)
    if axis is None:
        x, axis = x.ravel(), 0
    n = x.shape[axis]
    if n == 0:
        raise ValueError("iqm of no scores")
    k = int(0.25 * n)
    x = np.sort(x, axis=axis)
    middle = np.take(x, np.arange(k, n - k), axis=axis)
    result = middle.mean(axis=axis)
    return float(result) if np.ndim(result) == 0 else result


def performance_profile(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """The score distribution: for each ``tau``, the fraction of runs whose score exceeds it,
    ``F(tau) = 1/N sum_i [s_i > tau]`` over the ``N`` pooled runs (rliable's
    ``run_score_distribution``). ``scores [..., N]`` gives ``[..., len(taus)]``."""
    x = np.asarray(scores, dtype=float)
    return (x[..., None] > np.asarray(taus, dtype=float)).mean(axis=-2)


def stratified_resamples(tasks: Sequence[np.ndarray], reps: int = DEFAULT_REPS,
                         seed: int = DEFAULT_SEED) -> np.ndarray:
    """``reps`` stratified bootstrap resamples of the pooled runs, ``[reps, N]``: each task's
    runs are drawn with replacement from that task alone, as many as it has (the strata are the
    tasks, so every resample keeps each task's weight)."""
    if not tasks or any(np.size(t) == 0 for t in tasks):
        raise ValueError("stratified bootstrap needs at least one task, each with at least one run")
    rng = np.random.default_rng(seed)
    columns = []
    for runs in tasks:
        runs = np.asarray(runs, dtype=float).ravel()
        columns.append(runs[rng.integers(0, runs.size, size=(reps, runs.size))])  # [reps, n_task]
    return np.concatenate(columns, axis=1)


def percentile_interval(samples: np.ndarray, size: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """The percentile bootstrap interval: the ``(1 - size) / 2`` and ``(1 + size) / 2``
    quantiles of the statistic over the resamples (axis 0)."""
    if not 0 < size < 1:
        raise ValueError(f"interval size must be in (0, 1), got {size}")
    lo, hi = np.percentile(samples, [50 * (1 - size), 50 * (1 + size)], axis=0)
    return lo, hi


def interval_estimate(tasks: Sequence[np.ndarray], statistic: Callable[[np.ndarray], np.ndarray],
                      reps: int = DEFAULT_REPS, seed: int = DEFAULT_SEED, size: float = 0.95):
    """``(point, lo, hi)``: ``statistic`` of the pooled runs and its ``size`` stratified
    bootstrap percentile interval. ``statistic`` maps ``[..., N]`` pooled runs to its value
    (batched over the leading axes)."""
    pooled = np.concatenate([np.asarray(t, dtype=float).ravel() for t in tasks])
    point = statistic(pooled)
    lo, hi = percentile_interval(statistic(stratified_resamples(tasks, reps, seed)), size)
    return point, lo, hi


def iqm_interval(tasks: Sequence[np.ndarray], reps: int = DEFAULT_REPS, seed: int = DEFAULT_SEED,
                 size: float = 0.95) -> tuple[float, float, float]:
    """The IQM of the pooled runs with its stratified bootstrap interval."""
    point, lo, hi = interval_estimate(tasks, lambda x: iqm(x, axis=-1), reps, seed, size)
    return float(point), float(lo), float(hi)


def profile_interval(tasks: Sequence[np.ndarray], taus: np.ndarray, reps: int = DEFAULT_REPS,
                     seed: int = DEFAULT_SEED, size: float = 0.95):
    """The performance profile at ``taus`` with its pointwise stratified bootstrap interval."""
    return interval_estimate(tasks, lambda x: performance_profile(x, taus), reps, seed, size)

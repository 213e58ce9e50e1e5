"""A population run's fitness and its RL side: ``population.png``.

Drawn from the run folder's ``metrics.jsonl``, one point per logging point (a chunk of
``training.eval_interval`` generations, its metrics reduced as logged), against env steps:

1. the population's fitness: the best (``train/best_actor_return``), the mean with a band of
   one standard deviation (``train/fitness_mean`` +- ``train/fitness_std``), the worst
   (``train/fitness_min``) and the RL learner's own return (``train/learner_return``) where
   they are logged;
2. the RL side: the learner's rank among population + learner (``train/learner_rank``, 1 on
   top; a marker where ``train/learner_injected`` > 0, the learner copied into the population
   in that interval) and, on a second axis, the lineage: the share of the population that
   descends from an injected learner (``train/population_from_learner``, ERL); else how many
   elites came from the critic-trained actors (``train/elites_from_rl``, CEM-RL).

A workflow that logs these declares ``population_plot = True``; ``evorl.app.experiment`` then
draws the figure at the end of a run with ``logging.plot``. This module imports no JAX.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evorl.app.run_folder import METRICS_JSONL, read_jsonl

#: The columns every population run logs; the figure needs all three.
FITNESS_COLUMNS = ("train/best_actor_return", "train/fitness_mean", "train/fitness_std")
#: The RL side's metrics, the first one logged is drawn.
RL_COLUMNS = ("train/learner_rank", "train/elites_from_rl")
INJECTED = "train/learner_injected"
LINEAGE = "train/population_from_learner"


@dataclass(frozen=True)
class PopulationSeries:
    """What the figure draws, each ``[G]`` over the ``G`` logging points with fitness metrics
    (NaN where a value was null); ``None`` where the run logged no such column."""

    steps: np.ndarray
    best: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    minimum: np.ndarray | None
    learner_return: np.ndarray | None
    rl_metric: str | None  # the drawn column of RL_COLUMNS
    rl_values: np.ndarray | None
    injected_steps: np.ndarray  # env steps of the logging points with learner_injected > 0
    from_learner: np.ndarray | None = None  # share of the population descending from an injected learner


@dataclass(frozen=True)
class PopulationPlot:
    path: Path
    figure: object  # matplotlib Figure; axes[0]: fitness, axes[1]: the RL side
    series: PopulationSeries


def column(rows: list[dict], key: str) -> np.ndarray | None:
    """``rows``' values of ``key`` as floats (null: NaN), or None if no row logged it."""
    if not any(row.get(key) is not None for row in rows):
        return None
    return np.asarray([np.nan if row.get(key) is None else row[key] for row in rows], float)


def population_series(records: list[dict]) -> PopulationSeries:
    """The series of :class:`PopulationSeries` from metrics records (``{"step", key: value}``);
    a ``ValueError`` naming the fitness columns no record has when none has all of them."""
    rows = [r for r in records if all(key in r for key in FITNESS_COLUMNS)]
    if not rows:
        missing = [key for key in FITNESS_COLUMNS if not any(key in r for r in records)] or list(FITNESS_COLUMNS)
        raise ValueError(f"no population fitness metrics logged: missing {', '.join(missing)} (a population "
                         f"plot needs {', '.join(FITNESS_COLUMNS)} in the same record of {METRICS_JSONL}).")
    rows.sort(key=lambda r: r["step"])
    steps = np.asarray([r["step"] for r in rows], float)
    rl_metric = next((key for key in RL_COLUMNS if column(rows, key) is not None), None)
    injected = column(rows, INJECTED) if rl_metric == RL_COLUMNS[0] else None
    return PopulationSeries(
        steps=steps, best=column(rows, FITNESS_COLUMNS[0]), mean=column(rows, FITNESS_COLUMNS[1]),
        std=column(rows, FITNESS_COLUMNS[2]), minimum=column(rows, "train/fitness_min"),
        learner_return=column(rows, "train/learner_return"), rl_metric=rl_metric,
        rl_values=None if rl_metric is None else column(rows, rl_metric),
        injected_steps=steps[np.nan_to_num(injected) > 0] if injected is not None else steps[:0],
        from_learner=column(rows, LINEAGE))


def draw_fitness(ax, s: PopulationSeries) -> None:
    ax.fill_between(s.steps, s.mean - s.std, s.mean + s.std, color="C0", alpha=0.2, label="mean +- std")
    ax.plot(s.steps, s.mean, color="C0", label="mean")
    ax.plot(s.steps, s.best, color="C1", label="best")
    if s.minimum is not None:
        ax.plot(s.steps, s.minimum, color="C0", linestyle=":", label="worst")
    if s.learner_return is not None:
        ax.plot(s.steps, s.learner_return, color="C3", linestyle="--", label="RL learner")
    ax.set(title="population fitness", xlabel="env steps", ylabel="episode return")
    ax.legend(fontsize="small")


def draw_rl_side(ax, s: PopulationSeries) -> None:
    if s.rl_metric == RL_COLUMNS[0]:
        ax.plot(s.steps, s.rl_values, color="C3", marker=".", label="learner's rank")
        injected = np.isin(s.steps, s.injected_steps)
        ax.plot(s.steps[injected], s.rl_values[injected], "v", color="k", label="learner injected")
        ax.invert_yaxis()  # rank 1 (the best) on top
        ax.set(title="RL learner's rank in population + learner", ylabel="rank (1 = best)")
        handles = ax.get_legend_handles_labels()
        if s.from_learner is not None:  # the lineage, on its own axis
            share = ax.twinx()
            share.plot(s.steps, s.from_learner, color="C4", linestyle="--", label="population from the learner")
            share.set(ylim=(-0.05, 1.05), ylabel="share of the population")
            handles = [a + b for a, b in zip(handles, share.get_legend_handles_labels())]
        ax.legend(*handles, fontsize="small")
    elif s.rl_metric is not None:
        ax.plot(s.steps, s.rl_values, color="C2", marker=".")
        ax.set(title="elites from the critic-trained actors", ylabel="elites")
    else:
        ax.set(title="no RL-side metric logged")
    ax.set_xlabel("env steps")


def plot_population(run_dir: Path | str, out_path: Path | str) -> PopulationPlot:
    """Writes ``out_path`` (see the module docstring) from ``run_dir``'s metrics; returns the
    figure and the series it drew."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    series = population_series(read_jsonl(Path(run_dir) / METRICS_JSONL))
    figure = Figure(figsize=(10, 3.8), layout="constrained")
    FigureCanvasAgg(figure)
    fitness_ax, rl_ax = figure.subplots(1, 2)
    draw_fitness(fitness_ax, series)
    draw_rl_side(rl_ax, series)
    out_path = Path(out_path)
    figure.savefig(out_path, dpi=100)
    return PopulationPlot(out_path, figure, series)

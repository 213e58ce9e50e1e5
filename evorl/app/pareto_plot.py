"""A multi-objective run's fronts and hypervolume: ``pareto.png``.

Drawn from the run folder's ``pareto_front.jsonl`` (one record per logging point: the
objective vectors of the rank-0 members, see :class:`~evorl.algorithms.nsga2_workflow.NSGA2Workflow`)
and ``metrics.jsonl``:

1. the fronts of up to ``MAX_FRONTS`` logging points spread over the run (the first and the
   last among them), each a line through its points sorted by the first objective, coloured
   by generation (light to dark);
2. the hypervolume (``train/hypervolume``) against env steps.

A workflow that writes fronts declares ``pareto_plot = True``; ``evorl.app.experiment`` then
draws the figure at the end of a run with ``logging.plot``. This module imports no JAX.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evorl.app.run_folder import METRICS_JSONL, PARETO_JSONL, read_jsonl

#: Fronts drawn at most (evenly spaced over the logged ones).
MAX_FRONTS = 8
HYPERVOLUME = "train/hypervolume"


@dataclass(frozen=True)
class ParetoPlot:
    path: Path
    figure: object  # matplotlib Figure; axes[0]: fronts, axes[1]: hypervolume
    iterations: list[int]  # the generations whose fronts are drawn


def drawn_records(records: list[dict], max_fronts: int = MAX_FRONTS) -> list[dict]:
    """Up to ``max_fronts`` of ``records`` (sorted by iteration), evenly spaced, first and last kept."""
    records = sorted(records, key=lambda r: r["iteration"])
    if len(records) <= max_fronts:
        return records
    picks = np.unique(np.round(np.linspace(0, len(records) - 1, max_fronts)).astype(int))
    return [records[i] for i in picks]


def plot_pareto(run_dir: Path | str, out_path: Path | str) -> ParetoPlot:
    """Writes ``out_path`` (see the module docstring) from ``run_dir``; a ``ValueError`` when the
    run wrote no fronts."""
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    run_dir = Path(run_dir)
    records = read_jsonl(run_dir / PARETO_JSONL) if (run_dir / PARETO_JSONL).exists() else []
    if not records:
        raise ValueError(f"no fronts logged: {run_dir / PARETO_JSONL} is missing or empty.")
    drawn = drawn_records(records)
    names = records[-1]["objectives"]
    figure = Figure(figsize=(10, 3.8), layout="constrained")
    FigureCanvasAgg(figure)
    front_ax, hv_ax = figure.subplots(1, 2)
    cmap = colormaps["viridis"]
    last = max(r["iteration"] for r in drawn)
    for r in drawn:
        front = np.asarray(r["front"], float).reshape((-1, len(names)))
        front = front[np.argsort(front[:, 0], kind="stable")]
        colour = cmap(0.9 * (1 - r["iteration"] / max(last, 1)))
        front_ax.plot(front[:, 0], front[:, 1], marker="o", markersize=3, color=colour,
                      label=f"generation {r['iteration']}")
    front_ax.set(title="Pareto front (rank-0 members)", xlabel=names[0], ylabel=names[1])
    front_ax.legend(fontsize="x-small")
    metrics = [m for m in read_jsonl(run_dir / METRICS_JSONL) if m.get(HYPERVOLUME) is not None]
    hv_ax.plot([m["step"] for m in metrics], [m[HYPERVOLUME] for m in metrics], marker=".", color="C0")
    hv_ax.set(title="hypervolume", xlabel="env steps", ylabel="hypervolume")
    out_path = Path(out_path)
    figure.savefig(out_path, dpi=100)
    return ParetoPlot(out_path, figure, [r["iteration"] for r in drawn])

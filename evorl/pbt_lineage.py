"""The lineage of a population-based training run: ``pbt_lineage.jsonl`` and ``pbt.png``.

One JSON object per PBT step, appended and flushed when the step's chunk returns (a
resumed run drops the records after its checkpoint and writes them again)::

    {"step": env steps, "wall_time": s, "iteration": 20,
     "fitness": [N],                      what each agent was ranked by
     "source": [N],                       the agent each agent copied (itself: kept)
     "copied": [{"agent": 3, "from": 6}, ...],
     "hyperparameters": {"training.learning_rate": [N], ...},       before the step
     "new_hyperparameters": {"training.learning_rate": [N], ...}}   after exploit and explore

:func:`plot_lineage` draws every agent's hyperparameters over training and the population's
returns (each agent's fitness at each step, and the logged evaluation return's mean and
range). This module imports no JAX.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from evorl.run_folder import METRICS_JSONL, PBT_LINEAGE_JSONL, read_jsonl


def lineage_record(record: dict, keys: list[str]) -> dict:
    """The JSON record of one PBT step from the executor's arrays (``iteration``, ``source
    [N]``, ``fitness [N]``, ``before [N, H]``, ``after [N, H]``; ``keys`` names the ``H``)."""
    source = [int(s) for s in np.asarray(record["source"])]
    before, after = np.asarray(record["before"], np.float64), np.asarray(record["after"], np.float64)
    return {
        "iteration": int(record["iteration"]),
        "fitness": [float(f) for f in np.asarray(record["fitness"])],
        "source": source,
        "copied": [{"agent": i, "from": s} for i, s in enumerate(source) if s != i],
        "hyperparameters": {key: before[:, j].tolist() for j, key in enumerate(keys)},
        "new_hyperparameters": {key: after[:, j].tolist() for j, key in enumerate(keys)},
    }


def plot_lineage(run_dir: Path | str, out_path: Path | str):
    """``pbt.png``: a panel per evolving hyperparameter (each agent's value over env steps,
    log scale for learning rates) and one of the population's returns. Returns the figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    run_dir = Path(run_dir)
    records = read_jsonl(run_dir / PBT_LINEAGE_JSONL)
    keys = list(records[0]["hyperparameters"]) if records else []
    figure = Figure(figsize=(4.5 * (len(keys) + 1), 3.6), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, len(keys) + 1, squeeze=False)[0]
    steps = np.asarray([r["step"] for r in records], float)
    for ax, key in zip(axes, keys):
        # value in effect from each step on: the first record's "before", then each "after"
        values = np.asarray([records[0]["hyperparameters"][key]] + [r["new_hyperparameters"][key] for r in records])
        x = np.concatenate([[0.0], steps])
        for agent in range(values.shape[1]):
            ax.step(x, values[:, agent], where="post", lw=1, alpha=0.7)
        ax.set(title=key, xlabel="env steps")
        if key.endswith("learning_rate"):
            ax.set_yscale("log")
    ax = axes[-1]
    if records:
        fitness = np.asarray([[np.nan if f is None else f for f in r["fitness"]] for r in records], float)
        ax.plot(np.repeat(steps, fitness.shape[1]), fitness.ravel(), ".", ms=3, color="grey", label="agents' fitness")
    metrics = read_jsonl(run_dir / METRICS_JSONL) if (run_dir / METRICS_JSONL).exists() else []
    logged = [m for m in metrics if m.get("eval/episode_return") is not None]
    if logged:
        x = [m["step"] for m in logged]
        ax.plot(x, [m["eval/episode_return"] for m in logged], color="C0", label="evaluation return, mean")
        if all(m.get("eval/episode_return/min") is not None for m in logged):
            ax.fill_between(x, [m["eval/episode_return/min"] for m in logged],
                            [m["eval/episode_return/max"] for m in logged], color="C0", alpha=0.2, label="min-max")
    ax.set(title="population returns", xlabel="env steps")
    ax.legend(fontsize="small")
    figure.savefig(out_path, dpi=100)
    return figure

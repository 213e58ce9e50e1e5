"""The lineage of a population-based training run: ``pbt_lineage.jsonl`` and ``pbt.png``.

One JSON object per PBT step, appended and flushed when the step's chunk returns (a
resumed run drops the records after its checkpoint and writes them again)::

    {"step": env steps, "wall_time": s, "iteration": 20,
     "fitness": [N],                      what each agent was ranked by
     "source": [N],                       the agent each agent copied (itself: kept)
     "copied": [{"agent": 3, "from": 6}, ...],  ("diverged": true for an agent replaced after diverging)
     "diverged": [agents frozen by divergence before the step, each replaced],
     "hyperparameters": {"training.learning_rate": [N], ...},       before the step
     "new_hyperparameters": {"training.learning_rate": [N], ...}}   after exploit and explore

Values are written as the shortest decimals that read back as the same float32s (``1e-06``).

:func:`plot_lineage` draws every agent's hyperparameters over training and the population's
returns (each agent's fitness at each step, and the logged evaluation return's mean and
range). This module imports no JAX.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from evorl.app.run_folder import METRICS_JSONL, PBT_LINEAGE_JSONL, read_jsonl
from evorl.config.pbt import LOG_SCALE_KEYS
from evorl.engine.lineage import lineage_record, shortest  # noqa: F401  (the records' format)


def population_after_step(run_dir: Path | str, iteration: int | None = None) -> tuple[int, list[dict]] | None:
    """The population as the newest PBT step at or before ``iteration`` (default: the last
    step) left it, best first: ``(step's iteration, agents)``, each agent ``{"agent": i,
    "fitness": ..., "copied_from": j or None, "hyperparameters": {key: value}}``. An agent that
    copied another holds that agent's parameters, so its fitness is the one they were ranked by.
    The hyperparameters are those every later iteration trained with until the next step. None
    without such a step."""
    path = Path(run_dir) / PBT_LINEAGE_JSONL
    records = read_jsonl(path) if path.is_file() else []
    records = [r for r in records if iteration is None or r["iteration"] <= iteration]
    if not records:
        return None
    last = records[-1]
    fitness = [np.nan if f is None else f for f in last["fitness"]]
    agents = [{"agent": i, "fitness": fitness[s], "copied_from": s if s != i else None,
               "hyperparameters": {key: values[i] for key, values in last["new_hyperparameters"].items()}}
              for i, s in enumerate(last["source"])]
    agents.sort(key=lambda a: (np.isnan(a["fitness"]), -np.nan_to_num(a["fitness"]), a["copied_from"] is not None,
                               a["agent"]))  # on a tie, the original before its copies
    return last["iteration"], agents


def agent_label(agent: dict) -> str:
    """``agent 3 (fitness 487.5, learning_rate=0.002403, clip_epsilon=0.2)``, values to 4
    significant digits; a copy says whose parameters it holds."""
    copied = f" as a copy of agent {agent['copied_from']}" if agent["copied_from"] is not None else ""
    values = [f"{key.rpartition('.')[2]}={value:.4g}" for key, value in agent["hyperparameters"].items()]
    fitness = f"fitness {agent['fitness']:.4g}{copied}"
    return f"agent {agent['agent']} ({', '.join([fitness, *values])})"


def plot_lineage(run_dir: Path | str, out_path: Path | str):
    """``pbt.png``: a panel per evolving hyperparameter (each agent's value over env steps,
    log scale for learning rates and ES sigmas) and one of the population's returns. Returns the figure."""
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
        if key in LOG_SCALE_KEYS or key.endswith("learning_rate"):  # PBT resamples them log-uniformly
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

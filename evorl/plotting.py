"""Learning curves from run folders: return vs env steps and vs wall time, seeds grouped.

Runs whose configs differ only in ``seed`` form one group, drawn as the mean over seeds
with a 95% confidence band (Student t over seeds); a group of one run is a plain line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evorl.run_folder import CONFIG_YAML, METRICS_JSONL, load_run_config, read_jsonl

#: Two-sided 95% Student t quantiles for 1..10 degrees of freedom.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


#: Groups are labelled by the config keys that tell them apart, or by folder name beyond this.
MAX_LABEL_KEYS = 3


def t95(dof: int) -> float:
    """The 97.5% quantile of Student's t with ``dof`` degrees of freedom (approximate above 10)."""
    return _T95[dof - 1] if dof <= len(_T95) else 1.96 + 2.5 / dof


@dataclass(frozen=True)
class Curve:
    run_dir: Path
    steps: np.ndarray  # [N] env steps
    wall_time: np.ndarray  # [N] seconds
    values: np.ndarray  # [N]


def load_curve(run_dir: Path | str, metric: str) -> Curve:
    run_dir = Path(run_dir)
    path = run_dir / METRICS_JSONL
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} has no {METRICS_JSONL}: not an evorl run folder (or nothing logged yet).")
    records = [r for r in read_jsonl(path) if r.get(metric) is not None]
    if not records:
        raise ValueError(f"{path} has no values of metric {metric!r}.")
    column = lambda key: np.asarray([float(r.get(key) or 0.0) for r in records])  # noqa: E731
    return Curve(run_dir, column("step"), column("wall_time"), column(metric))


def group_runs(run_dirs: list[Path]) -> dict[str, list[Path]]:
    """Runs grouped by their config without ``seed``; labels name what tells groups apart."""
    configs = {}
    for run_dir in run_dirs:
        cfg = load_run_config(run_dir) if (run_dir / CONFIG_YAML).is_file() else {"run": str(run_dir)}
        cfg.pop("seed", None)
        for section in ("logging", "checkpoint"):
            cfg.pop(section, None)
        configs[run_dir] = _flatten(cfg)
    varying = sorted({k for c in configs.values() for k in c if len({str(o.get(k)) for o in configs.values()}) > 1})
    groups: dict[str, list[Path]] = {}
    for run_dir, cfg in configs.items():
        base = f"{str(cfg.get('workflow_cls', '')).rpartition('.')[2]} {cfg.get('env.env_name', '')}".strip()
        if len(varying) > MAX_LABEL_KEYS:
            label = run_dir.name
        else:
            label = ", ".join(f"{k.rpartition('.')[2]}={cfg.get(k)}" for k in varying if k != "run") or base or run_dir.name
        groups.setdefault(label, []).append(run_dir)
    return groups


def mean_and_band(xs: list[np.ndarray], ys: list[np.ndarray], points: int = 200):
    """Curves interpolated onto a common grid (up to the shortest run): mean, lower, upper."""
    end = min(x[-1] for x in xs)
    start = max(x[0] for x in xs)
    grid = np.linspace(start, end, points) if end > start else np.asarray([end])
    stacked = np.stack([np.interp(grid, x, y) for x, y in zip(xs, ys)])  # [runs, points]
    mean = stacked.mean(axis=0)
    if len(xs) == 1:
        return grid, mean, mean, mean
    half = t95(len(xs) - 1) * stacked.std(axis=0, ddof=1) / np.sqrt(len(xs))
    return grid, mean, mean - half, mean + half


def plot_runs(run_dirs: list[Path | str], out_path: Path | str, metric: str = "eval/episode_return") -> Path:
    """Writes a PNG with ``metric`` vs env steps and vs wall time for the runs' groups."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    run_dirs = [Path(r) for r in run_dirs]
    groups = group_runs(run_dirs)
    fig = Figure(figsize=(11, 4.4))  # fixed margins: constrained layout would double the drawing time
    fig.subplots_adjust(left=0.07, right=0.98, top=0.96, bottom=0.2, wspace=0.22)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2)
    for label, dirs in groups.items():
        curves = [load_curve(d, metric) for d in dirs]
        name = f"{label} ({len(curves)} seeds)" if len(curves) > 1 else label
        for ax, x_of in ((axes[0], lambda c: c.steps), (axes[1], lambda c: c.wall_time)):
            x, mean, low, high = mean_and_band([x_of(c) for c in curves], [c.values for c in curves])
            (line,) = ax.plot(x, mean, label=name)
            if len(curves) > 1:
                ax.fill_between(x, low, high, color=line.get_color(), alpha=0.25, linewidth=0)
    for ax, xlabel in zip(axes, ("env steps", "wall time [s]")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", fontsize="small", frameon=False,
               ncols=min(3, len(groups)))
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, dpi=100)
    return out_path


def _flatten(data: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out

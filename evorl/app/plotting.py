"""Learning curves from run folders: return vs env steps and vs wall time, seeds grouped.

Runs whose configs differ only in ``seed`` form one group. On each panel a group is drawn
as the interquartile mean (IQM) over its runs with a 95% percentile-bootstrap confidence
band (Agarwal et al. 2021, "Deep RL at the edge of the statistical precipice", as in
``rliable``; for fewer than 4 runs the IQM trims nothing: it is the mean). A group of one
run is its logged points joined by lines.

Each run is interpolated linearly onto a common x grid (the union of the runs' logging
points, or ``MAX_GRID_POINTS`` evenly spaced points when that union is larger), within its
own first and last logged x only: no run is extrapolated. At each grid point the IQM is
over the runs that have data there (the line is faint where that is not all of them), and
the band is drawn only where at least 2 do. So runs whose wall-time ranges do not overlap
(wall time counts from each run's own start, compilation included) are all drawn, one
after another, instead of being cut to their common range.

A resumed run's wall time goes on from its last record before the resume, and the resumed
process's start and compilation fall between that record and the next: on the wall-time
panel the line is broken there (the first record after a resume has ``"resumed": true``).

The band is a percentile bootstrap of the runs' values: every resampled IQM is a mean of
some of those values, so the band never leaves [min, max] over runs at that point.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from evorl.app.run_folder import CONFIG_YAML, METRICS_JSONL, load_run_config, read_jsonl
from evorl.config import dotted_keys

#: Groups are labelled by the config keys that tell them apart, or by folder name beyond this.
MAX_LABEL_KEYS = 3
#: The common x grid of a group has at most this many points.
MAX_GRID_POINTS = 200
#: Curves with at most this many points show their points as markers.
MAX_MARKED_POINTS = 30
EVAL_RETURN = "eval/episode_return"
TRAIN_RETURN = "train/episode_return"
METRIC_NAMES = {EVAL_RETURN: "evaluation return (greedy policy)",
                TRAIN_RETURN: "training return (episodes ended in rollouts)"}
#: The panels: x axis name and how a run's curve gives its x values.
PANELS: dict[str, Callable[["Curve"], np.ndarray]] = {
    "env steps": lambda c: c.steps,
    "wall time": lambda c: c.wall_time,
}


# --- statistics over runs -----------------------------------------------------------------
def iqm(values: np.ndarray, axis: int = 0) -> np.ndarray:
    """Interquartile mean along ``axis``, NaN ignored: of the ``n`` finite values, drop the
    ``floor(n / 4)`` lowest and the ``floor(n / 4)`` highest and average the rest (scipy's
    ``trim_mean(x, 0.25)``, rliable's ``aggregate_iqm``). For ``n < 4`` that is the mean;
    NaN where ``n == 0``."""
    v = np.sort(np.moveaxis(np.asarray(values, dtype=float), axis, 0), axis=0)  # NaN sort last
    n = np.sum(~np.isnan(v), axis=0)
    cut = n // 4
    rank = np.arange(len(v)).reshape((-1,) + (1,) * (v.ndim - 1))
    kept = (rank >= cut) & (rank < n - cut)
    total = np.sum(np.where(kept, v, 0.0), axis=0)
    return np.where(n > 0, total / np.maximum(n - 2 * cut, 1), np.nan)


def bootstrap_ci(values: np.ndarray, statistic=iqm, confidence: float = 0.95, reps: int = 2000,
                 seed: int = 0, block: int = 250) -> tuple[np.ndarray, np.ndarray]:
    """Percentile-bootstrap confidence interval of ``statistic`` over runs, at each point.

    ``values``: ``[R, G]``, run ``r``'s value at grid point ``g``, NaN where the run has no
    data. At a point with ``n`` runs' values, each of ``reps`` resamples draws ``n`` of them
    with replacement; the interval is the ``(1 -+ confidence) / 2`` quantiles of the
    resampled statistics. (rliable's stratified bootstrap with one task: runs are
    resampled, the tasks' strata do not arise.) The draws are shared across points: where
    the same runs have data, a resample takes the same runs everywhere, so the band is
    smooth. Returns ``(low, high)``, each ``[G]``, NaN where fewer than 2 runs have data.
    """
    values = np.asarray(values, dtype=float)
    runs, points = values.shape
    missing = np.isnan(values)
    order = np.argsort(missing, axis=0, kind="stable")  # each point's runs with data first, in run order
    present = np.take_along_axis(values, order, axis=0)  # [R, G]
    n = np.sum(~missing, axis=0)  # [G]
    rng = np.random.default_rng(seed)
    stats = np.empty((reps, points))
    draw_rank = np.arange(runs)[:, None]  # [R, 1]
    for start in range(0, reps, block):
        u = rng.random((min(block, reps - start), runs, 1))  # [b, R, 1]
        pick = np.minimum((u * n).astype(int), np.maximum(n - 1, 0))  # [b, R, G]
        resampled = np.where(draw_rank < n, present[pick, np.arange(points)], np.nan)  # n draws per point
        stats[start:start + len(u)] = statistic(resampled, axis=1)
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(stats, [tail, 100 - tail], axis=0)
    return np.where(n >= 2, low, np.nan), np.where(n >= 2, high, np.nan)


def on_grid(grid: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``y(x)`` interpolated linearly at ``grid``; NaN outside ``[x[0], x[-1]]``."""
    out = np.interp(grid, x, y)
    out[(grid < x[0]) | (grid > x[-1])] = np.nan
    return out


def common_grid(xs: Sequence[np.ndarray], max_points: int = MAX_GRID_POINTS) -> np.ndarray:
    """The union of the runs' x values, or ``max_points`` evenly spaced over its range."""
    union = np.unique(np.concatenate(xs))
    return union if len(union) <= max_points else np.linspace(union[0], union[-1], max_points)


# --- run folders ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Curve:
    """One run's logged values of one metric."""

    run_dir: Path
    steps: np.ndarray  # [N] env steps
    wall_time: np.ndarray  # [N] seconds since the run started
    values: np.ndarray  # [N]
    #: [N] whether a resume lies between record ``k - 1`` and record ``k``
    resumed: np.ndarray | None = None

    def gaps(self) -> np.ndarray:
        """[N] bool: the records a resume lies before (the first is never one)."""
        gaps = np.zeros(len(self.steps), bool) if self.resumed is None else np.asarray(self.resumed, bool).copy()
        gaps[:1] = False
        return gaps


@dataclass(frozen=True)
class GroupCurve:
    """One group's runs on a common grid, as drawn on one panel."""

    group: str  # the group's label (its config keys that differ from the other groups')
    label: str  # the legend entry
    metric: str
    panel: str  # a key of PANELS
    x: np.ndarray  # [G] the grid (env steps, or seconds)
    runs: np.ndarray  # [R, G] each run interpolated, NaN outside its own x range
    center: np.ndarray  # [G] IQM over the runs with data, NaN where none
    low: np.ndarray  # [G] 95% bootstrap CI, NaN where fewer than 2 runs have data
    high: np.ndarray  # [G]

    @property
    def counts(self) -> np.ndarray:
        """[G] how many runs have data at each grid point."""
        return np.sum(~np.isnan(self.runs), axis=0)


def aggregate(group: str, label: str, metric: str, panel: str, curves: Sequence[Curve],
              max_points: int = MAX_GRID_POINTS) -> GroupCurve:
    """``curves`` (the runs of one group) on a common grid of the panel's x: IQM and 95% CI.

    On the wall-time panel, runs that logged at the same env steps (the seeds of one config)
    are aligned by logging point instead: point ``k`` is drawn at the runs' median wall time
    of their ``k``-th record, so runs whose times do not overlap are still compared point
    by point rather than each alone on its own stretch of the time axis.
    """
    if panel == "wall time" and len(curves) > 1 and all(np.array_equal(c.steps, curves[0].steps) for c in curves):
        runs = np.stack([c.values for c in curves])  # [R, G]
        grid = np.median(np.stack([c.wall_time for c in curves]), axis=0)  # [G], non-decreasing
        grid, runs = broken_at(grid, runs, np.any([c.gaps() for c in curves], axis=0))
        low, high = bootstrap_ci(runs)
        return GroupCurve(group, label, metric, panel, grid, runs, iqm(runs), low, high)
    xs, ys = [], []
    for curve in curves:
        x = PANELS[panel](curve)
        order = np.argsort(x, kind="stable")
        x, y = x[order], curve.values[order]
        if panel == "wall time":
            x, y = broken_at(x, y, curve.gaps()[order])
        xs.append(x)
        ys.append(y)
    grid = common_grid(xs, max_points)
    runs = np.stack([on_grid(grid, x, y) for x, y in zip(xs, ys)])  # [R, G]
    low, high = bootstrap_ci(runs) if len(curves) > 1 else (np.full(len(grid), np.nan),) * 2
    return GroupCurve(group, label, metric, panel, grid, runs, iqm(runs), low, high)


def broken_at(x: np.ndarray, y: np.ndarray, gaps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``x [G]`` and ``y [..., G]`` with a NaN point inserted halfway before each point ``k``
    where ``gaps[k]``: a line drawn (or interpolated) through them is broken there."""
    at = np.flatnonzero(gaps[1:]) + 1
    if not len(at):
        return x, y
    mid = (x[at - 1] + x[at]) / 2
    return np.insert(x, at, mid), np.insert(np.asarray(y, float), at, np.nan, axis=-1)


def load_curve(run_dir: Path | str, metric: str) -> Curve:
    run_dir = Path(run_dir)
    path = run_dir / METRICS_JSONL
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} has no {METRICS_JSONL}: not an evorl run folder (or nothing logged yet).")
    records, resumed, since_last = [], [], False
    for record in read_jsonl(path):
        since_last = since_last or bool(record.get("resumed"))  # kept for the next record with a value
        if record.get(metric) is not None:
            records.append(record)
            resumed.append(since_last)
            since_last = False
    if not records:
        raise ValueError(f"{path} has no values of metric {metric!r}.")
    column = lambda key: np.asarray([float(r.get(key) or 0.0) for r in records])  # noqa: E731
    return Curve(run_dir, column("step"), column("wall_time"), column(metric), np.asarray(resumed))


#: The config keys that say which algorithm and which environment a run trained, in a label's order.
IDENTITY_KEYS = ("workflow_cls", "env.env_name")


def group_runs(run_dirs: list[Path]) -> dict[str, list[Path]]:
    """Runs grouped by their config without ``seed``; each group is labelled by what tells it
    from the others: its algorithm and env where they differ (``PPO CartPole-v1``), then the
    other keys that differ between runs of the same algorithm and env (``learning_rate=0.001``:
    the keys a sweep overrode, not the defaults that came with ``algo=`` or ``env=``). With
    more than ``MAX_LABEL_KEYS`` such keys, each run is its own group, named by its folder."""
    configs = {}
    for run_dir in run_dirs:
        cfg = load_run_config(run_dir) if (run_dir / CONFIG_YAML).is_file() else {"run": str(run_dir)}
        cfg.pop("seed", None)
        for section in ("logging", "checkpoint"):
            cfg.pop(section, None)
        configs[run_dir] = dotted_keys(cfg)
    values = lambda key: {str(c.get(key)) for c in configs.values()}  # noqa: E731
    varying = sorted(k for k in {k for c in configs.values() for k in c} if k != "run" and len(values(k)) > 1)
    identity = [k for k in IDENTITY_KEYS if k in varying]
    swept = [k for k in varying if k not in identity and not _determined_by(k, identity, configs)]
    folders = folder_names(run_dirs)
    groups: dict[str, list[Path]] = {}
    for run_dir, cfg in configs.items():
        # the algorithm and env where they differ; for a single group, what it trained
        what = " ".join(_identity_name(k, cfg[k]) for k in identity or (IDENTITY_KEYS if not swept else ()) if k in cfg)
        if len(swept) > MAX_LABEL_KEYS:
            label = f"{what} ({folders[run_dir]})" if what else folders[run_dir]
        else:
            label = ", ".join(filter(None, [what, *(f"{k.rpartition('.')[2]}={cfg.get(k)}" for k in swept)]))
        groups.setdefault(label or folders[run_dir], []).append(run_dir)
    return groups


def _identity_name(key: str, value) -> str:
    """``PPO`` for ``workflow_cls: evorl.workflows.PPOWorkflow``; the env's name as it is."""
    if key == "workflow_cls":
        name = str(value).rpartition(".")[2]
        return name.removesuffix("Workflow") or name
    return str(value)


def _determined_by(key: str, identity: list[str], configs: dict[Path, dict]) -> bool:
    """Whether runs of the same ``identity`` values (e.g. the same algorithm and env) always
    agree on ``key``: then it differs only as their defaults do, which the label already says."""
    if not identity:
        return False
    seen: dict[tuple, str] = {}
    for cfg in configs.values():
        ident, value = tuple(str(cfg.get(k)) for k in identity), str(cfg.get(key))
        if seen.setdefault(ident, value) != value:
            return False
    return True


def folder_names(run_dirs: list[Path]) -> dict[Path, str]:
    """Each run folder by its path below the runs' common parent (``0``, ``1`` within one
    sweep; ``sweep_a/0``, ``sweep_b/0`` across two)."""
    parents = [str(Path(r).absolute().parent) for r in run_dirs]
    common = Path(os.path.commonpath(parents)) if parents else Path()
    return {r: str(Path(r).absolute().relative_to(common)) for r in run_dirs}


def metric_name(metric: str, run_dirs: list[Path]) -> str:
    """The legend's name of ``metric``; the evaluation return says how its runs evaluated
    (``training.eval_deterministic``: the greedy policy, or sampled actions)."""
    if metric == EVAL_RETURN and run_dirs and (run_dirs[0] / CONFIG_YAML).is_file():
        deterministic = load_run_config(run_dirs[0]).get("training", {}).get("eval_deterministic", True)
        if not deterministic:
            return "evaluation return (sampled actions)"
    return METRIC_NAMES.get(metric, metric)


def group_curves(run_dirs: list[Path | str], metrics: Sequence[str] | str | None = None) -> list[GroupCurve]:
    """Every group's curve of every metric on every panel.

    ``metrics`` default: the evaluation return; for a single group (one run, or the seeds of
    one config) also the training return where the runs logged it.
    """
    groups = group_runs([Path(r) for r in run_dirs])
    metrics = [metrics] if isinstance(metrics, str) else list(metrics or [EVAL_RETURN])
    optional = []
    if metrics == [EVAL_RETURN] and len(groups) == 1:
        optional = [TRAIN_RETURN]
    out = []
    for label, dirs in groups.items():
        for metric in metrics + optional:
            try:
                curves = [load_curve(d, metric) for d in dirs]
            except ValueError:
                if metric in optional:
                    continue
                raise
            name = label
            if len(curves) > 1:
                name += f" ({'IQM' if len(curves) >= 4 else 'mean'} of {len(curves)} seeds, 95% CI)"
            if len(metrics) + len(optional) > 1:
                name = f"{metric_name(metric, dirs)}: {name}"
            out += [aggregate(label, name, metric, panel, curves) for panel in PANELS]
    return out


# --- drawing -------------------------------------------------------------------------------
def short_count(x: float, _pos=None) -> str:
    """A tick label for a count: 0, 500, 100k, 1.5M, 2B."""
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.4g}{suffix}"
    return f"{x:.4g}"


def time_unit(seconds: float) -> tuple[str, float]:
    """The wall-time axis unit for a run of ``seconds``: s, min or h."""
    if seconds <= 300:
        return "s", 1.0
    return ("min", 60.0) if seconds <= 5 * 3600 else ("h", 3600.0)


@dataclass(frozen=True)
class Plot:
    path: Path
    figure: object  # matplotlib Figure; axes[0]: env steps, axes[1]: wall time
    curves: list[GroupCurve]


def plot_runs(run_dirs: list[Path | str], out_path: Path | str, metrics: Sequence[str] | str | None = None) -> Plot:
    """Writes a PNG of ``metrics`` (default: see :func:`group_curves`) vs env steps and vs
    wall time for the runs' groups; returns it with the curves drawn."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    curves = group_curves(run_dirs, metrics)
    fig = Figure(figsize=(11, 4.4))
    FigureCanvasAgg(fig)
    axes = dict(zip(PANELS, fig.subplots(1, 2)))
    unit, seconds_per_unit = time_unit(max(np.nanmax(c.x) for c in curves if c.panel == "wall time"))
    colors: dict[str, str] = {}
    linestyles = dict(zip(dict.fromkeys(c.metric for c in curves), ["-", "--", ":", "-."] * len(curves)))
    for curve in curves:
        ax = axes[curve.panel]
        x = curve.x / seconds_per_unit if curve.panel == "wall time" else curve.x
        style = dict(linestyle=linestyles[curve.metric], markersize=3,
                     marker="o" if len(x) <= MAX_MARKED_POINTS else None)
        every_run = curve.counts == len(curve.runs)
        (line,) = ax.plot(x, np.where(every_run, curve.center, np.nan), label=curve.label,
                          color=colors.get(curve.group), **style)
        colors[curve.group] = line.get_color()
        if not every_run.all():  # the IQM of only some of the runs: faint
            ax.plot(x, curve.center, color=line.get_color(), alpha=0.35, linewidth=1, **style)
        band = np.isfinite(curve.low)
        if band.any():
            ax.fill_between(x, curve.low, curve.high, where=band, color=line.get_color(), alpha=0.2, linewidth=0)
    returns_only = all(c.metric.endswith("episode_return") for c in curves)
    ylabel = "episode return" if returns_only else ", ".join(dict.fromkeys(c.metric for c in curves))
    for panel, ax in axes.items():
        ax.set_xlabel("env steps" if panel == "env steps" else f"wall time [{unit}] since each run's start")
        ax.set_ylabel(ylabel)
        ax.set_xlim(left=0)  # env steps and wall time both start at 0: how soon, not only how far
        ax.grid(alpha=0.3)
    axes["env steps"].xaxis.set_major_formatter(FuncFormatter(short_count))
    handles, labels = axes["env steps"].get_legend_handles_labels()
    ncols = 1 if max(map(len, labels)) > 60 else 2 if len(linestyles) > 1 else 3
    ncols = min(ncols, len(labels))
    rows = -(-len(labels) // ncols)
    # margins from the drawn tick labels and axis labels (a return of -12345 is wider than one
    # of 500: fixed margins cut the y label), the legend's rows kept free below the panels
    fig.tight_layout(rect=(0, 0.02 + 0.055 * rows, 1, 1), w_pad=2.0)
    fig.legend(handles, labels, loc="lower center", fontsize="small", frameon=False, ncols=ncols)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, dpi=100)
    return Plot(out_path, fig, curves)

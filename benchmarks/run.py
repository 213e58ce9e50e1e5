"""Runs a named benchmark set and writes a Markdown table, a JSON file and a plot.

Usage::

    python benchmarks/run.py configs|smoke|cpu|host|full [--only SUBSTRING] [--seeds 100,101] [--out DIR]

For every entry of the set (``benchmarks/suites.py``) the config is loaded from
``configs/``, the overrides applied, and the workflow built and compiled once; each seed
then trains from ``PRNGKey(seed)`` with the same compiled program. Reported per entry:
env steps, wall time (training only, mean over seeds), compile time, steps/s, and the
final greedy evaluation return (mean and std over seeds of each seed's mean return), each
seed's final return, and where the entry has a target, the env steps and training seconds
at which each seed's periodic evaluation first reached it.

**Held-out seeds.** The ``configs`` set trains every config on seeds no config was tuned on
(:data:`suites.HELD_OUT_SEEDS`, 100-104; ``--seeds`` picks others). A seed passes when its
final greedy return reaches the target **and** it did not collapse: with the score
normalised between a random policy (0) and the target (1),
:math:`s = (R - R_{random}) / (R_{target} - R_{random})`, a run whose final score is below
0.9 x its best score (over the periodic evaluations and the final one) has collapsed, even
when its best met the target; and a passing seed's periodic evaluation first reached the
target within 70% of the run's env steps (:data:`MARGIN_FRACTION`: a config that gets there
only at its last evaluations is tuned to the edge). An entry passes when at least 80% of its
seeds pass (4 of 5).
``R_random`` is measured: the untrained policy's return with sampled actions (near-uniform
for a discrete policy). With ``rliable`` installed (``pip install -e ".[bench]"``) the
normalised final scores of the whole set are aggregated into the interquartile mean (IQM)
with a 95% stratified bootstrap interval (Agarwal et al., 2021) and drawn in one figure.

**Data.** Every evaluation of every seed is appended as one JSON line to
``benchmarks/results/<set>.jsonl`` (``--data`` picks another file; the ``smoke`` set, a build
check, writes none unless asked): the entry, its overrides,
env, algorithm, seed, env steps and training seconds at that evaluation, the greedy return's
mean over the evaluation episodes with their count and standard error, target, random return,
the commit, the machine (platform, CPUs, JAX backend, load) and the training settings.
``python benchmarks/render_results.py`` renders ``docs/results.md`` from those files.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from suites import COMPOSED, SUITES, Benchmark  # noqa: E402

#: A run whose final normalised score is below this fraction of its best one has collapsed.
COLLAPSE_FRACTION = 0.9
#: The share of an entry's seeds that must pass (4 of 5).
REQUIRED_SEED_FRACTION = 0.8
#: A passing seed's periodic evaluation first reached the target within this share of the
#: run's env steps (a config that gets there only at its last evaluations is tuned to the edge).
MARGIN_FRACTION = 0.7


@dataclass
class Result:
    name: str
    env: str
    algorithm: str
    env_steps: int
    seeds: int
    wall_s: float  # training time per seed, excluding compilation
    compile_s: float
    steps_per_s: float
    eval_return_mean: float
    eval_return_std: float
    target: float | None
    per_seed: list[float]
    #: Per seed: (env steps, training seconds) of the first evaluation >= target, or None.
    first_reached: list[tuple[int, float] | None]
    #: Per seed: the best greedy return over the periodic evaluations and the final one.
    best_per_seed: list[float] | None = None
    #: The untrained policy's return with sampled actions (the score's 0), or None.
    random_return: float | None = None
    #: The seeds trained (their PRNGKey).
    seed_list: list[int] | None = None

    def scores(self, returns: list[float]) -> list[float] | None:
        """``returns`` normalised: 0 at the random policy's return, 1 at the target."""
        if self.target is None or self.random_return is None or self.target == self.random_return:
            return None
        return [(r - self.random_return) / (self.target - self.random_return) for r in returns]

    @property
    def collapsed(self) -> list[bool]:
        """Per seed: the final score is below ``COLLAPSE_FRACTION`` x the best score."""
        final, best = self.scores(self.per_seed), self.scores(self.best_per_seed or self.per_seed)
        if final is None:
            return [False] * len(self.per_seed)
        return [b > 0 and f < COLLAPSE_FRACTION * b for f, b in zip(final, best)]

    @property
    def late(self) -> list[bool]:
        """Per seed: no periodic evaluation reached the target within ``MARGIN_FRACTION`` of
        the env steps (never, or only later)."""
        return [x is None or x[0] > MARGIN_FRACTION * self.env_steps for x in self.first_reached]

    @property
    def passed(self) -> list[bool]:
        """Per seed: the final return reached the target, the run did not collapse, and it
        first reached the target with margin (not :attr:`late`)."""
        return [r >= self.target and not c and not late
                for r, c, late in zip(self.per_seed, self.collapsed, self.late)]

    @property
    def met(self) -> str:
        """``"4/5"``: how many seeds passed (see :attr:`passed`; "" without a target)."""
        if self.target is None:
            return ""
        return f"{sum(self.passed)}/{len(self.per_seed)}"

    @property
    def ok(self) -> bool:
        """At least ``REQUIRED_SEED_FRACTION`` of the seeds passed (True without a target)."""
        return self.target is None or sum(self.passed) >= REQUIRED_SEED_FRACTION * len(self.per_seed) - 1e-9


def load_config(name: str, overrides: dict, groups: dict[str, str] | None = None) -> dict:
    """``configs/<name>.yaml`` as a plain dict (Hydra's ``defaults`` dropped), overridden.
    The composed default config (``name == "config"``) is composed from ``groups``
    (``{"algo": "a2c", "env": "acrobot"}``) as ``evorl-train algo=a2c env=acrobot`` composes it."""
    from omegaconf import OmegaConf

    if name == COMPOSED:
        from evorl.app.config_groups import default_choices, default_config, select_algorithm

        choices = {**default_choices(), **(groups or {})}
        cfg, _ = select_algorithm(default_config(choices["algo"], choices["env"]))
    else:
        if groups:
            raise ValueError(f"{name}: config groups apply to the composed config only")
        cfg = OmegaConf.to_container(OmegaConf.load(ROOT / "configs" / f"{name}.yaml"), resolve=True)
        cfg.pop("defaults", None)
    for dotted, value in overrides.items():
        node = cfg
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return cfg


class FirstReached:
    """Recorder: the env steps and training seconds at which the evaluation return first
    reached ``target``, and every periodic evaluation's return (``start()`` before each
    seed's training)."""

    def __init__(self, target: float | None):
        self.target = target
        self.start()

    def start(self) -> None:
        self.reached: tuple[int, float] | None = None
        self.evaluations: list[float] = []
        #: Every periodic evaluation: env steps, training seconds, return mean and std over episodes.
        self.curve: list[tuple[int, float, float, float | None]] = []
        self._t0 = time.perf_counter()

    def init(self, config) -> None:
        pass

    def write(self, metrics: dict[str, float], step: int) -> None:
        value = metrics.get("eval/episode_return")
        if value is not None:
            self.evaluations.append(float(value))
            std = metrics.get("eval/episode_return_std")
            self.curve.append((int(step), time.perf_counter() - self._t0, float(value),
                               None if std is None else float(std)))
        if self.target is not None and self.reached is None and value is not None and value >= self.target:
            self.reached = (int(step), time.perf_counter() - self._t0)

    def close(self) -> None:
        pass


def random_return(cfg: dict, workflow_cls, seeds: tuple[int, ...]) -> float:
    """The untrained policy's mean return with sampled actions over ``seeds``' initial
    states: the "random" end of the normalised score. A workflow without sampled evaluation
    (ES: its policy is the deterministic mean parameters) evaluates its initial policy."""
    import copy

    import jax
    import numpy as np

    cfg = copy.deepcopy(cfg)
    if hasattr(workflow_cls.parse_config(cfg).training, "eval_deterministic"):
        cfg.setdefault("training", {})["eval_deterministic"] = False
    workflow = workflow_cls.build_from_config(cfg, recorders=[])
    return float(np.mean([workflow.evaluate(workflow.init(jax.random.PRNGKey(s)))["eval/episode_return"]
                          for s in seeds]))


def commit_hash() -> str | None:
    """The checkout's commit (``+dirty`` with uncommitted changes to tracked files), or None."""
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def machine() -> dict:
    """Where a measurement ran: platform, CPU count, JAX backend and the 1-minute load."""
    import platform

    import jax

    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "jax_backend": jax.default_backend(), "jax": jax.__version__,
            "load_1min": round(os.getloadavg()[0], 2)}


def settings(cfg: dict) -> dict:
    """The settings a reader compares runs by: the workflow and every scalar training key."""
    training = {k: v for k, v in cfg.get("training", {}).items() if isinstance(v, (int, float, str, bool))}
    return {"workflow_cls": cfg.get("workflow_cls"), "training": training}


def evaluation_records(bench: Benchmark, result_fields: dict, seed: int, curve: list, final: tuple) -> list[dict]:
    """One JSON-ready record per evaluation of one seed: the periodic ones, then the final one
    (``"final": true``). ``curve`` and ``final`` hold ``(env steps, seconds, mean, std)``."""
    records = []
    for (steps, wall, mean, std), is_final in [*((c, False) for c in curve), (final, True)]:
        episodes = result_fields["eval_episodes"]
        records.append({
            "kind": "evaluation", "config": bench.config, "name": bench.name, "groups": bench.groups,
            "overrides": bench.overrides, "seed": seed, "env_steps": steps, "wall_s": round(wall, 3),
            "return_mean": mean, "return_std": std, "eval_episodes": episodes,
            "return_stderr": None if std is None or not episodes else std / episodes ** 0.5,
            "final": is_final, **{k: v for k, v in result_fields.items() if k != "eval_episodes"},
        })
    return records


def append_records(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        for record in records:
            f.write(json.dumps(record, sort_keys=True) + "\n")


def run_benchmark(bench: Benchmark, seeds: tuple[int, ...], data: Path | None = None,
                  suite: str | None = None) -> Result:
    import jax
    import numpy as np

    from evorl.engine.recording import ConsoleRecorder
    from evorl.workflows import resolve_workflow_cls

    def say(text: str) -> None:  # a start that builds envs and compiles is minutes on a brax config
        print(f"[{bench.name}] {text}", flush=True)

    cfg = load_config(bench.config, bench.overrides, bench.groups)
    workflow_cls = resolve_workflow_cls(cfg["workflow_cls"])
    first = FirstReached(bench.target)
    random_score = None
    if bench.target is not None:
        say("the untrained policy's return (the normalised score's zero): building the env, compiling an evaluation ...")
        started = time.perf_counter()
        random_score = random_return(cfg, workflow_cls, seeds)
        say(f"the untrained policy's return: {random_score:.4g} ({time.perf_counter() - started:.1f}s)")
    say("building the env and the agent ...")
    workflow = workflow_cls.build_from_config(
        cfg, recorders=[ConsoleRecorder(prefix=f"[{bench.name}] "), first]
    )
    tc = workflow.config.training
    env_steps = tc.num_iterations * workflow.env_steps_per_iteration  # ES: the most a generation steps
    fields = {
        "suite": suite, "env": f"{workflow.config.env.env_type}/{workflow.config.env.env_name}",
        "algorithm": workflow.name(), "budget_env_steps": env_steps, "target": bench.target,
        "random_return": random_score, "eval_episodes": getattr(tc, "eval_episodes", None),
        "commit": commit_hash(), "settings": settings(cfg),
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    returns, bests, walls, reached, compile_s = [], [], [], [], None
    for seed in seeds:
        say(f"seed {seed}: starting")
        state = workflow.init(jax.random.PRNGKey(seed))
        if compile_s is None:  # the training chunk, plus the evaluation's first (compiling) call
            say("compiling the training step and the evaluation ...")
            start = time.perf_counter()
            workflow.compile(state)
            workflow.evaluate(state)
            compile_s = time.perf_counter() - start
            print(f"[{bench.name}] compiled in {compile_s:.1f}s", flush=True)
        start = time.perf_counter()
        first.start()
        state = workflow.learn(state)
        jax.block_until_ready(state)
        walls.append(time.perf_counter() - start)
        reached.append(first.reached)
        final = workflow.evaluate(state)
        returns.append(final["eval/episode_return"])
        bests.append(max([returns[-1], *first.evaluations]))
        if data is not None:
            std = final.get("eval/episode_return_std")
            append_records(data, evaluation_records(
                bench, {**fields, "machine": machine()}, seed, first.curve,
                (env_steps, walls[-1], float(returns[-1]), None if std is None else float(std))))
        print(f"[{bench.name}] seed {seed}: eval return {returns[-1]:.2f} (best {bests[-1]:.2f}) "
              f"in {walls[-1]:.1f}s", flush=True)
    return Result(
        name=bench.name,
        env=f"{workflow.config.env.env_type}/{workflow.config.env.env_name}",
        algorithm=workflow.name(),
        env_steps=env_steps,
        seeds=len(seeds),
        wall_s=float(np.mean(walls)),
        compile_s=compile_s,
        steps_per_s=env_steps / float(np.mean(walls)),  # periodic evaluations included
        eval_return_mean=float(np.mean(returns)),
        eval_return_std=float(np.std(returns)),
        target=bench.target,
        per_seed=[float(r) for r in returns],
        first_reached=reached,
        best_per_seed=[float(r) for r in bests],
        random_return=random_score,
        seed_list=list(seeds),
    )


def markdown_table(results: list[Result], title: str) -> str:
    lines = [
        f"## {title}",
        "",
        "| config | env | algorithm | env steps | seeds | wall time (s) | compile (s) | steps/s "
        "| eval return (mean ± std) | final per seed | best per seed | collapsed | random | target "
        "| seeds passed | target first reached (per seed) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|:-:|---:|---:|:-:|---|",
    ]
    for r in results:
        target = "" if r.target is None else f"{r.target:g}"
        per_seed = ", ".join(f"{x:.1f}" for x in r.per_seed)
        best = ", ".join(f"{x:.1f}" for x in (r.best_per_seed or r.per_seed))
        collapsed = ", ".join("yes" if c else "no" for c in r.collapsed) if r.target is not None else ""
        random = "" if r.random_return is None else f"{r.random_return:.1f}"
        lines.append(
            f"| {r.name} | {r.env} | {r.algorithm} | {r.env_steps:,} | {r.seeds} | {r.wall_s:.0f} | {r.compile_s:.0f} "
            f"| {r.steps_per_s:,.0f} | {r.eval_return_mean:.1f} ± {r.eval_return_std:.1f} | {per_seed} | {best} "
            f"| {collapsed} | {random} | {target} | {r.met} | {first_reached_text(r)} |"
        )
    return "\n".join(lines) + "\n"


def first_reached_text(r: Result) -> str:
    """``"0.60M steps (59%) / 31 s; 12.8k steps (40%) / 95 s; never"``: per seed, the first
    evaluation at or above the target, with its share of the run's env steps."""
    if r.target is None:
        return ""

    def steps(n: int) -> str:
        return f"{n / 1e6:.2f}M" if n >= 100_000 else f"{n / 1e3:.1f}k"

    return "; ".join("never" if x is None else f"{steps(x[0])} steps ({x[0] / r.env_steps:.0%}) / {x[1]:.0f} s"
                     for x in r.first_reached)


def score_matrix(results: list[Result]) -> tuple[list[str], "np.ndarray"] | None:
    """The normalised final scores ``[seeds, entries]`` of the entries that have a target
    and a random return, and their names; None when fewer than one entry or unequal seeds."""
    import numpy as np

    scored = [(r.name, r.scores(r.per_seed)) for r in results]
    scored = [(n, s) for n, s in scored if s is not None]
    if not scored or len({len(s) for _, s in scored}) != 1:
        return None
    return [n for n, _ in scored], np.asarray([s for _, s in scored]).T


def aggregate(results: list[Result], reps: int = 2000) -> tuple[float, float, float] | str:
    """The IQM of the normalised final scores over every (entry, seed) with its 95%
    stratified bootstrap interval, by rliable; a sentence saying why not otherwise."""
    matrix = score_matrix(results)
    if matrix is None:
        return "no aggregate: no entry with a target and a random return, or entries with unequal seed counts"
    try:
        import numpy as np
        from rliable import library as rly
        from rliable import metrics as rly_metrics
    except ImportError as e:
        return f"no aggregate: rliable is not installed (pip install -e \".[bench]\"): {e}"
    _, scores = matrix
    point, interval = rly.get_interval_estimates(
        {"evorl": scores}, lambda x: np.array([rly_metrics.aggregate_iqm(x)]), reps=reps
    )
    return float(point["evorl"][0]), float(interval["evorl"][0, 0]), float(interval["evorl"][1, 0])


def aggregate_text(agg: tuple[float, float, float] | str, results: list[Result]) -> str:
    if isinstance(agg, str):
        return f"\n{agg}\n"
    passed = sum(r.ok for r in results if r.target is not None)
    with_target = sum(r.target is not None for r in results)
    return (f"\nAggregate over {with_target} configs x their seeds (rliable): IQM of the normalised final "
            f"score (0: random policy, 1: target) **{agg[0]:.3f}**, 95% stratified bootstrap interval "
            f"[{agg[1]:.3f}, {agg[2]:.3f}]; configs passing (>= {REQUIRED_SEED_FRACTION:.0%} of seeds at "
            f"target, no collapse): {passed}/{with_target}.\n")


def plot(results: list[Result], path: Path, agg: tuple[float, float, float] | str | None = None) -> bool:
    """One figure for the set: each entry's normalised final score per seed (hollow: the
    seed failed; the line at 1 is the target), the aggregate IQM with its interval, and
    steps/s. Entries without a target show their raw returns' mean instead."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        print("matplotlib not installed: no plot written.")
        return False
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.45 * len(results) + 2.5), gridspec_kw={"width_ratios": [2, 1]})
    labels = [f"{r.name}" for r in results]
    for i, r in enumerate(results):
        scores = r.scores(r.per_seed)
        if scores is None:
            continue
        for score, ok in zip(scores, r.passed):
            axes[0].plot(min(max(score, -0.5), 1.5), i, "o", color="tab:blue", mfc="tab:blue" if ok else "none")
    if not isinstance(agg, (str, type(None))):
        n = len(results)
        axes[0].errorbar([agg[0]], [n], xerr=[[agg[0] - agg[1]], [agg[2] - agg[0]]], fmt="s", color="black", capsize=4)
        labels = labels + ["IQM (95% CI)"]
    axes[0].axvline(1.0, color="tab:red", lw=1)
    axes[0].axvline(0.0, color="grey", lw=1)
    axes[0].set(yticks=list(range(len(labels))), yticklabels=labels, xlim=(-0.55, 1.55),
                xlabel="normalised final score per seed (0: random, 1: target; hollow: failed or collapsed)")
    y = range(len(results))
    axes[1].barh(y, [r.steps_per_s for r in results])
    axes[1].set(yticks=list(y), yticklabels=[], xlabel="env steps / s", xscale="log")
    axes[1].xaxis.set_major_formatter(matplotlib.ticker.EngFormatter())
    axes[1].xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes[1].set_ylim(axes[0].get_ylim())
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suite", choices=sorted(SUITES))
    parser.add_argument("--only", default="", help="run only the entry of this name, or else those whose name contains this")
    parser.add_argument("--seeds", default="", help="comma-separated seeds (default: the set's; configs: 100-104, "
                                                      "never used for tuning)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--data", default="", help="the JSON-lines file every evaluation is appended to "
                                                     "(default: benchmarks/results/<set>.jsonl, none for smoke; 'none': no data)")
    args = parser.parse_args(argv)
    default = None if args.suite == "smoke" else ROOT / "benchmarks" / "results" / f"{args.suite}.jsonl"  # smoke: a build check
    data = None if args.data == "none" else Path(args.data) if args.data else default
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)

    entries = [b for b in SUITES[args.suite] if args.only == b.name]  # a whole name: that entry alone
    entries = entries or [b for b in SUITES[args.suite] if args.only in b.name]
    results, failures = [], []
    start = time.perf_counter()
    for bench in entries:
        seeds = tuple(int(s) for s in args.seeds.split(",")) if args.seeds else bench.seeds
        try:
            results.append(run_benchmark(bench, seeds, data, args.suite))
        except Exception as e:  # one broken entry must not lose the others' figures
            failures.append(f"{bench.name}: {type(e).__name__}: {e}")
            print(f"FAIL {failures[-1]}", flush=True)
    total = time.perf_counter() - start

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    title = f"Benchmark set '{args.suite}' ({total / 60:.1f} min total, {os.cpu_count()} CPUs)"
    table = markdown_table(results, title)
    agg = aggregate(results)
    table += aggregate_text(agg, results)
    missed = [f"{r.name}: {r.met} seeds passed {r.target:g} without collapse (final "
              f"{', '.join(f'{x:.1f}' for x in r.per_seed)}; best {', '.join(f'{x:.1f}' for x in r.best_per_seed)})"
              for r in results if not r.ok]
    if failures:
        table += "\nFailed entries (exit status 1):\n\n" + "".join(f"* {f}\n" for f in failures)
    if missed:
        table += "\nTargets missed (exit status 1):\n\n" + "".join(f"* {m}\n" for m in missed)
    (out / f"{args.suite}.md").write_text(table)
    (out / f"{args.suite}.json").write_text(json.dumps([asdict(r) for r in results], indent=1))
    plotted = plot(results, out / f"{args.suite}.png", agg) if results else False
    print("\n" + table)
    print(f"wrote {out / args.suite}.md, .json{', .png' if plotted else ''}"
          f"{'' if data is None else f'; appended every evaluation to {data}'}")
    return 1 if failures or missed else 0


if __name__ == "__main__":
    sys.exit(main())

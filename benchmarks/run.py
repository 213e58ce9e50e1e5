"""Runs a named benchmark set and writes a Markdown table, a JSON file and a plot.

Usage::

    python benchmarks/run.py smoke|cpu|full [--only SUBSTRING] [--seeds 0,1] [--out DIR]

For every entry of the set (``benchmarks/suites.py``) the config is loaded from
``configs/``, the overrides applied, and the workflow built and compiled once; each seed
then trains from ``PRNGKey(seed)`` with the same compiled program. Reported per entry:
env steps, wall time (training only, mean over seeds), compile time, steps/s, and the
final greedy evaluation return (mean and std over seeds of each seed's mean return), each
seed's final return, and where the entry has a target, the env steps and training seconds
at which each seed's periodic evaluation first reached it.
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

    @property
    def met(self) -> str:
        """``"3/3"``: how many seeds' final return reached the target ("" without one)."""
        if self.target is None:
            return ""
        return f"{sum(r >= self.target for r in self.per_seed)}/{len(self.per_seed)}"


def load_config(name: str, overrides: dict, groups: dict[str, str] | None = None) -> dict:
    """``configs/<name>.yaml`` as a plain dict (Hydra's ``defaults`` dropped), overridden.
    The composed default config (``name == "config"``) is composed from ``groups``
    (``{"algo": "a2c", "env": "acrobot"}``) as ``evorl-train algo=a2c env=acrobot`` composes it."""
    from omegaconf import OmegaConf

    if name == COMPOSED:
        from evorl.config_groups import default_choices, default_config, select_algorithm

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
    reached ``target`` (``start()`` before each seed's training)."""

    def __init__(self, target: float | None):
        self.target = target
        self.start()

    def start(self) -> None:
        self.reached: tuple[int, float] | None = None
        self._t0 = time.perf_counter()

    def init(self, config) -> None:
        pass

    def write(self, metrics: dict[str, float], step: int) -> None:
        value = metrics.get("eval/episode_return")
        if self.target is not None and self.reached is None and value is not None and value >= self.target:
            self.reached = (int(step), time.perf_counter() - self._t0)

    def close(self) -> None:
        pass


def run_benchmark(bench: Benchmark, seeds: tuple[int, ...]) -> Result:
    import jax
    import numpy as np

    from evorl.recorders import ConsoleRecorder
    from evorl.workflows import resolve_workflow_cls

    cfg = load_config(bench.config, bench.overrides, bench.groups)
    workflow_cls = resolve_workflow_cls(cfg["workflow_cls"])
    first = FirstReached(bench.target)
    workflow = workflow_cls.build_from_config(
        cfg, recorders=[ConsoleRecorder(prefix=f"[{bench.name}] "), first]
    )
    returns, walls, reached, compile_s = [], [], [], None
    for seed in seeds:
        state = workflow.init(jax.random.PRNGKey(seed))
        if compile_s is None:  # the training chunk, plus the evaluation's first (compiling) call
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
        returns.append(workflow.evaluate(state)["eval/episode_return"])
        print(f"[{bench.name}] seed {seed}: eval return {returns[-1]:.2f} in {walls[-1]:.1f}s", flush=True)
    tc = workflow.config.training
    env_steps = tc.num_iterations * workflow.env_steps_per_iteration  # ES: the most a generation steps
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
    )


def markdown_table(results: list[Result], title: str) -> str:
    lines = [
        f"## {title}",
        "",
        "| config | env | algorithm | env steps | seeds | wall time (s) | compile (s) | steps/s "
        "| eval return (mean ± std) | per seed | target | seeds at target | target first reached (per seed) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|:-:|---|",
    ]
    for r in results:
        target = "" if r.target is None else f"{r.target:g}"
        per_seed = ", ".join(f"{x:.1f}" for x in r.per_seed)
        lines.append(
            f"| {r.name} | {r.env} | {r.algorithm} | {r.env_steps:,} | {r.seeds} | {r.wall_s:.0f} | {r.compile_s:.0f} "
            f"| {r.steps_per_s:,.0f} | {r.eval_return_mean:.1f} ± {r.eval_return_std:.1f} | {per_seed} "
            f"| {target} | {r.met} | {first_reached_text(r)} |"
        )
    return "\n".join(lines) + "\n"


def first_reached_text(r: Result) -> str:
    """``"0.6M steps / 31 s; never"``: per seed, the first evaluation at or above the target."""
    if r.target is None:
        return ""
    return "; ".join("never" if x is None else f"{x[0] / 1e6:.2f}M steps / {x[1]:.0f} s" for x in r.first_reached)


def plot(results: list[Result], path: Path) -> bool:
    """Bar charts: final evaluation return per entry (red tick: its target) and steps/s."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot written.")
        return False
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.5 * len(results) + 2))
    labels = [f"{r.algorithm} {r.env}" for r in results]
    y = range(len(results))
    axes[0].barh(y, [r.eval_return_mean for r in results], xerr=[r.eval_return_std for r in results])
    for i, r in enumerate(results):
        if r.target is not None:
            axes[0].plot([r.target, r.target], [i - 0.4, i + 0.4], "r-", lw=2)
    axes[0].set(yticks=list(y), yticklabels=labels, xlabel="final eval return (red: target)")
    axes[1].barh(y, [r.steps_per_s for r in results])
    axes[1].set(yticks=list(y), yticklabels=[], xlabel="env steps / s", xscale="log")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suite", choices=sorted(SUITES))
    parser.add_argument("--only", default="", help="run only entries whose name contains this")
    parser.add_argument("--seeds", default="", help="comma-separated seeds (default: the suite's)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args(argv)
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)

    entries = [b for b in SUITES[args.suite] if args.only in b.name]
    results, failures = [], []
    start = time.perf_counter()
    for bench in entries:
        seeds = tuple(int(s) for s in args.seeds.split(",")) if args.seeds else bench.seeds
        try:
            results.append(run_benchmark(bench, seeds))
        except Exception as e:  # one broken entry must not lose the others' figures
            failures.append(f"{bench.name}: {type(e).__name__}: {e}")
            print(f"FAIL {failures[-1]}", flush=True)
    total = time.perf_counter() - start

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    title = f"Benchmark set '{args.suite}' ({total / 60:.1f} min total, {os.cpu_count()} CPUs)"
    table = markdown_table(results, title)
    missed = [f"{r.name}: {r.met} seeds reached {r.target:g} ({', '.join(f'{x:.1f}' for x in r.per_seed)})"
              for r in results if r.target is not None and not all(x >= r.target for x in r.per_seed)]
    if failures:
        table += "\nFailed entries (exit status 1):\n\n" + "".join(f"* {f}\n" for f in failures)
    if missed:
        table += "\nTargets missed (exit status 1):\n\n" + "".join(f"* {m}\n" for m in missed)
    (out / f"{args.suite}.md").write_text(table)
    (out / f"{args.suite}.json").write_text(json.dumps([asdict(r) for r in results], indent=1))
    plotted = plot(results, out / f"{args.suite}.png") if results else False
    print("\n" + table)
    print(f"wrote {out / args.suite}.md, .json{', .png' if plotted else ''}")
    return 1 if failures or missed else 0


if __name__ == "__main__":
    sys.exit(main())

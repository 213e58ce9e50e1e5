"""The default job from a cold start: ``python scripts/train.py`` with no compilation cache.

Prints the wall time of the whole command (fresh processes, ``EVORL_COMPILATION_CACHE=off``,
a new run folder each time) and, from one more fresh process that runs the same job through
:func:`evorl.app.cli.train`, where that time goes:

* imports: jax, Hydra and evorl;
* config: Hydra composing ``configs/config.yaml``;
* build: the workflow (env, agent, optimiser) from the config;
* init: the initial state; compile: the training chunk, ahead of time;
* training: the chunks of iterations and the host loop around them;
* evaluation: every evaluation of the run (its first call compiles the evaluator);
* writing: the metrics at each logging point and the checkpoints;
* the run folder's other files, the plot and the rest of ``run_experiment``;
* the rest of the process: interpreter start and exit.

    python benchmarks/cold_start.py [--repeats 3] [--overrides key=value ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLD = {**os.environ, "EVORL_COMPILATION_CACHE": "off"}


def whole_command(run_dir: Path, overrides: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, str(ROOT / "scripts" / "train.py"), f"hydra.run.dir={run_dir}", *overrides],
                   env=COLD, check=True, capture_output=True, text=True)
    return time.perf_counter() - start


def split(run_dir: str, overrides: list[str]) -> dict:
    """Runs in its own process: the job through ``run_experiment`` with each phase timed
    (exclusive times: a phase inside another is not counted twice)."""
    t0 = time.perf_counter()
    import jax  # noqa: F401
    from hydra import compose, initialize_config_dir

    from evorl.app import cli, experiment
    from evorl.app.checkpoint import Checkpointer
    from evorl.engine.rl_base import RLWorkflow
    from evorl.engine.on_policy_workflow import OnPolicyWorkflow

    t_imports = time.perf_counter() - t0
    spans = {"build": 0.0, "init": 0.0, "compile": 0.0, "training": 0.0, "evaluation": 0.0, "writing": 0.0}
    open_spans: list[float] = []  # time of the children of each open span

    def timed(owner, name, span):
        owner = next(c for c in owner.__mro__ if name in c.__dict__)  # the class that defines it
        attribute = owner.__dict__[name]
        is_classmethod = isinstance(attribute, classmethod)
        original = attribute.__func__ if is_classmethod else attribute

        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            open_spans.append(0.0)
            try:
                return original(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                spans[span] += elapsed - open_spans.pop()
                if open_spans:
                    open_spans[-1] += elapsed

        setattr(owner, name, classmethod(wrapper) if is_classmethod else wrapper)  # this process only

    timed(RLWorkflow, "build_from_config", "build")
    timed(OnPolicyWorkflow, "init", "init")
    timed(OnPolicyWorkflow, "compile", "compile")
    timed(OnPolicyWorkflow, "learn", "training")  # the host loop and its chunks, less what is below
    timed(OnPolicyWorkflow, "evaluate", "evaluation")
    timed(RLWorkflow, "write_metrics", "writing")
    timed(Checkpointer, "maybe_save", "writing")
    timed(Checkpointer, "save", "writing")

    t1 = time.perf_counter()
    with initialize_config_dir(config_dir=cli.CONFIG_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=list(overrides))
    t_config = time.perf_counter() - t1
    t2 = time.perf_counter()
    result = experiment.run_experiment(cfg, output_dir=run_dir, defaults=False)
    t_run = time.perf_counter() - t2
    rest = t_run - sum(spans.values())
    return {"imports (jax, Hydra, evorl)": t_imports, "config (Hydra compose)": t_config, **spans,
            "run folder, plot and the rest of run_experiment": rest,
            "final return": result.final_metrics.get("eval/episode_return")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--overrides", nargs="*", default=[])
    parser.add_argument("--split-only", metavar="RUN_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.split_only:
        print(json.dumps(split(args.split_only, args.overrides)))
        return

    with tempfile.TemporaryDirectory() as tmp:
        walls = [whole_command(Path(tmp) / f"run{i}", args.overrides) for i in range(args.repeats)]
        start = time.perf_counter()
        out = subprocess.run([sys.executable, __file__, "--split-only", str(Path(tmp) / "split"),
                              "--overrides", *args.overrides], env=COLD, check=True, capture_output=True, text=True)
        process_s = time.perf_counter() - start
    parts = json.loads(out.stdout.strip().splitlines()[-1])
    final = parts.pop("final return")
    print(f"python scripts/train.py {' '.join(args.overrides)} (cold: no compilation cache), {args.repeats} runs: "
          f"{', '.join(f'{w:.2f}' for w in walls)} s; median {statistics.median(walls):.2f} s")
    print(f"\nwhere one cold run's time goes (one more process, {process_s:.2f} s in all; final return {final}):")
    print("| part | seconds |\n|---|---:|")
    for name, seconds in parts.items():
        print(f"| {name} | {seconds:.2f} |")
    print(f"| rest of the process (interpreter start and exit) | {process_s - sum(parts.values()):.2f} |")


if __name__ == "__main__":
    main()

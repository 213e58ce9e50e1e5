"""Overhead of the experiment tooling (recorders and checkpoints) on a PPO CartPole-v1 run.

One compiled workflow (the default ``configs/config.yaml`` job: 200 iterations of 4 envs x
128 steps) runs ``learn`` from the same initial state with and without the tooling,
alternating A B A B. "With" means what a CLI run does: console + metrics.jsonl + metrics.csv
(+ TensorBoard with --tensorboard) at every logging point, an orbax checkpoint every
``eval_interval`` iterations (waiting for the last write), and the learning-curve PNG at the
end. Compilation is excluded from both sides (the tooling does not change what is compiled);
the overhead is reported against the wall time of the tooled run. The script also prints the
one-off import cost of the tooling's libraries.

    python benchmarks/tooling_overhead.py [--repeats 3] [--iterations 200] [--eval-interval 50] [--tensorboard]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax

from evorl.app.checkpoint import CheckpointConfig, Checkpointer
from evorl.app.experiment import resolved_config
from evorl.app.plotting import plot_runs
from evorl.app.recorders import LoggingConfig, make_recorders
from evorl.app.run_folder import CURVE_PNG, checkpoint_dir
from evorl.engine.services import RunServices
from evorl.workflows import PPOWorkflow

CONFIG = {
    "agent": {"actor_hidden_layer_sizes": [64, 64], "critic_hidden_layer_sizes": [64, 64], "normalize_obs": False},
    "training": {"num_iterations": 200, "rollout_length": 128, "num_envs": 4, "learning_rate": 2.5e-4,
                 "num_epochs": 4, "num_minibatches": 4, "eval_interval": 50, "eval_episodes": 16},
}


def timed_learn(workflow, recorders_and_checkpointer=None, run_dir=None) -> float:
    state = workflow.init(jax.random.PRNGKey(0))
    jax.block_until_ready(state)
    chain, checkpointer = recorders_and_checkpointer or (None, None)
    workflow = workflow.with_services(RunServices(recorders=(chain,) if chain else (), checkpointer=checkpointer))
    start = time.perf_counter()
    if chain:
        chain.init(resolved_config(workflow.config))
    state = workflow.learn(state)
    jax.block_until_ready(state)
    parts = {"learn": time.perf_counter() - start}
    if chain:  # as evorl.app.experiment does: plot while the last checkpoint is written
        plot_runs([run_dir], run_dir / CURVE_PNG)
        parts["plot"] = time.perf_counter() - start - parts["learn"]
        chain.close()
        checkpointer.close()
        parts["close"] = time.perf_counter() - start - parts["learn"] - parts["plot"]
    print("  " + ", ".join(f"{k} {v:.3f}s" for k, v in parts.items()), file=sys.stderr)
    return time.perf_counter() - start


def tooling(workflow, run_dir: Path, tensorboard: bool):
    names = ("console", "csv", "tensorboard") if tensorboard else ("console", "csv")
    tc = workflow.config.training
    chain = make_recorders(LoggingConfig(recorders=names), run_dir, prefix="[PPO] ",
                           total_steps=tc.num_iterations * tc.env_steps_per_iteration)
    checkpointer = Checkpointer(checkpoint_dir(run_dir), CheckpointConfig(), tc.eval_interval, tc.num_iterations,
                                resolved_config(workflow.config))
    return chain, checkpointer


def import_seconds(modules: str) -> float:
    """Seconds to import ``modules`` in a fresh process that has already imported evorl's core."""
    code = ("import time, evorl.workflows, evorl.app.experiment; t = time.perf_counter(); "
            f"import {modules}; print(time.perf_counter() - t)")
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--eval-interval", type=int, default=50)
    parser.add_argument("--tensorboard", action="store_true")
    args = parser.parse_args()

    cfg = {**CONFIG, "training": {**CONFIG["training"], "eval_interval": args.eval_interval,
                                  "num_iterations": args.iterations}}
    start = time.perf_counter()
    workflow = PPOWorkflow.build_from_config(cfg, recorders=[])
    workflow.compile(workflow.init(jax.random.PRNGKey(0)))
    timed_learn(workflow)  # warm-up: compiles the evaluation too
    workflow.evaluate(workflow.init(jax.random.PRNGKey(0)))
    run_seconds = time.perf_counter() - start  # a whole run without tooling, imports excluded
    bare, tooled = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            bare.append(timed_learn(workflow))
            run_dir = Path(tmp) / f"run{i}"
            with contextlib.redirect_stdout(io.StringIO()):
                tooled.append(timed_learn(workflow, tooling(workflow, run_dir, args.tensorboard), run_dir))
            print(f"repeat {i}: without tooling {bare[-1]:.3f}s, with tooling {tooled[-1]:.3f}s", flush=True)
    b, t = statistics.median(bare), statistics.median(tooled)
    logging_points = -(-cfg["training"]["num_iterations"] // args.eval_interval)
    print(f"PPO CartPole-v1, {cfg['training']['num_iterations']} iterations, {logging_points} logging points and "
          f"checkpoints{' + TensorBoard' if args.tensorboard else ''}:")
    print(f"  learn() median wall time: {b:.3f}s without tooling, {t:.3f}s with -> overhead "
          f"{t - b:+.3f}s = {100 * (t - b) / t:+.1f}% of the compiled training loop")
    print(f"  whole run (build, compile, train, evaluate; imports excluded): {run_seconds:.2f}s without tooling "
          f"-> overhead {100 * (t - b) / (run_seconds + t - b):+.1f}% of the run's wall time")
    print(f"  one-off imports: orbax.checkpoint {import_seconds('orbax.checkpoint'):.2f}s, matplotlib (Agg) "
          f"{import_seconds('matplotlib.figure, matplotlib.backends.backend_agg'):.2f}s, tensorboardX "
          f"{import_seconds('tensorboardX'):.2f}s")


if __name__ == "__main__":
    main()

"""How long SIGTERM takes to stop a shipped config inside a chunk, and whether the state it
checkpoints is the one an uninterrupted run reaches at that iteration (bit for bit).

    python benchmarks/stop_latency.py ppo_minatar_breakout [more configs] [--after 20]

For each config: trains it in a child process (``run_experiment``, as ``evorl-train
--config-name`` does), sends SIGTERM ``--after`` seconds after training started (compilation
done), and measures the seconds until the process has exited, with its checkpoint written.
Then it restores that checkpoint and compares every leaf of the state with a run of the same
config, in this process, for the same number of iterations without a stop. Prints one line
per config: the iteration stopped at (and whether that was inside a chunk), the seconds from
the signal to the exit, and ``identical``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.run import load_config  # noqa: E402


def stop_inside_a_chunk(name: str, run_dir: Path, after: float) -> tuple[int, float]:
    """Trains ``name`` into ``run_dir`` in a child process, SIGTERM ``after`` seconds into
    training; returns the checkpointed iteration and the seconds from the signal to the exit."""
    child = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from benchmarks.run import load_config
        from evorl.app.experiment import run_experiment

        class ShowProgress:
            def init(self, config): pass
            def close(self): pass
            def write(self, metrics, step): pass
            def progress(self, step):
                print("progress", step, flush=True)

        cfg = load_config({name!r}, {{"logging": {{"recorders": [], "plot": False}}}})
        run_experiment(cfg, output_dir={str(run_dir)!r}, recorders=[ShowProgress()])
    """)
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "EVORL_COMPILATION_CACHE": "0"})
    try:
        for line in proc.stdout:
            if line.startswith("progress"):  # the first one: compiled, training starts
                break
        time.sleep(after)
        signalled = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=600)
        waited = time.perf_counter() - signalled
    finally:
        proc.kill()
    stopped = [line for line in err.splitlines() if "training stopped after iteration" in line]
    if not stopped:
        raise SystemExit(f"{name}: no stop line; stderr ends:\n{err[-3000:]}")
    iteration = int(stopped[-1].split("after iteration ")[1].split(";")[0])
    return iteration, waited


def identical_to_uninterrupted(name: str, run_dir: Path, iteration: int) -> bool:
    """The checkpoint of ``run_dir`` at ``iteration`` equals ``iteration`` iterations of the
    same config run without a stop."""
    import jax

    from evorl.app.config_groups import select_algorithm, with_default_config
    from evorl.app.experiment import load_run
    from evorl.workflows import resolve_workflow_cls

    _, restored, at = load_run(run_dir, iteration)
    assert at == iteration, (at, iteration)
    cfg, _ = select_algorithm(with_default_config(load_config(name, {"logging": {"recorders": [], "plot": False}})))
    workflow = resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=[])
    state, _ = workflow.run_iterations(workflow.init(jax.random.PRNGKey(workflow.config.seed)), iteration)
    return all(np.array_equal(np.asarray(a), np.asarray(b))
               for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(state)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="+")
    parser.add_argument("--after", type=float, default=20.0, help="seconds of training before the SIGTERM")
    args = parser.parse_args()
    for name in args.configs:
        eval_interval = load_config(name, {})["training"]["eval_interval"]
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = Path(tmp) / "run"
            iteration, waited = stop_inside_a_chunk(name, run_dir, args.after)
            inside = "inside a chunk" if iteration % eval_interval else "at a chunk's end"
            same = identical_to_uninterrupted(name, run_dir, iteration)
            print(f"{name}: SIGTERM after {args.after:.0f} s of training; stopped at iteration {iteration} "
                  f"({inside}, eval_interval {eval_interval}); exited {waited:.1f} s after the signal with its "
                  f"checkpoint; checkpoint {'identical' if same else 'DIFFERENT'} to an uninterrupted run",
                  flush=True)


if __name__ == "__main__":
    main()

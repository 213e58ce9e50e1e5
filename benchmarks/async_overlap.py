"""Actors and learner overlapping vs lockstep: env steps/s of the same code on a host env.

Runs ``configs/impala_gymnasium_cartpole.yaml`` (IMPALA, gymnasium CartPole-v1 stepped on the
host, 2 actors x 16 envs, 16-step rollouts) for ``--updates`` learner updates twice: with
free-running actors (``runner.lockstep=false``: they step their envs while the learner
computes) and in lockstep (each actor waits for the parameters of every update, so acting
and learning alternate). Each run is a fresh process, alternating A B A B; the timed part
is the learner's updates after compilation. Prints a table and the median ratio.

    python benchmarks/async_overlap.py [--updates 400] [--repeats 3] [--config impala_gymnasium_cartpole]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_one(config: str, lockstep: bool, updates: int, overrides: list[str]) -> dict:
    import jax

    sys.path.insert(0, str(HERE))
    from _common import apply_overrides, build, load_config

    cfg = load_config(config, num_iterations=updates, eval_interval=updates)
    cfg = apply_overrides(cfg, overrides)
    cfg["runner"]["lockstep"] = lockstep
    cfg["logging"] = {"recorders": []}
    workflow = build(cfg, recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    compile_s = workflow.compile(state)
    executor = workflow.executor
    with executor.running(state):
        state, _ = executor.run(state, 2)  # actors' first rollouts compile their policy
        start = time.perf_counter()
        state, metrics = executor.run(state, updates)
        elapsed = time.perf_counter() - start
        actors = executor.host_metrics()
    steps = updates * workflow.config.training.env_steps_per_iteration
    return {"lockstep": lockstep, "compile_s": compile_s, "steps_per_s": steps / elapsed, "seconds": elapsed,
            "lag_mean": actors["actors/policy_lag_mean"], "actor_wait": actors["actors/actor_wait_fraction"],
            "learner_wait": actors["actors/learner_wait_fraction"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--config", default="impala_gymnasium_cartpole")
    parser.add_argument("--set", nargs="*", default=[], metavar="SECTION.KEY=VALUE", help="config overrides")
    parser.add_argument("--one", choices=["async", "lockstep"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.config, args.one == "lockstep", args.updates, args.set)))
        return
    rows = []
    for _ in range(args.repeats):
        for mode in ("async", "lockstep"):
            out = subprocess.run([sys.executable, __file__, "--one", mode, "--updates", str(args.updates),
                                  "--config", args.config, "--set", *args.set], capture_output=True, text=True,
                                 check=True)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{args.config} {' '.join(args.set)}: {args.updates} learner updates per run, {args.repeats} runs each\n")
    print("| runner | env steps/s | seconds | policy lag (mean) | actors waiting | learner waiting |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {'lockstep' if r['lockstep'] else 'async'} | {r['steps_per_s']:,.0f} | {r['seconds']:.1f} | "
              f"{r['lag_mean']:.2f} | {r['actor_wait']:.0%} | {r['learner_wait']:.0%} |")
    med = {m: statistics.median(r["steps_per_s"] for r in rows if r["lockstep"] == (m == "lockstep"))
           for m in ("async", "lockstep")}
    print(f"\nmedian env steps/s: async {med['async']:,.0f}, lockstep {med['lockstep']:,.0f}; "
          f"async / lockstep = {med['async'] / med['lockstep']:.2f}x")


if __name__ == "__main__":
    main()

"""Aggregate throughput of N off-policy agents trained in one program (``training.num_seeds``).

SAC (or TD3) on gymnax Pendulum-v1 with the ``configs/algo/<algo>.yaml`` settings (one env,
one env step and one gradient step per iteration, batch 256, [256, 256] networks). For each N,
a fresh process builds the population, compiles it (timed), fills the buffers past
``learning_starts`` (not timed), runs ``--iterations`` learning iterations and prints the
aggregate env steps/s and gradient steps/s over all agents, then a table.

    python benchmarks/offpolicy_seeds_throughput.py [--algo sac] [--seeds 1 4 16] [--iterations 500]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def run(algo: str, num_seeds: int, iterations: int) -> dict:
    import jax
    from omegaconf import OmegaConf

    from _common import CONFIGS, build

    cfg = OmegaConf.to_container(OmegaConf.load(CONFIGS / "algo" / f"{algo}.yaml"))
    cfg["env"] = {"env_name": "Pendulum-v1", "env_type": "gymnax"}
    cfg["training"].update(num_seeds=num_seeds, learning_starts=256, warmup_steps=256, buffer_size=100_000)
    workflow = build(cfg, recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    compile_s = workflow.compile(state)
    state, _ = workflow.run_iterations(state, 300)  # past learning_starts: every timed iteration learns
    start = time.perf_counter()
    state, metrics = workflow.run_iterations(state, iterations)
    jax.block_until_ready(state)
    run_s = time.perf_counter() - start
    tc = workflow.config.training
    env_steps = num_seeds * iterations * tc.num_envs * tc.rollout_length
    return {"algo": algo, "num_seeds": num_seeds, "compile_s": round(compile_s, 1),
            "env_steps_per_s": round(env_steps / run_s, 1),
            "gradient_steps_per_s": round(num_seeds * iterations * tc.num_updates / run_s, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", default="sac", choices=("sac", "td3"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # run one N in this process
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(run(args.algo, args.one, args.iterations)))
        return
    rows = []
    for n in args.seeds:
        out = subprocess.run([sys.executable, __file__, "--algo", args.algo, "--one", str(n),
                              "--iterations", str(args.iterations)], capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    base = rows[0]["gradient_steps_per_s"] / rows[0]["num_seeds"]
    print(f"\n{'seeds':>6} {'compile s':>10} {'env steps/s':>12} {'grad steps/s':>13} {'x one agent':>12}")
    for r in rows:
        print(f"{r['num_seeds']:>6} {r['compile_s']:>10} {r['env_steps_per_s']:>12} {r['gradient_steps_per_s']:>13} "
              f"{r['gradient_steps_per_s'] / base:>12.2f}")


if __name__ == "__main__":
    main()

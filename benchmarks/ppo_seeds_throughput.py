"""Aggregate throughput of N PPO agents trained in one program (``training.num_seeds``).

PPO on CartPole-v1 with the throughput benchmark's hyperparameters (4 envs x 128 steps,
4 epochs x 4 minibatches, [64, 64] tanh). For each N, a fresh process builds the
population, compiles it (timed), runs ``--iterations`` iterations and prints the aggregate
env steps/s over all agents, then a table.

    python benchmarks/ppo_seeds_throughput.py [--seeds 1 4 16 64] [--iterations 50]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def run(num_seeds: int, iterations: int) -> dict:
    import jax

    from evorl.workflows import PPOWorkflow

    workflow = PPOWorkflow.build_from_config({
        "env": {"env_name": "CartPole-v1", "env_type": "gymnax"},
        "training": {"num_seeds": num_seeds, "num_envs": 4, "rollout_length": 128, "num_epochs": 4,
                     "num_minibatches": 4, "learning_rate": 2.5e-4, "num_iterations": 976},
    }, recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    compile_s = workflow.compile(state)
    state, _ = workflow.run_iterations(state, 2)  # warm-up
    start = time.perf_counter()
    state, metrics = workflow.run_iterations(state, iterations)
    run_s = time.perf_counter() - start
    steps = num_seeds * iterations * 4 * 128
    return {"num_seeds": num_seeds, "compile_s": compile_s, "steps_per_s": steps / run_s,
            "train_return": metrics["train/episode_return"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run(args.one, args.iterations)))
        return
    rows = []
    for n in args.seeds:
        out = subprocess.run([sys.executable, __file__, "--one", str(n), "--iterations", str(args.iterations)],
                             capture_output=True, text=True, check=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
        print(f"N={n}: {rows[-1]['steps_per_s']:,.0f} env steps/s, compile {rows[-1]['compile_s']:.1f} s", flush=True)
    base = rows[0]["steps_per_s"] / rows[0]["num_seeds"]
    print("\n| agents (num_seeds) | aggregate env steps/s | per agent | vs 1 agent | compile s |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['num_seeds']} | {r['steps_per_s']:,.0f} | {r['steps_per_s'] / r['num_seeds']:,.0f} | "
              f"x{r['steps_per_s'] / base:.2f} | {r['compile_s']:.1f} |")


if __name__ == "__main__":
    main()

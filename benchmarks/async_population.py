"""Populations through the asynchronous actor-learner on a host env (gymnasium CartPole-v1).

1. **PBT over 4 async agents** (``--part pbt``): PPO, 4 agents in one process, 2 actor threads
   each stepping its share of every agent's environments (8 envs x 32 steps per agent, 4 epochs
   x 4 minibatches, [64, 64] tanh, ``--pbt-iterations`` updates of 256 env steps per agent); PBT every 10
   updates on the mean training return (``pbt.fitness: train``), the learning rate evolving in
   [1e-4, 1e-2] from 2.5e-3. Prints each seed's 4 final greedy returns (8 episodes each).
2. **Throughput** (``--part throughput``): the same shape without PBT, one agent against 4
   agents in one process, alternating in ``--rounds`` rounds; env steps/s of all agents
   together (the run's ``steps_per_s``, mean over the logging points after the first, which
   holds the compile), and the ratio.

    python benchmarks/async_population.py [--part pbt|throughput|both] [--seeds 100 101 102 103 104]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _common import train

ITERATIONS = 120


def config(num_seeds: int, seed: int, pbt: bool, iterations: int = ITERATIONS) -> dict:
    cfg = {"workflow_cls": "evorl.workflows.PPOWorkflow", "seed": seed,
           "env": {"env_name": "CartPole-v1", "env_type": "gymnasium"},
           "agent": {"actor_hidden_layer_sizes": [64, 64], "critic_hidden_layer_sizes": [64, 64]},
           "training": {"num_envs": 8, "rollout_length": 32, "num_iterations": iterations, "num_epochs": 4,
                        "num_minibatches": 4, "learning_rate": 2.5e-3, "eval_interval": 10, "eval_episodes": 8,
                        "num_seeds": num_seeds},
           "runner": {"mode": "async", "num_actors": 2},
           "logging": {"plot": False}}
    if pbt:
        cfg["pbt"] = {"enabled": True, "interval": 10, "fitness": "train",
                      "hyperparameters": {"training.learning_rate": [1e-4, 1e-2]}}
    return cfg


def pbt_runs(seeds: list[int], iterations: int) -> None:
    print(f"PBT over 4 async agents, gymnasium CartPole-v1, {iterations * 256:,} env steps per agent")
    print("| seed | final greedy returns (4 agents) | mean | wall s |")
    print("|---:|---|---:|---:|")
    means = []
    for seed in seeds:
        start = time.perf_counter()
        workflow, _, _ = train(config(4, seed, pbt=True, iterations=iterations), seed=seed)
        wall = time.perf_counter() - start
        returns = np.asarray(workflow.last_metrics_per_agent["eval/episode_return"])
        means.append(float(np.mean(returns)))
        print(f"| {seed} | {', '.join(f'{r:.1f}' for r in returns)} | {np.mean(returns):.1f} | {wall:.0f} |",
              flush=True)
    print(f"mean over seeds: {np.mean(means):.1f}")


def steps_per_s(num_seeds: int, iterations: int) -> float:
    _, _, rows = train(config(num_seeds, 0, pbt=False, iterations=iterations), seed=0)
    return float(np.mean([row["steps_per_s"] for row in rows[1:]]))


def throughput(rounds: int, iterations: int) -> None:
    rates: dict[int, list[float]] = {1: [], 4: []}
    for r in range(rounds):
        for n in ((1, 4) if r % 2 == 0 else (4, 1)):
            rates[n].append(steps_per_s(n, iterations))
            print(f"round {r}: {n} agent(s): {rates[n][-1]:,.0f} env steps/s", flush=True)
    one, four = np.mean(rates[1]), np.mean(rates[4])
    print(f"\n| agents in one process | env steps/s, all agents (mean of {rounds}) | per agent |")
    print("|---:|---:|---:|")
    print(f"| 1 | {one:,.0f} | {one:,.0f} |")
    print(f"| 4 | {four:,.0f} | {four / 4:,.0f} |")
    print(f"4 agents / 1 agent, all env steps: x{four / one:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["pbt", "throughput", "both"], default="both")
    parser.add_argument("--seeds", type=int, nargs="+", default=[100, 101, 102, 103, 104])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=40, help="updates per throughput run")
    parser.add_argument("--pbt-iterations", type=int, default=ITERATIONS, help="updates per PBT run")
    args = parser.parse_args()
    if args.part in ("pbt", "both"):
        pbt_runs(args.seeds, args.pbt_iterations)
    if args.part in ("throughput", "both"):
        throughput(args.rounds, args.iterations)


if __name__ == "__main__":
    main()

"""Evolution strategies: learning on CartPole-v1 (4 strategies x 3 seeds), SNES on brax
inverted_pendulum, throughput for a population of 256, and peak memory by population size.

    python benchmarks/es_learning.py                    # everything (about 10 min on 2 cores)
    python benchmarks/es_learning.py --only learning    # learning | pendulum | throughput | memory

Learning: greedy evaluation of the mean every 10 generations (16 episodes); the table gives
the final return, and the generation (and env steps actually stepped, and seconds of
training) at which an evaluation first reached the target. Throughput counts the env steps
the members' episodes took (episodes end early; the vmapped loop runs until the longest ends).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import jax
import numpy as np

CARTPOLE = {"env_name": "CartPole-v1", "env_type": "gymnax"}
COMMON = {"workflow_cls": "evorl.workflows.ESWorkflow", "agent": {"actor_hidden_layer_sizes": [16]},
          "logging": {"recorders": []}}
STRATEGIES = {
    "OpenES": {"strategy": "OpenES", "population_size": 32, "sigma": 0.1, "learning_rate": 0.05, "obs_norm": True},
    "SNES": {"strategy": "SNES", "population_size": 32, "sigma": 0.1, "learning_rate": 1.0, "optimizer": "sgd",
             "obs_norm": True},
    "CMA_ES": {"strategy": "CMA_ES", "population_size": 32, "sigma": 0.1, "mirrored": False,
               "fitness_shaping": "strategy", "obs_norm": True},
    "ARS": {"strategy": "ARS", "population_size": 32, "sigma": 0.05, "learning_rate": 0.05, "obs_norm": True},
}


def build(env, es, eval_episodes=16, **extra):
    from evorl.workflows import ESWorkflow

    cfg = {**COMMON, "env": env, "es": es, "training": {"eval_episodes": eval_episodes}, **extra}
    return ESWorkflow.build_from_config(cfg, recorders=[])


def learn(workflow, seed, generations, target, eval_every=10):
    """Per seed: final greedy return, and (generation, env steps, seconds) of the first
    evaluation >= target (None if never)."""
    state = workflow.init(jax.random.PRNGKey(seed))
    done, steps, seconds, hit, ret = 0, 0.0, 0.0, None, None
    while done < generations:
        start = time.perf_counter()
        state, metrics = workflow.run_iterations(state, eval_every)
        seconds += time.perf_counter() - start
        steps += metrics["train/episodes"] * metrics["train/episode_length"]  # the chunk's totals
        done += eval_every
        ret = workflow.evaluate(state)["eval/episode_return"]
        if hit is None and ret >= target:
            hit = (done, int(steps), round(seconds, 1))
    return {"seed": seed, "final_return": ret, "first_hit": hit, "train_seconds": round(seconds, 1)}


def learning(seeds=(0, 1, 2), generations=100, target=475.0, strategies=tuple(STRATEGIES)):
    rows = []
    for name in strategies:
        es = STRATEGIES[name]
        workflow = build(CARTPOLE, es)
        start = time.perf_counter()
        workflow.compile(workflow.init(jax.random.PRNGKey(0)))
        compile_s = time.perf_counter() - start
        runs = [learn(workflow, seed, generations, target) for seed in seeds]
        rows.append({"strategy": name, "env": "CartPole-v1", "compile_s": round(compile_s, 1), "runs": runs})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def pendulum(seed=0, generations=60, target=900.0):
    env = {"env_name": "inverted_pendulum", "env_type": "brax", "backend": "spring", "episode_length": 1000}
    workflow = build(env, {"strategy": "SNES", "population_size": 32, "sigma": 0.1, "learning_rate": 1.0,
                           "optimizer": "sgd", "fitness_shaping": "strategy", "obs_norm": True}, eval_episodes=8)
    start = time.perf_counter()
    workflow.compile(workflow.init(jax.random.PRNGKey(seed)))
    row = {"strategy": "SNES", "env": "brax/inverted_pendulum", "compile_s": round(time.perf_counter() - start, 1),
           "runs": [learn(workflow, seed, generations, target)]}
    print(json.dumps(row), flush=True)
    return [row]


def throughput(population=256, generations=20, env=CARTPOLE):
    """Generations/s and env steps/s of OpenES (compiled chunks of ``generations``)."""
    workflow = build(env, {**STRATEGIES["OpenES"], "population_size": population}, eval_episodes=1)
    state = workflow.init(jax.random.PRNGKey(0))
    workflow.compile(state)
    state, _ = workflow.run_iterations(state, 1)  # warm
    start = time.perf_counter()
    state, metrics = workflow.run_iterations(state, generations)
    jax.block_until_ready(state)
    seconds = time.perf_counter() - start
    steps = metrics["train/episodes"] * metrics["train/episode_length"]  # the chunk's env steps
    row = {"population": population, "env": env["env_name"], "generations_per_s": round(generations / seconds, 2),
           "env_steps_per_s": round(steps / seconds), "mean_episode_length": round(metrics["train/episode_length"], 1)}
    print(json.dumps(row), flush=True)
    return row


def peak_rss_mib(population):
    """Peak RSS (MiB) of a fresh process that builds, compiles and runs 5 CartPole
    generations, and the compiled generation chunk's own buffers (MiB: XLA's temporaries plus
    arguments and outputs, from ``memory_analysis``)."""
    code = (f"import sys, resource; sys.path.insert(0, 'benchmarks'); import es_learning as b; "
            f"w = b.build(b.CARTPOLE, {{**b.STRATEGIES['OpenES'], 'population_size': {population}}}, eval_episodes=1); "
            f"import jax; s = w.init(jax.random.PRNGKey(0)); w.compile(s); s, _ = w.run_iterations(s, 5); "
            f"jax.block_until_ready(s); m = w.executor._chunk.memory_analysis(); "
            f"print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
            f"m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    rss_kib, program_bytes = out.stdout.strip().splitlines()[-1].split()
    return round(int(rss_kib) / 1024), round(int(program_bytes) / 2**20, 2)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", choices=["learning", "pendulum", "throughput", "memory"], default=None)
    parser.add_argument("--hopper", action="store_true", help="also time a population of 256 on brax hopper")
    parser.add_argument("--strategies", default=",".join(STRATEGIES), help="learning: comma-separated strategies")
    args = parser.parse_args()
    results = {}
    if args.only in (None, "learning"):
        results["learning"] = learning(strategies=args.strategies.split(","))
    if args.only in (None, "pendulum"):
        results["pendulum"] = pendulum()
    if args.only in (None, "throughput"):
        results["throughput"] = [throughput()]
        if args.hopper:
            results["throughput"].append(throughput(generations=2, env={
                "env_name": "hopper", "env_type": "brax", "backend": "spring", "episode_length": 1000}))
    if args.only in (None, "memory"):
        results["memory"] = {p: peak_rss_mib(p) for p in (64, 256, 1024)}
        print(json.dumps({"peak_rss_mib, compiled chunk's buffers mib": results["memory"]}), flush=True)
    for row in results.get("learning", []) + results.get("pendulum", []):
        finals = [r["final_return"] for r in row["runs"]]
        hits = [r["first_hit"] for r in row["runs"]]
        print(f"{row['env']:24s} {row['strategy']:7s} final {np.mean(finals):7.1f} +- {np.std(finals):5.1f} "
              f"{finals}  first reached (generation, env steps, s): {hits}  compile {row['compile_s']} s")


if __name__ == "__main__":
    main()

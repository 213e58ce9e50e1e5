"""Recurrent policies (``agent.core``): memory, and what the core costs.

1. **Memory.** PPO on gymnax ``MemoryChain-bsuite``: the context bit is shown at the first
   step and asked for 5 steps later (return +1 if recalled, -1 if not; a memoryless policy
   averages 0). The same budget for a GRU, an LSTM and a feed-forward agent, 3 seeds each in
   one program; prints each seed's final greedy return over 64 episodes.
2. **Throughput.** PPO CartPole-v1, 16 envs x 128 steps, 4 epochs x 4 minibatches, with a
   feed-forward [64, 64] agent and with a GRU / LSTM core of 64 units under [64] heads; each
   in a fresh process, compile timed apart; prints env steps/s, the ratio to feed-forward,
   and the final greedy return.

    python benchmarks/recurrent.py [--part memory|throughput|both] [--iterations 200]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

MEMORY_ITERATIONS = 40


def memory_config(core: str) -> dict:
    return {"workflow_cls": "evorl.workflows.PPOWorkflow", "seed": 0,
            "env": {"env_name": "MemoryChain-bsuite", "env_type": "gymnax"},
            "agent": {"core": core, "core_size": 32, "actor_hidden_layer_sizes": [32],
                      "critic_hidden_layer_sizes": [32]},
            "training": {"num_envs": 16, "rollout_length": 32, "num_iterations": MEMORY_ITERATIONS, "num_epochs": 4,
                         "num_minibatches": 4, "learning_rate": 3e-3, "eval_interval": MEMORY_ITERATIONS,
                         "eval_episodes": 64, "num_seeds": 3},
            "logging": {"recorders": [], "plot": False}}


def cartpole_config(core: str, iterations: int) -> dict:
    agent = ({"actor_hidden_layer_sizes": [64, 64], "critic_hidden_layer_sizes": [64, 64]} if core == "none" else
             {"core": core, "core_size": 64, "actor_hidden_layer_sizes": [64], "critic_hidden_layer_sizes": [64]})
    return {"workflow_cls": "evorl.workflows.PPOWorkflow", "seed": 0,
            "env": {"env_name": "CartPole-v1", "env_type": "gymnax"}, "agent": agent,
            "training": {"num_envs": 16, "rollout_length": 128, "num_epochs": 4, "num_minibatches": 4,
                         "num_iterations": iterations, "learning_rate": 2.5e-4, "eval_episodes": 32}}


def run_memory(core: str) -> dict:
    from evorl.app.experiment import run_experiment

    start = time.perf_counter()
    workflow = run_experiment(memory_config(core)).workflow
    returns = [float(r) for r in workflow.last_metrics_per_agent["eval/episode_return"]]
    steps = MEMORY_ITERATIONS * 16 * 32
    return {"core": core, "returns": returns, "env_steps": steps, "seconds": time.perf_counter() - start}


def run_throughput(core: str, iterations: int) -> dict:
    import jax

    from evorl.workflows import PPOWorkflow

    workflow = PPOWorkflow.build_from_config(cartpole_config(core, iterations), recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    compile_s = workflow.compile(state)
    start = time.perf_counter()
    state, _ = workflow.run_iterations(state, iterations)
    seconds = time.perf_counter() - start
    steps = iterations * 16 * 128
    return {"core": core, "compile_s": compile_s, "steps_per_s": steps / seconds, "env_steps": steps,
            "eval_return": workflow.evaluate(state)["eval/episode_return"]}


def in_fresh_process(*args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("memory", "throughput", "both"), default="both")
    parser.add_argument("--iterations", type=int, default=200, help="CartPole iterations (16 x 128 steps each)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, core, *rest = args.child
        result = run_memory(core) if kind == "memory" else run_throughput(core, int(rest[0]))
        print(json.dumps(result))
        return
    if args.part in ("memory", "both"):
        print(f"MemoryChain-bsuite, PPO, {MEMORY_ITERATIONS * 16 * 32} env steps per seed, 3 seeds in one program")
        print(f"{'core':6} {'final greedy return per seed':32} {'wall s':>7}")
        for core in ("gru", "lstm", "none"):
            r = in_fresh_process("memory", core)
            print(f"{core:6} {str([round(x, 3) for x in r['returns']]):32} {r['seconds']:7.1f}", flush=True)
    if args.part in ("throughput", "both"):
        print(f"\nCartPole-v1, PPO, 16 envs x 128 steps, {args.iterations} iterations "
              f"({args.iterations * 16 * 128} env steps), fresh process each")
        print(f"{'core':6} {'compile s':>9} {'steps/s':>10} {'vs ff':>6} {'final greedy':>12}")
        base = None
        for core in ("none", "gru", "lstm"):
            r = in_fresh_process("throughput", core, str(args.iterations))
            base = base or r["steps_per_s"]
            print(f"{core:6} {r['compile_s']:9.1f} {r['steps_per_s']:10.0f} {r['steps_per_s'] / base:6.2f} "
                  f"{r['eval_return']:12.1f}", flush=True)


if __name__ == "__main__":
    main()

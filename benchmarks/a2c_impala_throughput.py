"""A2C and IMPALA training throughput on CartPole-v1 (env steps per second, compile excluded).

Each setting compiles the training chunk once, warms it up, then times ``--iterations``
iterations (rollout + updates) in one compiled call. Settings: the CartPole configs in
``configs/`` as they are, and the same with 512 envs (where per-iteration overhead amortises).

Usage: python benchmarks/a2c_impala_throughput.py [--iterations 200]
"""

import argparse
import time

import jax
from _common import build, load_config


def throughput(cfg, iterations):
    workflow = build(cfg, recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    workflow.compile(state)
    state, _ = workflow.run_iterations(state, 5)  # warm-up
    jax.block_until_ready(state)
    start = time.perf_counter()
    state, _ = workflow.run_iterations(state, iterations)
    jax.block_until_ready(state)
    elapsed = time.perf_counter() - start
    return iterations * workflow.config.training.env_steps_per_iteration / elapsed, workflow.compile_seconds


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=200)
    args = parser.parse_args()
    print(f"{jax.local_device_count()} x {jax.devices()[0].platform}; {args.iterations} timed iterations")
    for name in ("a2c_cartpole", "impala_cartpole"):
        for num_envs in (None, 512):
            overrides = {} if num_envs is None else {"num_envs": num_envs}
            cfg = load_config(name, **overrides)
            steps_per_s, compile_s = throughput(cfg, args.iterations)
            tc = cfg["training"]
            print(f"{name:>16} num_envs={tc['num_envs']:>3} rollout_length={tc['rollout_length']:>2} "
                  f"epochs x minibatches={tc['num_epochs']}x{tc['num_minibatches']} "
                  f"actor_lag={tc.get('actor_lag', 0)}: {steps_per_s:,.0f} env steps/s (compile {compile_s:.1f} s)",
                  flush=True)


if __name__ == "__main__":
    main()

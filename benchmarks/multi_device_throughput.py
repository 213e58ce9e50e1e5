"""PPO CartPole-v1 env steps/s on 1 device and on N data-parallel devices.

On a CPU the devices are faked (``--xla_force_host_platform_device_count``), so N devices
share the machine's cores; on GPUs the same command measures real data parallelism.
Each device count runs in a fresh process.

    python benchmarks/multi_device_throughput.py [--devices 1 2] [--num-envs 64] [--iterations 100]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def run(num_envs: int, iterations: int) -> dict:
    import jax

    from evorl.workflows import PPOWorkflow

    workflow = PPOWorkflow.build_from_config({
        "env": {"env_name": "CartPole-v1", "env_type": "gymnax"},
        "training": {"num_envs": num_envs, "rollout_length": 128, "num_epochs": 4, "num_minibatches": 4,
                     "num_iterations": 1000},
    }, enable_multi_devices=jax.device_count() > 1, recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    compile_s = workflow.compile(state)
    state, _ = workflow.run_iterations(state, 2)
    start = time.perf_counter()
    workflow.run_iterations(state, iterations)
    run_s = time.perf_counter() - start
    return {"devices": jax.device_count(), "compile_s": compile_s,
            "steps_per_s": iterations * num_envs * 128 / run_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run(args.num_envs, args.iterations)))
        return
    for n in args.devices:
        env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={n}"}
        out = subprocess.run([sys.executable, __file__, "--one", "--num-envs", str(args.num_envs),
                              "--iterations", str(args.iterations)], env=env, capture_output=True, text=True,
                             check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(f"{r['devices']} device(s), {args.num_envs} envs: {r['steps_per_s']:,.0f} env steps/s "
              f"(compile {r['compile_s']:.1f} s)", flush=True)


if __name__ == "__main__":
    main()

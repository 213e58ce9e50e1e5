"""PPO CartPole-v1 throughput: evorl's PPOWorkflow against the single-function reference.

Same algorithm and hyperparameters on both sides (see ``ppo_reference.py``): 4 envs x 128
steps, 4 epochs x 4 minibatches, [64, 64] tanh actor and critic, Adam 2.5e-4 annealed,
976 iterations (499,712 env steps). Each side runs in a fresh process (so compile times are
cold), alternating A B A B; the script prints compile seconds, env steps/s and the final
greedy evaluation return of each run, then the medians and the ratios framework/reference.
Compile seconds are the training program's alone on both sides (evorl's chunk, compiled by
its executor; the reference's ``train``); each side's evaluator compiles separately.

``--num-envs 64`` runs the same 500k steps with 64 envs (61 iterations); ``--num-seeds 16``
trains 16 seeds in one program on both sides (``training.num_seeds`` against a ``vmap`` of
the reference), and throughput counts every seed's steps.

    python benchmarks/ppo_throughput.py [--repeats 3] [--seed 0] [--num-envs 4] [--num-seeds 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


TOTAL_ENV_STEPS = 500_000


def num_iterations(num_envs: int) -> int:
    return TOTAL_ENV_STEPS // (num_envs * 128)


def framework_config(seed: int, num_envs: int = 4, num_seeds: int = 1, devices: int = 1) -> dict:
    """The reference's job as an evorl config; with ``devices > 1`` the seeds are split over
    that many devices (``distributed.layout: population``, no communication between them)."""
    distributed = {"multi_devices": True, "layout": "population"} if devices > 1 else {}
    return {"distributed": distributed,
        "workflow_cls": "evorl.workflows.PPOWorkflow",
        "seed": seed,
        "env": {"env_name": "CartPole-v1", "env_type": "gymnax"},
        "agent": {"actor_hidden_layer_sizes": [64, 64], "critic_hidden_layer_sizes": [64, 64],
                  "activation": "tanh", "clip_epsilon": 0.2, "vf_coef": 0.5, "ent_coef": 0.01,
                  "normalize_obs": False, "normalize_gae": True},
        "training": {"num_iterations": num_iterations(num_envs), "num_envs": num_envs, "num_seeds": num_seeds,
                     "rollout_length": 128, "num_epochs": 4,
                     "num_minibatches": 4, "learning_rate": 2.5e-4, "anneal_lr": True, "max_grad_norm": 0.5,
                     "gamma": 0.99, "gae_lambda": 0.95, "eval_episodes": 16},
    }


def run_framework(seed: int, num_envs: int = 4, num_seeds: int = 1, devices: int = 1) -> dict:
    import jax

    from evorl.workflows import PPOWorkflow

    if jax.device_count() < devices:
        raise SystemExit(f"--devices {devices} needs XLA_FLAGS=--xla_force_host_platform_device_count={devices} "
                         f"(this process has {jax.device_count()} device(s))")
    cfg = framework_config(seed, num_envs, num_seeds, devices)
    iterations = num_iterations(num_envs)
    workflow = PPOWorkflow.build_from_config(cfg, recorders=[])
    state = workflow.init(jax.random.PRNGKey(seed))
    compile_s = workflow.executor.compile(state)  # the training chunk alone, as the reference's train
    start = time.perf_counter()
    state, metrics = workflow.run_iterations(state, iterations)
    run_s = time.perf_counter() - start
    env_steps = iterations * num_envs * 128 * num_seeds
    return {"compile_s": compile_s, "run_s": run_s, "steps_per_s": env_steps / run_s,
            "eval_return": workflow.evaluate(state)["eval/episode_return"], "env_steps": env_steps}


def subprocess_json(args: list[str], env: dict | None = None) -> dict:
    out = subprocess.run([sys.executable, *args], capture_output=True, text=True, check=True, timeout=1200,
                         env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--num-seeds", type=int, default=1)
    parser.add_argument("--devices", type=int, default=1,
                        help="evorl splits the seeds over this many host devices (layout population)")
    parser.add_argument("--framework-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.framework_only:
        print(json.dumps(run_framework(args.seed, args.num_envs, args.num_seeds, args.devices)))
        return
    shape = ["--num-envs", str(args.num_envs), "--num-seeds", str(args.num_seeds)]
    framework_env = dict(os.environ)
    if args.devices > 1:
        framework_env["XLA_FLAGS"] = (framework_env.get("XLA_FLAGS", "") +
                                      f" --xla_force_host_platform_device_count={args.devices}").strip()

    runs = {"evorl": [], "reference": []}
    for i in range(args.repeats):
        seed = args.seed + i
        runs["evorl"].append(subprocess_json([__file__, "--framework-only", "--seed", str(seed), *shape,
                                              "--devices", str(args.devices)], framework_env))
        runs["reference"].append(subprocess_json([str(HERE / "ppo_reference.py"), "--json", "--seed", str(seed), *shape]))
        for name in runs:
            r = runs[name][-1]
            print(f"seed {seed} {name:9s}: compile {r['compile_s']:.2f} s, {r['steps_per_s']:,.0f} env steps/s, "
                  f"final eval return {r['eval_return']:.1f}", flush=True)

    med = {name: {k: statistics.median(r[k] for r in rs) for k in ("compile_s", "steps_per_s", "eval_return")}
           for name, rs in runs.items()}
    print(f"\nmedian over {args.repeats} runs    compile s   env steps/s   eval return")
    for name, m in med.items():
        print(f"  {name:24s} {m['compile_s']:9.2f} {m['steps_per_s']:13,.0f} {m['eval_return']:13.1f}")
    ratios_sps = [a["steps_per_s"] / b["steps_per_s"] for a, b in zip(runs["evorl"], runs["reference"])]
    ratios_compile = [a["compile_s"] / b["compile_s"] for a, b in zip(runs["evorl"], runs["reference"])]
    print(f"evorl / reference ({args.num_envs} envs, {args.num_seeds} seed(s), evorl on {args.devices} device(s)): "
          f"steps/s x{statistics.median(ratios_sps):.3f} (per-pair ratios {', '.join(f'{r:.2f}' for r in ratios_sps)}; "
          f"target >= 1.25 at 4 envs x 1 seed, >= 1.2 otherwise), compile time x{statistics.median(ratios_compile):.3f} "
          f"(target <= 1)")


if __name__ == "__main__":
    main()

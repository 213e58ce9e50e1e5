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
the reference), and throughput counts every seed's steps; ``--devices 2`` splits evorl's
seeds over two host devices. ``--task breakout-cnn`` (``configs/ppo_minatar_breakout.yaml``
with ``agent.network=cnn``, 30 iterations of 64 x 128) and ``--task inverted-pendulum``
(``configs/ppo_brax_inverted_pendulum.yaml`` at 64 envs, 200 iterations of 64 x 32) run the
reference's other shapes (``ppo_reference.TASKS``) against those configs.

    python benchmarks/ppo_throughput.py [--task cartpole] [--repeats 3] [--seed 0] [--num-envs N]
        [--num-seeds 1] [--devices 1] [--conv xla|im2col]
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


sys.path.insert(0, str(HERE))
from ppo_reference import TASKS  # noqa: E402  (the reference's shapes: one source for both sides)

#: The evorl config of each task other than CartPole: its file in ``configs/`` and overrides
#: (the reference steps gymnax's Breakout without sticky actions: so does evorl here).
TASK_CONFIGS = {
    "breakout-cnn": ("ppo_minatar_breakout.yaml", {"agent": {"network": "cnn"}, "env": {"repeat_action_probability": 0.0}}),
    "inverted-pendulum": ("ppo_brax_inverted_pendulum.yaml", {}),
}


def num_iterations(num_envs: int, task: str = "cartpole") -> int:
    ref = TASKS[task]
    return ref.total_env_steps // (num_envs * ref.rollout_length)


def framework_config(seed: int, num_envs: int = 4, num_seeds: int = 1, devices: int = 1,
                     task: str = "cartpole") -> dict:
    """The reference's job as an evorl config; with ``devices > 1`` the seeds are split over
    that many devices (``distributed.layout: population``, no communication between them)."""
    if task == "cartpole":
        cfg = {
            "workflow_cls": "evorl.workflows.PPOWorkflow",
            "env": {"env_name": "CartPole-v1", "env_type": "gymnax"},
            "agent": {"actor_hidden_layer_sizes": [64, 64], "critic_hidden_layer_sizes": [64, 64],
                      "activation": "tanh", "clip_epsilon": 0.2, "vf_coef": 0.5, "ent_coef": 0.01,
                      "normalize_obs": False, "normalize_gae": True},
            "training": {"rollout_length": 128, "num_epochs": 4, "num_minibatches": 4, "learning_rate": 2.5e-4,
                         "anneal_lr": True, "max_grad_norm": 0.5, "gamma": 0.99, "gae_lambda": 0.95},
        }
    else:
        from omegaconf import OmegaConf

        name, overrides = TASK_CONFIGS[task]
        cfg = OmegaConf.to_container(OmegaConf.merge(OmegaConf.load(HERE.parent / "configs" / name), overrides))
        cfg.pop("defaults", None)
    iterations = num_iterations(num_envs, task)
    cfg["seed"] = seed
    cfg["distributed"] = {"multi_devices": True, "layout": "population"} if devices > 1 else {}
    cfg["training"].update(num_iterations=iterations, num_envs=num_envs, num_seeds=num_seeds, eval_episodes=16,
                           eval_interval=iterations)
    return cfg


def run_framework(seed: int, num_envs: int = 4, num_seeds: int = 1, devices: int = 1, task: str = "cartpole") -> dict:
    import jax

    from evorl.workflows import PPOWorkflow

    if jax.device_count() < devices:
        raise SystemExit(f"--devices {devices} needs XLA_FLAGS=--xla_force_host_platform_device_count={devices} "
                         f"(this process has {jax.device_count()} device(s))")
    cfg = framework_config(seed, num_envs, num_seeds, devices, task)
    iterations = cfg["training"]["num_iterations"]
    workflow = PPOWorkflow.build_from_config(cfg, recorders=[])
    state = workflow.init(jax.random.PRNGKey(seed))
    compile_s = workflow.executor.compile(state)  # the training chunk alone, as the reference's train
    start = time.perf_counter()
    state, metrics = workflow.run_iterations(state, iterations)
    run_s = time.perf_counter() - start
    env_steps = iterations * workflow.env_steps_per_iteration
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
    parser.add_argument("--task", choices=sorted(TASKS), default="cartpole",
                        help="the job: CartPole, MinAtar Breakout with the CNN, brax inverted_pendulum")
    parser.add_argument("--conv", choices=["xla", "im2col"], default="xla",
                        help="the reference's conv kernel (breakout-cnn; evorl's torso is im2col)")
    parser.add_argument("--num-envs", type=int, default=None, help="default: the task's")
    parser.add_argument("--num-seeds", type=int, default=1)
    parser.add_argument("--devices", type=int, default=1,
                        help="evorl splits the seeds over this many host devices (layout population)")
    parser.add_argument("--framework-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.num_envs = args.num_envs or TASKS[args.task].num_envs
    if args.framework_only:
        print(json.dumps(run_framework(args.seed, args.num_envs, args.num_seeds, args.devices, args.task)))
        return
    shape = ["--task", args.task, "--num-envs", str(args.num_envs), "--num-seeds", str(args.num_seeds)]
    framework_env = dict(os.environ)
    if args.devices > 1:
        framework_env["XLA_FLAGS"] = (framework_env.get("XLA_FLAGS", "") +
                                      f" --xla_force_host_platform_device_count={args.devices}").strip()

    runs = {"evorl": [], "reference": []}
    for i in range(args.repeats):
        seed = args.seed + i
        runs["evorl"].append(subprocess_json([__file__, "--framework-only", "--seed", str(seed), *shape,
                                              "--devices", str(args.devices)], framework_env))
        runs["reference"].append(subprocess_json([str(HERE / "ppo_reference.py"), "--json", "--seed", str(seed), *shape,
                                                  "--conv", args.conv]))
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
    print(f"evorl / reference ({args.task}, {args.num_envs} envs, {args.num_seeds} seed(s), evorl on {args.devices} "
          f"device(s){', reference conv ' + args.conv if args.task == 'breakout-cnn' else ''}): "
          f"steps/s x{statistics.median(ratios_sps):.3f} (per-pair ratios {', '.join(f'{r:.2f}' for r in ratios_sps)}; "
          f"target >= 1.25 at 4 envs x 1 seed, >= 1.2 otherwise), compile time x{statistics.median(ratios_compile):.3f} "
          f"(target <= 1)")


if __name__ == "__main__":
    main()

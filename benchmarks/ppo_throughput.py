"""PPO CartPole-v1 throughput: evorl's PPOWorkflow against the single-function reference.

Same algorithm and hyperparameters on both sides (see ``ppo_reference.py``): 4 envs x 128
steps, 4 epochs x 4 minibatches, [64, 64] tanh actor and critic, Adam 2.5e-4 annealed,
976 iterations (499,712 env steps). Each side runs in a fresh process (so compile times are
cold), alternating A B A B; the script prints compile seconds, env steps/s and the final
greedy evaluation return of each run, then the medians and the ratios framework/reference.

    python benchmarks/ppo_throughput.py [--repeats 3] [--seed 0]
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


def framework_config(seed: int) -> dict:
    """The reference's job as an evorl config."""
    return {
        "workflow_cls": "evorl.workflows.PPOWorkflow",
        "seed": seed,
        "env": {"env_name": "CartPole-v1", "env_type": "gymnax"},
        "agent": {"actor_hidden_layer_sizes": [64, 64], "critic_hidden_layer_sizes": [64, 64],
                  "activation": "tanh", "clip_epsilon": 0.2, "vf_coef": 0.5, "ent_coef": 0.01,
                  "normalize_obs": False, "normalize_gae": True},
        "training": {"num_iterations": 976, "num_envs": 4, "rollout_length": 128, "num_epochs": 4,
                     "num_minibatches": 4, "learning_rate": 2.5e-4, "anneal_lr": True, "max_grad_norm": 0.5,
                     "gamma": 0.99, "gae_lambda": 0.95, "eval_episodes": 16},
    }


def run_framework(seed: int) -> dict:
    import jax

    from evorl.workflows import PPOWorkflow

    cfg = framework_config(seed)
    workflow = PPOWorkflow.build_from_config(cfg, recorders=[])
    state = workflow.init(jax.random.PRNGKey(seed))
    compile_s = workflow.compile(state)
    start = time.perf_counter()
    state, metrics = workflow.run_iterations(state, 976)
    run_s = time.perf_counter() - start
    env_steps = 976 * 4 * 128
    return {"compile_s": compile_s, "run_s": run_s, "steps_per_s": env_steps / run_s,
            "eval_return": workflow.evaluate(state)["eval/episode_return"], "env_steps": env_steps}


def subprocess_json(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, *args], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--framework-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.framework_only:
        print(json.dumps(run_framework(args.seed)))
        return

    runs = {"evorl": [], "reference": []}
    for i in range(args.repeats):
        seed = args.seed + i
        runs["evorl"].append(subprocess_json([__file__, "--framework-only", "--seed", str(seed)]))
        runs["reference"].append(subprocess_json([str(HERE / "ppo_reference.py"), "--json", "--seed", str(seed)]))
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
    print(f"evorl / reference: steps/s x{statistics.median(ratios_sps):.3f} (target >= 0.95), "
          f"compile time x{statistics.median(ratios_compile):.3f} (target <= 1.3)")


if __name__ == "__main__":
    main()

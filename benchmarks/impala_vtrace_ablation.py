"""IMPALA with stale actors, with and without the V-trace correction (CartPole-v1).

The learner takes ``num_epochs x num_minibatches`` = 16 steps per rollout and the actors act
with the parameters of ``actor_lag`` = 8 iterations ago (128 gradient steps stale), so the
behaviour policy really differs from the learner's. Variants:

* ``V-trace``: rho_bar = c_bar = 1 (the paper's setting);
* ``no correction``: ``vtrace_correction=False``, importance ratios taken as 1 (the paper's
  "no correction" baseline);
* ``untruncated IS``: rho_bar = c_bar = pg_rho_bar = inf (plain importance sampling).

Printed per variant over seeds: the evaluation return averaged over training (area under the
learning curve), the final one, the first iteration reaching 475, and the importance ratios.

Usage: python benchmarks/impala_vtrace_ablation.py [--seeds 3] [--actor-lag 8] [--iterations 400]
"""

import argparse
import time

import numpy as np
from _common import load_config, train

VARIANTS = {
    "V-trace": {"vtrace_rho_bar": 1.0, "vtrace_c_bar": 1.0},
    "no correction": {"vtrace_correction": False},
    "untruncated IS": {"vtrace_rho_bar": float("inf"), "vtrace_c_bar": float("inf"), "pg_rho_bar": float("inf")},
}


def run(agent, args, seed):
    cfg = load_config("impala_cartpole", actor_lag=args.actor_lag, num_iterations=args.iterations,
                      num_epochs=4, num_minibatches=4, learning_rate=5e-4, eval_interval=25)
    cfg["agent"].update(agent)
    _, _, rows = train(cfg, seed)
    returns = np.array([row["eval/episode_return"] for row in rows])
    return {
        "mean_return": returns.mean(),
        "final_return": returns[-1],
        "first_475": next((row["iteration"] for row in rows if row["eval/episode_return"] >= 475), None),
        "mean_ratio": np.mean([row["train/mean_importance_ratio"] for row in rows]),
        "max_ratio": np.max([row["train/max_importance_ratio"] for row in rows]),
        "env_steps": rows[-1]["env_steps"],
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--actor-lag", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=400)
    args = parser.parse_args()
    print(f"IMPALA CartPole-v1, actor_lag={args.actor_lag} iterations (x16 gradient steps), "
          f"{args.iterations} iterations, seeds 0..{args.seeds - 1}")
    for name, agent in VARIANTS.items():
        start = time.perf_counter()
        results = [run(agent, args, seed) for seed in range(args.seeds)]
        col = {k: [r[k] for r in results] for k in results[0]}
        print(
            f"{name:>14}: eval return mean over training {np.mean(col['mean_return']):6.1f} "
            f"(per seed {np.round(col['mean_return'], 1).tolist()}), final {np.round(col['final_return'], 1).tolist()}, "
            f"first iteration >= 475 {col['first_475']}, importance ratio mean {np.mean(col['mean_ratio']):.3f} "
            f"max {np.max(col['max_ratio']):.1f}; {int(col['env_steps'][0])} env steps/run, "
            f"{time.perf_counter() - start:.0f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()

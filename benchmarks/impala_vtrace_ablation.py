"""IMPALA with stale actors, with and without the V-trace correction (CartPole-v1).

The learner takes ``num_epochs x num_minibatches`` steps per rollout and the actors act with
the parameters of ``actor_lag`` iterations ago, so the behaviour policy really differs from
the learner's. With ``vtrace_correction=False`` the importance ratios are taken as 1 (the
paper's "no correction" baseline); the script prints, per variant and over seeds, the
evaluation return over training (mean and final), the importance ratios the learner saw and
the number of iterations that reached 475.

Usage: python benchmarks/impala_vtrace_ablation.py [--seeds 3] [--actor-lag 4] [--iterations 600]
"""

import argparse
import time

import jax
import numpy as np

from evorl.algorithms.impala import IMPALAWorkflow


class MetricsLog:
    def __init__(self):
        self.rows = []

    def init(self, config):
        pass

    def write(self, metrics, step):
        self.rows.append(dict(metrics))

    def close(self):
        pass


def config(actor_lag, correction, iterations, seed):
    return {
        "workflow_cls": "evorl.algorithms.impala.IMPALAWorkflow",
        "seed": seed,
        "env": {"env_name": "CartPole-v1", "env_type": "gymnax"},
        "agent": {"vtrace_rho_bar": 1.0, "vtrace_c_bar": 1.0, "ent_coef": 0.01,
                  "vtrace_correction": correction},
        "training": {"num_iterations": iterations, "rollout_length": 16, "num_envs": 32,
                     "learning_rate": 1e-3, "num_epochs": 2, "num_minibatches": 4,
                     "gae_lambda": 1.0, "eval_interval": 25, "actor_lag": actor_lag},
    }


def run(cfg):
    log = MetricsLog()
    workflow = IMPALAWorkflow.build_from_config(cfg, recorders=[log])
    state = workflow.init(jax.random.PRNGKey(cfg["seed"]))
    workflow.learn(state)
    returns = np.array([row["eval/episode_return"] for row in log.rows])
    return {
        "mean_eval_return": returns.mean(),
        "final_eval_return": returns[-1],
        "first_iteration_475": next((row["iteration"] for row in log.rows
                                     if row["eval/episode_return"] >= 475), np.nan),
        "mean_importance_ratio": np.mean([row["train/mean_importance_ratio"] for row in log.rows]),
        "max_importance_ratio": np.max([row["train/max_importance_ratio"] for row in log.rows]),
        "env_steps": log.rows[-1]["env_steps"],
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--actor-lag", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=600)
    args = parser.parse_args()
    print(f"IMPALA CartPole-v1, actor_lag={args.actor_lag}, {args.iterations} iterations, seeds 0..{args.seeds - 1}")
    for correction in (True, False):
        start = time.perf_counter()
        results = [run(config(args.actor_lag, correction, args.iterations, seed)) for seed in range(args.seeds)]
        name = "V-trace      " if correction else "no correction"
        summary = {k: np.array([r[k] for r in results]) for k in results[0]}
        print(
            f"{name}: eval return mean over training {summary['mean_eval_return'].mean():6.1f} "
            f"(per seed {np.round(summary['mean_eval_return'], 1).tolist()}), "
            f"final {np.round(summary['final_eval_return'], 1).tolist()}, "
            f"first iteration >= 475: {summary['first_iteration_475'].tolist()}, "
            f"importance ratio mean {summary['mean_importance_ratio'].mean():.3f} "
            f"max {summary['max_importance_ratio'].max():.2f}, "
            f"{int(summary['env_steps'][0])} env steps/run, {time.perf_counter() - start:.0f} s"
        )


if __name__ == "__main__":
    main()

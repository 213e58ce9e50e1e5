"""PBT-PPO against random search: the same population with its initial hyperparameter draws
held fixed, same seeds, same env steps.

For each task, 8 learning rates are drawn log-uniformly from a range that holds mostly bad
values (fixed NumPy seed); both arms train the same 8 agents (one per learning rate, the same
PRNG key) for the same iterations. Random search keeps the learning rates; PBT ranks the agents
by mean greedy return every ``interval`` iterations, the worst quarter copies the best quarter
and perturbs the learning rate and the entropy coefficient. Reports each arm's best and median
final return (each agent evaluated greedily on ``--eval-episodes`` episodes) and the PBT step's
cost: the step alone (compiled by itself) against an interval of iterations that ends with it
(medians of 5, after training; wall-time differences between whole runs are noise on a shared
machine). A third arm ranks by training return (``fitness: train``), which needs no
evaluation episodes.

    python benchmarks/pbt_vs_random_search.py [--tasks cartpole acrobot] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

TASKS = {
    # env, iterations (each 8 envs x 128 steps per agent), learning rate range of the draws
    "cartpole": ({"env_name": "CartPole-v1", "env_type": "gymnax"}, 60, (1e-6, 1e-3)),
    "acrobot": ({"env_name": "Acrobot-v1", "env_type": "gymnax"}, 60, (1e-6, 1e-3)),
}
NUM_AGENTS = 8
#: name, PBT on, fitness
ARMS = (("random search", False, "eval"), ("PBT", True, "eval"), ("PBT, fitness: train", True, "train"))


def config(task: str, learning_rates: list[float], pbt: bool, seed: int, fitness: str = "eval") -> dict:
    env, iterations, (low, high) = TASKS[task]
    return {
        "workflow_cls": "evorl.workflows.PPOWorkflow", "seed": seed, "env": env,
        "agent": {"actor_hidden_layer_sizes": [64, 64], "critic_hidden_layer_sizes": [64, 64], "normalize_obs": True,
                  "ent_coef": 0.01},
        "training": {"num_iterations": iterations, "num_envs": 8, "rollout_length": 128, "num_minibatches": 8,
                     "anneal_lr": False, "learning_rate": learning_rates, "eval_interval": 10, "eval_episodes": 8},
        "pbt": {"enabled": pbt, "interval": 10, "fitness": fitness, "eval_episodes": 8, "exploit_fraction": 0.25,
                "perturb_factors": [0.5, 2.0], "resample_probability": 0.25,
                "hyperparameters": {"training.learning_rate": [low, 1e-2], "agent.ent_coef": [0.0, 0.05]}},
    }


def run_arm(cfg: dict, eval_episodes: int) -> dict:
    import jax

    from evorl.workflows import PPOWorkflow

    workflow = PPOWorkflow.build_from_config(cfg, recorders=[])
    state = workflow.init(jax.random.PRNGKey(cfg["seed"]))
    compile_s = workflow.compile(state)
    start = time.perf_counter()
    state = workflow.learn(state)
    train_s = time.perf_counter() - start
    final = PPOWorkflow.build_from_config({**cfg, "training": {**cfg["training"], "eval_episodes": eval_episodes}},
                                          recorders=[])
    final.evaluate(state)
    returns = final.last_metrics_per_agent["eval/episode_return"]  # [N]
    out = {"returns": [float(r) for r in returns], "best": float(np.max(returns)),
           "median": float(np.median(returns)), "train_s": train_s, "compile_s": compile_s,
           "learning_rates": np.asarray(state.learning_rate).tolist()}
    if cfg["pbt"]["enabled"]:
        out.update(time_pbt_step(workflow, state))
    return out


def time_pbt_step(workflow, state, repeats: int = 5) -> dict:
    """Medians of ``repeats`` timings: the PBT step alone (fitness, exploit, explore; compiled by
    itself) and an interval of iterations that ends with it (one compiled chunk)."""
    import jax

    interval = workflow.config.pbt.interval
    import jax.numpy as jnp

    alive = jnp.ones(workflow.num_agents, bool)
    step = jax.jit(lambda s: workflow.pbt.step_population(s, alive))
    jax.block_until_ready(step(state))
    step_s, interval_s = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(step(state))
        step_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        state, _ = workflow.run_iterations(state, interval)  # from a multiple of interval: ends with a PBT step
        jax.block_until_ready(state)
        interval_s.append(time.perf_counter() - start)
    step_s, interval_s = float(np.median(step_s)), float(np.median(interval_s))
    return {"pbt_step_s": step_s, "interval_s": interval_s, "pbt_share": step_s / interval_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-episodes", type=int, default=32)
    args = parser.parse_args()
    rows = []
    for task in args.tasks:
        low, high = TASKS[task][2]
        draws = np.exp(np.random.default_rng(args.seed).uniform(np.log(low), np.log(high), NUM_AGENTS))
        learning_rates = [float(f"{lr:.3g}") for lr in draws]
        arms = {name: run_arm(config(task, learning_rates, pbt, args.seed, fitness), args.eval_episodes)
                for name, pbt, fitness in ARMS}
        row = {"task": task, "initial_learning_rates": learning_rates, **arms}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| task | arm | best | median | train s | final learning rates |")
    print("|---|---|---:|---:|---:|---|")
    for row in rows:
        for arm, _, _ in ARMS:
            r = row[arm]
            lrs = ", ".join(f"{lr:.1e}" for lr in r["learning_rates"])
            print(f"| {row['task']} | {arm} | {r['best']:.1f} | {r['median']:.1f} | {r['train_s']:.1f} | {lrs} |")
    for row in rows:
        for arm, _, _ in ARMS[1:]:
            r = row[arm]
            print(f"{row['task']}, {arm}: PBT step {r['pbt_step_s']:.3f} s, {100 * r['pbt_share']:.1f}% of an "
                  f"interval of {r['interval_s']:.2f} s")
        print(f"{row['task']}: initial learning rates {row['initial_learning_rates']}")


if __name__ == "__main__":
    main()

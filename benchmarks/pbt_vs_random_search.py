"""PBT against random search: the same population with its initial hyperparameter draws
held fixed, same seeds, same env steps (PPO on CartPole and Acrobot; SAC and OpenES on Pendulum).

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

A config task (``sac_pendulum``, ``openes_pendulum``) runs a shipped PBT config as it is (its initial learning
rates are the config's list) against the same config with ``pbt.enabled: false``, and also
reports the env steps at which the population's best member first reached the config's
header target (periodic evaluations, ``training.eval_episodes`` episodes each).

    python benchmarks/pbt_vs_random_search.py [--tasks cartpole acrobot] [--seeds 0]
    python benchmarks/pbt_vs_random_search.py --tasks sac_pendulum --seeds 2101 2102 --time-pbt-step 0
    python benchmarks/pbt_vs_random_search.py --tasks openes_pendulum --seeds 5801 5802 5803 5804 5805 --time-pbt-step 0
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
#: Shipped PBT configs run as they are, against themselves with pbt.enabled false.
CONFIG_TASKS = {"sac_pendulum": "pbt_sac_pendulum", "openes_pendulum": "pbt_openes_pendulum"}
NUM_AGENTS = 8
#: name, PBT on, fitness
ARMS = (("random search", False, "eval"), ("PBT", True, "eval"), ("PBT, fitness: train", True, "train"))
CONFIG_ARMS = ARMS[:2]


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


def shipped_config(task: str, pbt: bool, seed: int) -> tuple[dict, float]:
    """A config task's shipped config with ``pbt.enabled`` set, and its header's target."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _common import load_config
    from suites import config_target, target_file

    cfg = load_config(CONFIG_TASKS[task])
    cfg["pbt"]["enabled"], cfg["seed"] = pbt, seed
    return cfg, config_target(target_file(CONFIG_TASKS[task])).value


class BestReached:
    """A recorder: the env steps at which the population's best member's periodic greedy
    return first reached ``target`` (None: never)."""

    def __init__(self, target: float | None):
        self.target, self.workflow, self.step = target, None, None
        #: The best member's best periodic greedy return over the run.
        self.best = -np.inf

    def init(self, config) -> None:
        pass

    def write(self, metrics: dict, step: int) -> None:
        if "eval/episode_return" not in metrics:
            return
        best = float(np.max(self.workflow.last_metrics_per_agent["eval/episode_return"]))
        self.best = max(self.best, best)
        if self.target is not None and self.step is None and best >= self.target:
            self.step = int(step)

    def close(self) -> None:
        pass


def run_arm(cfg: dict, eval_episodes: int, pbt_step_repeats: int = 5, target: float | None = None) -> dict:
    import jax

    from evorl.workflows import resolve_workflow_cls

    workflow_cls = resolve_workflow_cls(cfg["workflow_cls"])
    reached = BestReached(target)
    workflow = workflow_cls.build_from_config(cfg, recorders=[reached])
    reached.workflow = workflow
    state = workflow.init(jax.random.PRNGKey(cfg["seed"]))
    compile_s = workflow.compile(state)
    start = time.perf_counter()
    state = workflow.learn(state)
    train_s = time.perf_counter() - start
    final = workflow_cls.build_from_config({**cfg, "training": {**cfg["training"], "eval_episodes": eval_episodes}},
                                           recorders=[])
    final.evaluate(state)
    returns = final.last_metrics_per_agent["eval/episode_return"]  # [N]
    out = {"returns": [float(r) for r in returns], "best": float(np.max(returns)),
           "median": float(np.median(returns)), "train_s": train_s, "compile_s": compile_s,
           "hyperparameters": evolving_values(workflow, cfg, state), "best_reached_step": reached.step,
           "best_over_run": reached.best}
    if cfg["pbt"]["enabled"] and pbt_step_repeats:
        out.update(time_pbt_step(workflow, state, pbt_step_repeats))
    return out


def evolving_values(workflow, cfg: dict, state) -> dict[str, list[float]]:
    """Each agent's final value of every key in ``pbt.hyperparameters`` (evolved or not), read
    where PBT reads them (an ES population: its searches' states)."""
    from evorl.algorithms.es_workflow import SearchHyperparameters
    from evorl.engine.pbt import AgentHyperparameters

    store = SearchHyperparameters(workflow.search) if hasattr(workflow, "search") else AgentHyperparameters()
    return {key: np.asarray(store.read(state, None if key == "training.learning_rate" else key.split(".", 1)[1])
                            ).tolist() for key in cfg["pbt"]["hyperparameters"]}


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
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=[*TASKS, *CONFIG_TASKS])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0],
                        help="training seeds (and, for a PPO task, the seed of the learning-rate draws)")
    parser.add_argument("--eval-episodes", type=int, default=32)
    parser.add_argument("--time-pbt-step", type=int, default=5, metavar="REPEATS",
                        help="time the PBT step against an interval this many times after training (0: not)")
    args = parser.parse_args()
    rows = []
    for task in args.tasks:
        for seed in args.seeds:  # the arms alternate on each seed
            if task in CONFIG_TASKS:
                arms_run = CONFIG_ARMS
                configs = {name: shipped_config(task, pbt, seed) for name, pbt, _ in arms_run}
                shipped = configs["PBT"][0]
                initial = {key: shipped[key.split(".")[0]][key.split(".", 1)[1]]
                           for key in shipped["pbt"]["hyperparameters"]}
            else:
                arms_run = ARMS
                low, high = TASKS[task][2]
                draws = np.exp(np.random.default_rng(seed).uniform(np.log(low), np.log(high), NUM_AGENTS))
                learning_rates = [float(f"{lr:.3g}") for lr in draws]
                configs = {name: (config(task, learning_rates, pbt, seed, fitness), None)
                           for name, pbt, fitness in arms_run}
                initial = {"training.learning_rate": learning_rates}
            arms = {}
            for name, _, _ in arms_run:
                cfg, target = configs[name]
                arms[name] = run_arm(cfg, args.eval_episodes, args.time_pbt_step, target)
                print(f"{task} seed {seed} {name}: {json.dumps(arms[name])}", flush=True)
            rows.append({"task": task, "seed": seed, "initial": initial, "arms": arms})
    print("\n| task | seed | arm | best | median | best over the run | best reached the target at (env steps) "
          "| train s | final evolving hyperparameters |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---|")
    for row in rows:
        for arm, r in row["arms"].items():
            final = "; ".join(f"{key.split('.')[1]} " + ", ".join(f"{v:.2g}" for v in values)
                              for key, values in r["hyperparameters"].items())
            print(f"| {row['task']} | {row['seed']} | {arm} | {r['best']:.1f} | {r['median']:.1f} "
                  f"| {r['best_over_run']:.1f} | {r['best_reached_step'] if r['best_reached_step'] is not None else '-'} | {r['train_s']:.1f} "
                  f"| {final} |")
    for row in rows:
        for arm, r in row["arms"].items():
            if "pbt_step_s" in r:
                print(f"{row['task']} seed {row['seed']}, {arm}: PBT step {r['pbt_step_s']:.3f} s, "
                      f"{100 * r['pbt_share']:.1f}% of an interval of {r['interval_s']:.2f} s")
        print(f"{row['task']} seed {row['seed']}: initial {row['initial']}")


if __name__ == "__main__":
    main()

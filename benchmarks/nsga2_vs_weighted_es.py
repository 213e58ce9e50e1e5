"""NSGA-II against weighted-sum OpenES at equal env steps, by hypervolume, on fresh seeds.

Both sides on configs/nsga2_halfcheetah.yaml's env (brax halfcheetah, spring, 200-step
episodes, objectives reward_run and reward_ctrl), the same [32, 32] tanh policy and 32
episodes of 200 steps per generation. NSGA-II runs ``G`` generations; the baseline runs
OpenES (es_openes_hopper's settings otherwise) once per weight vector ``(1, w)`` of
``--weights``, each for ``G / k`` generations on the fitness ``reward_run + w reward_ctrl``,
so both sides take ``G x 6,400`` env steps. Scored the same way on held-out episodes (env key
``seed + 1000``, ``--episodes`` each): every member of NSGA-II's final front and each OpenES
run's final mean play greedily, their mean term returns are the points, and the
hypervolume of each side's points above the config's reference point is its score.

    python benchmarks/nsga2_vs_weighted_es.py --seeds 5601 5602 5603 5604 5605 --out results.json
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from _common import build, load_config
from evorl.engine.evaluator import greedy_episodes
from evorl.rl.multi_objective import hypervolume_2d


def held_out_points(workflow, agent_state, flat_members, seed, episodes):
    """``[M, K]`` mean term returns of each member over ``episodes`` held-out greedy episodes."""
    env = workflow.env.with_num_envs(episodes)
    names = workflow.config.nsga2.objectives if hasattr(workflow.config, "nsga2") else workflow.config.es.objectives
    index = np.asarray([env.reward_terms.index(n) for n in names])
    _, unravel = ravel_pytree(agent_state.params)

    @jax.jit
    def score(x):
        terms = greedy_episodes(env, workflow.agent, agent_state.replace(params=unravel(x)),
                                jax.random.PRNGKey(seed + 1000), with_terms=True)[3]
        return jnp.mean(terms[:, index], axis=0)

    return np.stack([np.asarray(score(x)) for x in flat_members])


def run_seed(seed, generations, weights, episodes):
    cfg = load_config("nsga2_halfcheetah", num_iterations=generations, eval_interval=generations)
    reference = jnp.asarray(cfg["nsga2"]["reference_point"], jnp.float32)
    start = time.perf_counter()
    workflow = build(cfg, recorders=[])
    state = workflow.learn(workflow.init(jax.random.PRNGKey(seed)))
    front = np.asarray(workflow._front(state.objectives)[1])
    nsga_points = held_out_points(workflow, state.agent_state, np.asarray(state.population)[front], seed, episodes)
    nsga_seconds = time.perf_counter() - start

    es_points, start = [], time.perf_counter()
    for w in weights:
        es_cfg = load_config("es_openes_hopper", num_iterations=generations // len(weights),
                             eval_interval=generations // len(weights))
        es_cfg["env"], es_cfg["agent"] = cfg["env"], cfg["agent"]
        es_cfg["es"].update(population_size=cfg["nsga2"]["population_size"], obs_norm=False,
                            objectives=list(cfg["nsga2"]["objectives"]), objective_weights=[1.0, float(w)])
        es_workflow = build(es_cfg, recorders=[])
        es_state = es_workflow.learn(es_workflow.init(jax.random.PRNGKey(seed)))
        mean = ravel_pytree(es_state.agent_state.params)[0][None]
        es_points.append(held_out_points(es_workflow, es_state.agent_state, np.asarray(mean), seed, episodes)[0])
    es_points = np.stack(es_points)
    return {
        "seed": seed,
        "nsga2_hypervolume": float(hypervolume_2d(jnp.asarray(nsga_points), reference)),
        "weighted_es_hypervolume": float(hypervolume_2d(jnp.asarray(es_points), reference)),
        "nsga2_points": nsga_points.tolist(), "weighted_es_points": es_points.tolist(),
        "env_steps_each": generations * 32 * cfg["env"]["episode_length"],
        "nsga2_seconds": round(nsga_seconds, 1), "weighted_es_seconds": round(time.perf_counter() - start, 1),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[5601, 5602, 5603, 5604, 5605])
    parser.add_argument("--generations", type=int, default=36)
    parser.add_argument("--weights", type=float, nargs="+", default=[0.1, 1.0, 10.0])
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    results = []
    for seed in args.seeds:
        results.append(run_seed(seed, args.generations, args.weights, args.episodes))
        r = results[-1]
        print(json.dumps({k: v for k, v in r.items() if not k.endswith("points")}), flush=True)
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"args": vars(args), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()

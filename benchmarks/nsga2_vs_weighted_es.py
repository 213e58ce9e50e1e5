"""NSGA-II, its survivors scored once or re-scored, against weighted-sum OpenES at equal env
steps, by hypervolume through the whole budget, on fresh seeds.

Every side on configs/nsga2_halfcheetah.yaml's env (brax halfcheetah, spring, 200-step
episodes, objectives reward_run and reward_ctrl), the same [32, 32] tanh policy and the same
env step budget, ``--generations`` x 32 episodes x 200 steps:

* ``nsga2_never``: NSGA-II with ``nsga2.rescore_survivors=never`` (each member scored once,
  as a child), ``G`` generations of 32 episodes;
* ``nsga2_mean``: ``nsga2.rescore_survivors=mean`` (the population re-scored each generation,
  the running mean of every episode a member played), ``G / 2`` generations of 64 episodes;
* ``nsga2_never_e2`` (``--sides never:2``): scored once, each child over 2 episodes (the
  remedy EvoRL's NSGA-II takes, with 16), ``G / 2`` generations of 64 episodes;
* ``weighted_es``: OpenES (es_openes_hopper's settings otherwise) once per weight vector
  ``(1, w)`` of ``--weights``, each for ``G / k`` generations of 32 episodes on the fitness
  ``reward_run + w reward_ctrl``.

At ``--checkpoints`` points equally spaced in env steps each side is scored the same way on
held-out episodes (env key ``seed + 1000``, ``--episodes`` each, the same at every point):
NSGA-II's front (its rank-0 members by their stored objectives) and the current mean of each
OpenES run play greedily, their mean term returns are the points, and the hypervolume of a
side's points above the config's reference point is its score. The hypervolume NSGA-II
records from its stored scores (``train/hypervolume``) is kept for every generation beside it.
One JSON line per seed and side goes to ``--out`` (settings, machine and load in each line).

    python benchmarks/nsga2_vs_weighted_es.py --seeds 7001 7002 7003 --out benchmarks/results/nsga2/rescore.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from _common import build, load_config
from evorl.engine.evaluator import greedy_episodes
from evorl.rl.multi_objective import hypervolume_2d

CONFIG = "nsga2_halfcheetah"


def held_out_scorer(workflow, names, seed, episodes):
    """``score(flat [M, D]) -> [M, K]``: each member's mean term returns over ``episodes``
    held-out greedy episodes (the same env seeds for every member and every call)."""
    env = workflow.env.with_num_envs(episodes)
    index = np.asarray([env.reward_terms.index(n) for n in names])
    template = workflow.init(jax.random.PRNGKey(0)).agent_state
    _, unravel = ravel_pytree(template.params)

    @jax.jit
    def score(flat):
        def one(x):
            terms = greedy_episodes(env, workflow.agent, template.replace(params=unravel(x)),
                                    jax.random.PRNGKey(seed + 1000), with_terms=True)[3]
            return jnp.mean(terms[:, index], axis=0)
        return jax.vmap(one)(flat)

    return score


def hypervolume(points, reference) -> float:
    return float(hypervolume_2d(jnp.asarray(points, jnp.float32), jnp.asarray(reference, jnp.float32)))


def run_nsga2(seed, side, budget, args):
    """``side``: a ``rescore_survivors`` value, ``:E`` after it for ``E`` episodes per member."""
    mode, _, episodes = side.partition(":")
    cfg = load_config(CONFIG)
    cfg["nsga2"]["rescore_survivors"] = mode
    cfg["nsga2"]["episodes_per_member"] = int(episodes or cfg["nsga2"]["episodes_per_member"])
    workflow = build(cfg, recorders=[])
    per_generation = workflow.env_steps_per_iteration
    generations = budget // per_generation
    stride = generations // args.checkpoints
    reference, names = cfg["nsga2"]["reference_point"], cfg["nsga2"]["objectives"]
    score = held_out_scorer(workflow, names, seed, args.episodes)
    start = time.perf_counter()
    state = workflow.init(jax.random.PRNGKey(seed))
    stored, curve = [], []
    for done in range(1, generations + 1):
        state, metrics = workflow.executor.run(state, 1)
        stored.append(float(np.asarray(metrics["hypervolume"])))
        if done % stride == 0:
            front = np.asarray(workflow._front(state.objectives)[1])
            points = np.asarray(score(state.population))[front]
            curve.append({"generation": done, "env_steps": done * per_generation,
                          "held_out_hypervolume": hypervolume(points, reference),
                          "stored_hypervolume": stored[-1], "front_size": int(front.sum()),
                          "front_episodes": float(np.asarray(metrics["front_episodes"])),
                          "front_held_out": points.tolist(),
                          "front_stored": np.asarray(state.objectives)[front].tolist()})
    label = f"nsga2_{mode}" + (f"_e{episodes}" if episodes else "")
    return {"side": label, "episodes_per_member": cfg["nsga2"]["episodes_per_member"], "generations": generations,
            "env_steps_per_generation": per_generation,
            "stored_hypervolume_per_generation": stored, "curve": curve,
            "seconds": round(time.perf_counter() - start, 1)}


def run_weighted_es(seed, budget, args):
    cfg = load_config(CONFIG)
    reference, names = cfg["nsga2"]["reference_point"], cfg["nsga2"]["objectives"]
    runs = []
    for w in args.weights:
        es_cfg = load_config("es_openes_hopper")
        es_cfg["env"], es_cfg["agent"] = cfg["env"], cfg["agent"]
        es_cfg["es"].update(population_size=cfg["nsga2"]["population_size"], obs_norm=False,
                            objectives=list(names), objective_weights=[1.0, float(w)])
        runs.append(build(es_cfg, recorders=[]))
    per_generation = runs[0].env_steps_per_iteration
    generations = budget // (len(runs) * per_generation)
    stride = generations // args.checkpoints
    score = held_out_scorer(runs[0], names, seed, args.episodes)
    start = time.perf_counter()
    points = []  # [checkpoints][weights] held-out points of each run's mean
    for workflow in runs:
        state, means = workflow.init(jax.random.PRNGKey(seed)), []
        for _ in range(args.checkpoints):
            state, _ = workflow.executor.run(state, stride)
            means.append(ravel_pytree(state.agent_state.params)[0])
        points.append(np.asarray(score(jnp.stack(means))))  # [checkpoints, K]
    curve = []
    for c in range(args.checkpoints):
        at = np.stack([p[c] for p in points])  # [weights, K]
        curve.append({"generation": (c + 1) * stride, "env_steps": (c + 1) * stride * per_generation * len(runs),
                      "held_out_hypervolume": hypervolume(at, reference), "points": at.tolist()})
    return {"side": "weighted_es", "weights": list(args.weights), "generations_per_weight": generations,
            "env_steps_per_generation": per_generation, "curve": curve,
            "seconds": round(time.perf_counter() - start, 1)}


def plot(records: list[dict], figure: str) -> None:
    """Held-out hypervolume against env steps for every side (one line per seed, the mean
    over seeds bold) and NSGA-II's stored hypervolume every generation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"nsga2_never": "tab:red", "nsga2_mean": "tab:blue", "nsga2_latest": "tab:purple",
               "nsga2_never_e2": "tab:orange", "weighted_es": "tab:grey"}
    fig, (held_out, stored) = plt.subplots(1, 2, figsize=(11, 4))
    for side, colour in colours.items():
        rows = [r for r in records if r["side"] == side]
        if not rows:
            continue
        for r in rows:
            held_out.plot([p["env_steps"] for p in r["curve"]], [p["held_out_hypervolume"] for p in r["curve"]],
                          color=colour, alpha=0.3, lw=1)
            if "stored_hypervolume_per_generation" in r:
                hv = r["stored_hypervolume_per_generation"]
                stored.plot(np.arange(1, len(hv) + 1) * r["env_steps_per_generation"], hv, color=colour,
                            alpha=0.6, lw=1)
        steps = [p["env_steps"] for p in rows[0]["curve"]]
        mean = np.mean([[p["held_out_hypervolume"] for p in r["curve"]] for r in rows], axis=0)
        held_out.plot(steps, mean, color=colour, lw=2.5, marker="o",
                      label=f"{side} (seeds {', '.join(str(r['seed']) for r in rows)})")
    held_out.set(title="held-out hypervolume (front re-played on fixed episodes)", xlabel="env steps")
    stored.set(title="NSGA-II's recorded hypervolume (its stored scores)", xlabel="env steps")
    held_out.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(figure, dpi=110)


def machine() -> dict:
    return {"host": platform.node(), "cpus": os.cpu_count(), "backend": jax.default_backend(),
            "jax": jax.__version__, "platform": platform.platform()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[7001, 7002, 7003])
    parser.add_argument("--generations", type=int, default=60, help="budget: G x 32 episodes x 200 steps")
    parser.add_argument("--weights", type=float, nargs="+", default=[0.1, 1.0, 10.0])
    parser.add_argument("--episodes", type=int, default=4, help="held-out episodes per member and point")
    parser.add_argument("--checkpoints", type=int, default=5, help="held-out points along the budget")
    parser.add_argument("--sides", nargs="+", default=["never", "mean", "weighted_es"],
                        help="weighted_es, or NSGA-II's rescore_survivors (never, mean, latest), ':E' after it "
                             "for E episodes per member (never:2: every child scored over 2 episodes)")
    parser.add_argument("--out", default=None, help="JSON lines, appended")
    parser.add_argument("--plot", default=None, help="draw --out's records to this PNG and exit")
    args = parser.parse_args()
    if args.plot:
        plot([json.loads(line) for line in Path(args.out).read_text().splitlines() if line.strip()], args.plot)
        return
    # one compilation for every seed: the programs differ only in their data
    jax.config.update("jax_compilation_cache_dir", os.environ.get("EVORL_COMPILATION_CACHE")
                      or str(Path(tempfile.gettempdir()) / "evorl_nsga2_bench_cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
    budget = args.generations * 32 * load_config(CONFIG)["env"]["episode_length"]
    settings = {"config": CONFIG, "env_steps": budget, "weights": args.weights, "held_out_episodes": args.episodes,
                "checkpoints": args.checkpoints, "reference_point": load_config(CONFIG)["nsga2"]["reference_point"]}
    # NSGA-II's sides on every seed first, the baseline after
    order = [(seed, side) for seed in args.seeds for side in args.sides if side != "weighted_es"]
    order += [(seed, "weighted_es") for seed in args.seeds if "weighted_es" in args.sides]
    for seed, side in order:
        load_before = os.getloadavg()[0]
        if side == "weighted_es":
            record = run_weighted_es(seed, budget, args)
        else:
            record = run_nsga2(seed, side, budget, args)
        record = {"seed": seed, **record, "settings": settings, "machine": machine(),
                  "load": [round(load_before, 2), round(os.getloadavg()[0], 2)],
                  "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
        summary = [round(p["held_out_hypervolume"]) for p in record["curve"]]
        print(json.dumps({"seed": seed, "side": record["side"], "held_out_hypervolume": summary,
                          "seconds": record["seconds"], "load": record["load"]}), flush=True)
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            with open(args.out, "a") as f:
                f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()

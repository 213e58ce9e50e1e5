"""Whether a backend computes what the CPU computes, for the MinAtar runs.

* The games: each gymnax MinAtar game stepped with fixed keys and uniformly random actions,
  16 envs x 2,600 steps. Rewards, episode ends and observations are integers, so a backend
  that plays the same game gives the same totals, bit for bit.
* The games in a population's shape: the same, each game vmapped over ``[8, 128]``
  environments (eight agents' 128 evaluation episodes), fewer steps; as gymnax draws the
  observations and as evorl does (:mod:`evorl.envs.minatar_obs`, without boolean scatters).
* A population's agents: ``ppo_minatar_freeway`` (sticky actions off) trained as 4 and as 8
  agents from one key; agents 0-3 get the same keys in both, and a step never mixes agents, so
  agent ``i``'s parameters after the first iterations are the same in both, up to float rounding
  (on the CPU bit for bit). Per agent, the largest difference relative to the leaf's magnitude.
* Training: ``ppo_minatar_freeway`` (sticky actions off) for a few iterations from one key,
  at float32 matmul precision and at the backend's default (a TPU's rounds the inputs of every
  float32 matmul to bfloat16). Per parameter leaf (256 entries at fixed places), the largest
  difference from the CPU's, relative to the leaf's largest magnitude; float arithmetic differs between backends, so this
  is a size to read, not a pass or fail.

Here (the reference), then on the other backend::

    python benchmarks/backend_agreement.py --out benchmarks/results/tpu/agreement_cpu.json
    python benchmarks/backend_agreement.py --against benchmarks/results/tpu/agreement_cpu.json --out F
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
GAMES = ("Breakout-MinAtar", "Asterix-MinAtar", "Freeway-MinAtar", "SpaceInvaders-MinAtar", "Seaquest-MinAtar")
NUM_ENVS, STEPS, ITERATIONS = 16, 2600, 3  # Freeway's episodes end at 2,500 steps
SECTIONS = ("games", "games_population_shape", "games_population_shape_evorl", "population", "training")


def play(name: str, shape: tuple[int, ...] = (NUM_ENVS,), steps: int = STEPS, evorl_obs: bool = False) -> dict:
    """Totals of one game's fixed random play over ``shape`` environments (a vmap per axis):
    reward, episode ends, the set observation cells weighted by their place, and the same
    weighted by step (so a late difference shows too). ``evorl_obs``: observations drawn as
    evorl draws them."""
    import gymnax
    import jax
    import jax.numpy as jnp

    from evorl.envs.minatar_obs import without_bool_scatters

    env, params = gymnax.make(name)
    env = without_bool_scatters(env) if evorl_obs else env
    n = int(np.prod(shape))

    def batched(fn, in_axes):  # fn vmapped over each axis of ``shape``
        for _ in shape:
            fn = jax.vmap(fn, in_axes)
        return fn

    keys = lambda key: jax.random.split(key, n).reshape(*shape, -1)  # noqa: E731
    obs, state = batched(env.reset, (0, None))(keys(jax.random.PRNGKey(0)), params)

    def step(carry, key):
        obs, state = carry
        key_action, key_step = jax.random.split(key)
        action = jax.random.randint(key_action, shape, 0, env.num_actions)
        obs, state, reward, terminated, truncated, _ = batched(env.step, (0, 0, 0, None))(
            keys(key_step), state, action, params)
        flat = obs.reshape(n, -1).astype(jnp.int32)  # [N, D]
        cells = (flat * jnp.arange(1, flat.shape[1] + 1, dtype=jnp.int32)).sum(axis=1)  # [N]: where the set cells are
        return (obs, state), (reward.reshape(n).astype(jnp.int32), (terminated | truncated).reshape(n).astype(jnp.int32),
                              cells)

    run = jax.jit(lambda keys: jax.lax.scan(step, (obs, state), keys)[1])
    reward, ends, cells = (np.asarray(x, np.int64) for x in run(jax.random.split(jax.random.PRNGKey(1), steps)))
    weights = np.arange(1, steps + 1, dtype=np.int64)[:, None]  # [T, 1]
    return {"reward": int(reward.sum()), "episode_ends": int(ends.sum()), "cells": int(cells.sum()),
            "cells_by_step": int((cells * weights).sum())}


def freeway_config(**training) -> dict:
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(OmegaConf.load(ROOT / "configs" / "ppo_minatar_freeway.yaml"), resolve=True)
    cfg.pop("defaults", None)
    cfg["env"]["repeat_action_probability"] = 0.0
    cfg["training"].update(training)
    return cfg


def population(iterations: int = 2, agents: tuple[int, int] = (4, 8)) -> dict:
    """Agents ``0 .. agents[0] - 1`` trained in a population of ``agents[0]`` and of
    ``agents[1]`` from one key: per agent, the largest difference of a parameter leaf relative to
    its largest magnitude."""
    import jax

    from evorl.workflows import resolve_workflow_cls

    def params(n):
        cfg = freeway_config(num_seeds=n, num_iterations=iterations, eval_interval=iterations)
        workflow = resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=[])
        state, _ = workflow.run_iterations(workflow.init(jax.random.PRNGKey(3)), iterations)
        return [np.asarray(leaf, np.float64) for leaf in jax.tree.leaves(state.agent_state.params)]

    small, large = params(agents[0]), params(agents[1])
    return {"iterations": iterations, "agents": list(agents), "relative_difference_per_agent": [
        max(float(np.max(np.abs(a[i] - b[i])) / max(np.max(np.abs(a[i])), 1e-12)) for a, b in zip(small, large))
        for i in range(agents[0])]}


def train(precision: str) -> dict:
    """``ppo_minatar_freeway``'s parameters after ``ITERATIONS`` iterations from one key, per leaf."""
    import jax

    from evorl.workflows import resolve_workflow_cls

    cfg = freeway_config(num_iterations=ITERATIONS, eval_interval=ITERATIONS)
    with jax.default_matmul_precision(None if precision == "default" else precision):
        workflow = resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=[])
        state, _ = workflow.run_iterations(workflow.init(jax.random.PRNGKey(3)), ITERATIONS)
    leaves = jax.tree_util.tree_flatten_with_path(state.agent_state.params)[0]
    out = {}
    for path, leaf in leaves:  # 256 entries at fixed places of each leaf keep the record small
        flat = np.asarray(leaf, np.float64).ravel()
        out[jax.tree_util.keystr(path)] = flat[np.linspace(0, flat.size - 1, min(256, flat.size)).astype(int)].tolist()
    return out


def compare(ours: dict, reference: dict) -> dict:
    """Per game, whether the totals are equal; per training leaf, max |ours - CPU| / max |CPU|.
    Only the checks (and games) ``ours`` ran are compared."""
    games = {}
    for section, label in (("games", ""), ("games_population_shape", " [8, 128], gymnax's observations"),
                           ("games_population_shape_evorl", " [8, 128], evorl's observations")):
        for g in ours.get(section, {}):
            games[f"{g}{label}"] = {"equal": ours[section][g] == reference[section][g], "here": ours[section][g],
                                    "reference": reference[section][g]}
    training = {}
    for precision, leaves in reference["training"].items() if "training" in ours else ():
        training[precision] = {
            leaf: float(np.max(np.abs(np.asarray(ours["training"][precision][leaf]) - np.asarray(values)))
                        / max(float(np.max(np.abs(values))), 1e-12))
            for leaf, values in leaves.items()}
    return {"games": games, "training_relative_difference": training}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="where this backend's figures (and the comparison) go, JSON")
    p.add_argument("--against", help="the reference's JSON (written on the CPU by this script)")
    p.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS),
                   help="which checks to run (default: all; the reference must hold every one asked for)")
    p.add_argument("--games", nargs="+", choices=GAMES, default=list(GAMES), help="which games the game checks play")
    args = p.parse_args()
    import jax

    start = time.perf_counter()
    result = {"backend": jax.default_backend(), "device": jax.devices()[0].device_kind, "jax": jax.__version__}
    checks = {"games": lambda: {g: play(g) for g in args.games},
              "games_population_shape": lambda: {g: play(g, (8, 128), 300) for g in args.games},
              "games_population_shape_evorl": lambda: {g: play(g, (8, 128), 300, evorl_obs=True) for g in args.games},
              "population": lambda: [population(1), population(ITERATIONS)],
              "training": lambda: {p: train(p) for p in ("highest", "default")}}
    for section in args.sections:
        result[section] = checks[section]()
    result["wall_s"] = round(time.perf_counter() - start, 1)
    if args.against:
        result["comparison"] = compare(result, json.loads(Path(args.against).read_text()))
        for game, c in result["comparison"]["games"].items():
            print(f"{game}: {'the same totals' if c['equal'] else 'DIFFERENT: ' + json.dumps(c)}")
        for precision, leaves in result["comparison"]["training_relative_difference"].items():
            print(f"ppo_minatar_freeway, {ITERATIONS} iterations, {precision} matmul precision: largest relative "
                  f"difference of a parameter leaf {max(leaves.values()):.2e}")
    for pop in result.get("population", []):
        print(f"ppo_minatar_freeway, {pop['iterations']} iterations, agents 0-{pop['agents'][0] - 1} in populations of "
              f"{pop['agents'][0]} and {pop['agents'][1]}: largest relative difference per agent "
              + ", ".join(f"{d:.1e}" for d in pop["relative_difference_per_agent"]))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result))
    print(f"wrote {args.out} ({result['wall_s']} s)")


if __name__ == "__main__":
    main()

"""Whether a backend computes what the CPU computes, for the MinAtar runs.

* The games: each gymnax MinAtar game stepped with fixed keys and uniformly random actions,
  16 envs x 2,600 steps. Rewards, episode ends and observations are integers, so a backend
  that plays the same game gives the same totals, bit for bit.
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


def play(name: str) -> dict:
    """Totals of one game's fixed random play: reward, episode ends, the set observation cells
    weighted by their place, and the same weighted by step (so a late difference shows too)."""
    import gymnax
    import jax
    import jax.numpy as jnp

    env, params = gymnax.make(name)
    obs, state = jax.vmap(env.reset, (0, None))(jax.random.split(jax.random.PRNGKey(0), NUM_ENVS), params)

    def step(carry, key):
        obs, state = carry
        key_action, key_step = jax.random.split(key)
        action = jax.random.randint(key_action, (NUM_ENVS,), 0, env.num_actions)
        obs, state, reward, terminated, truncated, _ = jax.vmap(env.step, (0, 0, 0, None))(
            jax.random.split(key_step, NUM_ENVS), state, action, params)
        flat = obs.reshape(NUM_ENVS, -1).astype(jnp.int32)  # [N, D]
        cells = (flat * jnp.arange(1, flat.shape[1] + 1, dtype=jnp.int32)).sum(axis=1)  # [N]: where the set cells are
        return (obs, state), (reward.astype(jnp.int32), (terminated | truncated).astype(jnp.int32), cells)

    run = jax.jit(lambda keys: jax.lax.scan(step, (obs, state), keys)[1])
    reward, ends, cells = (np.asarray(x, np.int64) for x in run(jax.random.split(jax.random.PRNGKey(1), STEPS)))
    weights = np.arange(1, STEPS + 1, dtype=np.int64)[:, None]  # [T, 1]
    return {"reward": int(reward.sum()), "episode_ends": int(ends.sum()), "cells": int(cells.sum()),
            "cells_by_step": int((cells * weights).sum())}


def train(precision: str) -> dict:
    """``ppo_minatar_freeway``'s parameters after ``ITERATIONS`` iterations from one key, per leaf."""
    import jax
    from omegaconf import OmegaConf

    from evorl.workflows import resolve_workflow_cls

    cfg = OmegaConf.to_container(OmegaConf.load(ROOT / "configs" / "ppo_minatar_freeway.yaml"), resolve=True)
    cfg.pop("defaults", None)
    cfg["env"]["repeat_action_probability"] = 0.0
    cfg["training"].update(num_iterations=ITERATIONS, eval_interval=ITERATIONS)
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
    """Per game, whether the totals are equal; per training leaf, max |ours - CPU| / max |CPU|."""
    games = {g: {"equal": ours["games"][g] == reference["games"][g], "here": ours["games"][g],
                 "reference": reference["games"][g]} for g in reference["games"]}
    training = {}
    for precision, leaves in reference["training"].items():
        training[precision] = {
            leaf: float(np.max(np.abs(np.asarray(ours["training"][precision][leaf]) - np.asarray(values)))
                        / max(float(np.max(np.abs(values))), 1e-12))
            for leaf, values in leaves.items()}
    return {"games": games, "training_relative_difference": training}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="where this backend's figures (and the comparison) go, JSON")
    p.add_argument("--against", help="the reference's JSON (written on the CPU by this script)")
    args = p.parse_args()
    import jax

    start = time.perf_counter()
    result = {"backend": jax.default_backend(), "device": jax.devices()[0].device_kind, "jax": jax.__version__,
              "games": {g: play(g) for g in GAMES},
              "training": {p: train(p) for p in ("highest", "default")}}
    result["wall_s"] = round(time.perf_counter() - start, 1)
    if args.against:
        result["comparison"] = compare(result, json.loads(Path(args.against).read_text()))
        for game, c in result["comparison"]["games"].items():
            print(f"{game}: {'the same totals' if c['equal'] else 'DIFFERENT: ' + json.dumps(c)}")
        for precision, leaves in result["comparison"]["training_relative_difference"].items():
            print(f"ppo_minatar_freeway, {ITERATIONS} iterations, {precision} matmul precision: largest relative "
                  f"difference of a parameter leaf {max(leaves.values()):.2e}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result))
    print(f"wrote {args.out} ({result['wall_s']} s)")


if __name__ == "__main__":
    main()

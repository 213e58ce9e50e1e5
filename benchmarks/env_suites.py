"""The JAX env suites' learning configs: a uniform random policy's return (the baseline each
config's target is stated against) and the raw env steps/s, both with the config's own env
section and ``training.num_envs``.

    python benchmarks/env_suites.py [CONFIG ...]   # default: every suite's config

The 2-core CPU's figures are in the benchmarks README as it was at commit dc471e3,
"JAX env suites" (``git show dc471e3:benchmarks/README.md``).
"""

from __future__ import annotations

import argparse
import sys
import time

import jax
import numpy as np
import yaml

from evorl.envs import Discrete, create_env

from suites import CONFIG_DIR

SUITE_CONFIGS = ("ppo_playground_cartpole_balance", "ppo_playground_cartpole_swingup", "ppo_craftax_classic",
                 "ppo_jumanji_snake", "ppo_xminigrid_empty")


def uniform_actions(env, key: jax.Array, num_steps: int) -> jax.Array:
    """``[T, B, *action_shape]`` uniform over the action space."""
    space = env.action_space
    if isinstance(space, Discrete):
        return jax.random.randint(key, (num_steps, env.num_envs), 0, space.n)
    return jax.random.uniform(key, (num_steps, env.num_envs) + space.shape, minval=space.low, maxval=space.high)


def random_play(env, num_steps: int, seed: int = 0):
    """``(returns of the episodes that ended, wall seconds of the compiled run)`` of
    ``num_steps`` steps of every copy under uniform random actions (compilation excluded)."""

    def rollout(key):
        def step(state, action):
            state = env.step(state, action)
            return state, (state.done, state.episode_return)

        reset_key, action_key = jax.random.split(key)
        return jax.lax.scan(step, env.reset(reset_key), uniform_actions(env, action_key, num_steps))[1]

    run = jax.jit(rollout)
    jax.block_until_ready(run(jax.random.PRNGKey(seed + 1)))  # compiles, and runs every branch once
    start = time.perf_counter()
    done, returns = jax.block_until_ready(run(jax.random.PRNGKey(seed)))
    return np.asarray(returns)[np.asarray(done)], time.perf_counter() - start


def measure(config: str, num_steps: int = 2000) -> dict:
    """``num_steps`` steps of each of the config's ``training.num_envs`` copies: 2 whole
    1000-step DM Control episodes each, hundreds of Craftax / Snake / MiniGrid ones."""
    cfg = yaml.safe_load((CONFIG_DIR / f"{config}.yaml").read_text())
    env = create_env(cfg["env"], parallel=cfg["training"]["num_envs"])
    returns, seconds = random_play(env, num_steps)
    return {"config": config, "env": env.env_name, "num_envs": env.num_envs, "steps": num_steps * env.num_envs,
            "random_return": float(returns.mean()) if returns.size else float("nan"),
            "random_return_std": float(returns.std()) if returns.size else float("nan"),
            "episodes": int(returns.size), "env_steps_per_s": num_steps * env.num_envs / seconds}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*", default=list(SUITE_CONFIGS))
    for config in parser.parse_args(argv).configs:
        r = measure(config)
        print(f"{r['config']:<34} {r['env']:<28} random return {r['random_return']:8.3f} +- {r['random_return_std']:.3f} "
              f"({r['episodes']} episodes); {r['env_steps_per_s']:9.0f} env steps/s ({r['num_envs']} envs)", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

"""Does envpool's asynchronous ``send``/``recv`` pay for an actor on this machine?

One actor loop, the run's own policy, two ways of stepping envpool, alternating in
``--rounds`` rounds, each for ``--seconds``:

* **sync** (what ``EnvpoolEnv`` does): one pool of ``B`` copies, ``batch_size = B``; each step
  the policy acts on all ``B`` observations, then ``pool.step`` steps all of them and waits.
* **async** (Sebulba's and Cleanba's actor): one pool of ``2B`` copies, ``batch_size = B``;
  ``recv`` returns whichever ``B`` copies finished first, the policy acts on them, ``send``
  hands their actions back, and the other ``B`` copies step in envpool's threads while the
  policy computes. Twice the envs of sync: not a comparison at equal settings.
* **async, same envs**: the async loop at sync's env count, one pool of ``B`` copies with
  ``batch_size = B/2``: each policy call acts on ``B/2`` copies while the other half steps.
  This is what an async actor would be at a config's own ``num_envs``.

The policy is the config's agent at its initial parameters through the actor's jitted policy
step (:class:`evorl.rl.host_rollout.PolicyStep`: keys, network, sampling, env actions), its
outputs fetched to NumPy as ``host_rollout`` does; the observations are converted as
``EnvpoolEnv`` does (Atari ``[B, C, H, W]`` -> ``[B, H, W, C]``). Printed: agent steps/s of
each way per round and async / sync, then the env alone: microseconds per step of the ``B``
copies with random actions, envpool's and (CartPole) gymnasium's NumPy vector env's. Cases: ``cartpole`` (``impala_gymnasium_cartpole`` on
envpool, ``B = 32``), ``breakout`` (``impala_atari_breakout`` on envpool, ``B = 16``, Nature
CNN; frames = 4 x agent steps).

    python benchmarks/envpool_async.py [--cases cartpole,breakout] [--seconds 5] [--rounds 2]
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np
from _common import build, load_config

from evorl.envs.envpool_env import quiet_float64_bounds
from evorl.rl.host_rollout import cached_policy_step

CASES = {"cartpole": ("impala_gymnasium_cartpole", 32), "breakout": ("impala_atari_breakout", 16)}


def policy(case: str):
    """``(EnvpoolEnv of B copies, act(obs [B, ...]) -> env actions [B])`` of the case's config."""
    name, num_envs = CASES[case]
    cfg = load_config(name, num_envs=num_envs)
    cfg["env"]["env_type"] = "envpool"
    cfg["env"].pop("vectorization", None)
    cfg["runner"] = {**cfg.get("runner", {}), "num_actors": 1}
    workflow = build(cfg, recorders=[])
    agent, env = workflow.agent, workflow.env
    agent_state = agent.init(jax.random.PRNGKey(0))
    step = cached_policy_step(agent)
    keys = jax.random.split(jax.random.PRNGKey(1), 16)
    counter = iter(range(1 << 62))

    def act(obs: np.ndarray, env_ids: np.ndarray) -> np.ndarray:
        outputs, _ = step(agent_state, obs, keys, np.int32(next(counter) % 16), env_ids)
        actions, extras, env_actions = jax.tree.map(np.asarray, outputs)
        return env_actions

    return env, act


def make_pool(env, num_envs: int, batch_size: int):
    import envpool

    quiet_float64_bounds()
    return envpool.make(env._task, env_type="gymnasium", num_envs=num_envs, batch_size=batch_size, seed=0,
                        **env._options)


def run_sync(env, act, seconds: float) -> float:
    b = env.num_envs
    pool, ids = make_pool(env, b, b), np.arange(b)
    obs, _ = pool.reset()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        actions = env._env_actions(act(env._observe(obs), ids))
        obs, *_ = pool.step(actions, ids)
        steps += b
    pool.close()
    return steps / (time.perf_counter() - start)


def run_async(env, act, seconds: float, num_envs: int, batch_size: int) -> float:
    """Agent steps/s of the async loop over a pool of ``num_envs`` copies that returns
    ``batch_size`` of them per ``recv``."""
    b = env.num_envs
    pool = make_pool(env, num_envs, batch_size)
    pool.async_reset()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        obs, _, _, _, info = pool.recv()
        ids = np.asarray(info["env_id"])
        pool.send(env._env_actions(act(env._observe(obs), ids % b)), ids)
        steps += batch_size
    pool.close()
    return steps / (time.perf_counter() - start)


def env_alone(env, seconds: float) -> tuple[float, float | None]:
    """Microseconds per step of all ``B`` copies with random actions and no policy: envpool's
    ``pool.step`` and, where gymnasium has a vector entry point for the env (CartPole),
    gymnasium's own vector env (None otherwise)."""
    import gymnasium as gym

    b, rng = env.num_envs, np.random.default_rng(0)
    actions = [env._env_actions(rng.integers(0, env.action_space.n, b)) for _ in range(64)]

    def timed(step) -> float:
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            step(actions[steps % 64])
            steps += 1
        return (time.perf_counter() - start) / steps * 1e6

    pool, ids = make_pool(env, b, b), np.arange(b)
    pool.reset()
    pooled = timed(lambda a: pool.step(a, ids))
    pool.close()
    if env._atari is not None:
        return pooled, None
    vec = gym.make_vec(env._task, num_envs=b, vectorization_mode="vector_entry_point")
    vec.reset(seed=0)
    numpy = timed(vec.step)
    vec.close()
    return pooled, numpy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    for case in args.cases.split(","):
        env, act = policy(case)
        b = env.num_envs
        run_sync(env, act, 0.5)  # compile the policy step at B
        run_async(env, act, 0.5, b, b // 2)  # and at B/2
        for round_ in range(args.rounds):
            sync = run_sync(env, act, args.seconds)
            doubled = run_async(env, act, args.seconds, 2 * b, b)
            same = run_async(env, act, args.seconds, b, b // 2)
            print(f"{case} round {round_}: sync {sync:,.0f} agent steps/s; async with 2B envs {doubled:,.0f} "
                  f"(x{doubled / sync:.2f}); async with B envs {same:,.0f} (x{same / sync:.2f})", flush=True)
            pooled, numpy = env_alone(env, args.seconds / 2)
            other = "" if numpy is None else f", gymnasium's vector env {numpy:.1f} us"
            print(f"{case} round {round_}, env alone ({b} copies, random actions): envpool {pooled:.1f} us per "
                  f"step{other}", flush=True)


if __name__ == "__main__":
    main()

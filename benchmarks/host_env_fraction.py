"""Training speed on host environments as a fraction of what the environments alone can do.

For each case, in one process, alternating in ``--rounds`` rounds:

* **env only**: the config's training env (the same env type, vectorization and
  ``num_envs`` copies, preprocessing included) stepped in one thread with uniformly random
  actions for ``--seconds``, no agent: agent steps/s;
* **training**: the config trained through the actor-learner (``runner.num_actors`` threads
  and the learner) for ``--iterations`` updates; agent steps/s over training (the run's
  ``steps_per_s``: mean over the logging points after the first, which holds the compile;
  evaluation excluded).

The fraction is training / env only. Atari frames are agent steps x ``frame_skip`` (4) on both
sides, so the fraction is the same in frames. Cases: ``inverted_pendulum_ppo`` (gymnasium
MuJoCo InvertedPendulum-v5, ``configs/ppo_gymnasium_inverted_pendulum.yaml``),
``inverted_pendulum_sac`` (``configs/sac_gymnasium_inverted_pendulum.yaml``: 32 gradient steps
per 32 env steps, so the learner bounds it), ``breakout_envpool`` (envpool ALE/Breakout-v5,
``configs/impala_atari_breakout.yaml`` with ``env.env_type=envpool``: a Nature CNN learner),
``breakout_gymnasium`` (the same config as it is: gymnasium + ale-py, one env per copy).
``--set section.key=value`` overrides the configs (``runner.num_actors=8``,
``training.num_envs=64``): the env-only side steps the same ``num_envs`` copies.

    python benchmarks/host_env_fraction.py [--cases inverted_pendulum_ppo,breakout_envpool]
        [--iterations 20] [--seconds 5] [--rounds 2] [--set runner.num_actors=8 ...]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _common import apply_overrides, load_config, train

#: case -> (config, env overrides, frames per agent step)
CASES = {
    "inverted_pendulum_ppo": ("ppo_gymnasium_inverted_pendulum", {}, 1),
    "inverted_pendulum_sac": ("sac_gymnasium_inverted_pendulum", {}, 1),
    "breakout_envpool": ("impala_atari_breakout", {"env_type": "envpool"}, 4),
    "breakout_gymnasium": ("impala_atari_breakout", {}, 4),
}


def case_config(case: str, iterations: int, overrides: list[str] = ()) -> dict:
    name, env, _ = CASES[case]
    cfg = load_config(name, num_iterations=iterations, eval_interval=max(1, iterations // 4), eval_episodes=1)
    cfg["env"].update(env)
    apply_overrides(cfg, overrides)
    cfg["logging"] = {"plot": False}
    return cfg


def env_only(cfg: dict, seconds: float) -> float:
    """Agent steps/s of the training env's ``num_envs`` copies under random actions."""
    from evorl.envs import create_env
    from evorl.envs.spaces import Discrete

    env_cfg = dict(cfg["env"])
    env = create_env(env_cfg, episode_length=env_cfg.pop("episode_length", None), parallel=cfg["training"]["num_envs"])
    rng, space, n = np.random.default_rng(0), env.action_space, cfg["training"]["num_envs"]

    def actions():
        if isinstance(space, Discrete):
            return rng.integers(0, space.n, n)
        return rng.uniform(space.low, space.high, (n,) + tuple(space.shape)).astype(np.float32)

    env.reset(0)
    for _ in range(20):  # warm-up
        env.step(actions())
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.step(actions())
        steps += n
    rate = steps / (time.perf_counter() - start)
    env.close()
    return rate


def training(cfg: dict) -> float:
    _, _, rows = train(cfg)
    return float(np.mean([row["steps_per_s"] for row in rows[1:]]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--iterations", type=int, default=20, help="learner updates per training run")
    parser.add_argument("--seconds", type=float, default=5.0, help="env-only stepping time")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--set", nargs="*", default=[], metavar="SECTION.KEY=VALUE", help="config overrides")
    args = parser.parse_args()
    cases = args.cases.split(",")
    results: dict[str, dict[str, list[float]]] = {c: {"env": [], "train": []} for c in cases}
    for r in range(args.rounds):
        for case in cases:
            cfg = case_config(case, args.iterations, args.set)
            order = ("env", "train") if r % 2 == 0 else ("train", "env")
            for side in order:
                rate = env_only(cfg, args.seconds) if side == "env" else training(cfg)
                results[case][side].append(rate)
                print(f"round {r} {case} {side}: {rate:,.0f} agent steps/s", flush=True)
    print("\n| case | env only, agent steps/s | training, agent steps/s | training / env only | frames/s (env only, training) |")
    print("|---|---:|---:|---:|---:|")
    for case in cases:
        env, trained = np.mean(results[case]["env"]), np.mean(results[case]["train"])
        frames = CASES[case][2]
        print(f"| {case} | {env:,.0f} | {trained:,.0f} | {trained / env:.2f} | {env * frames:,.0f}, "
              f"{trained * frames:,.0f} |")


if __name__ == "__main__":
    main()

"""Atari env-layer throughput: game frames per second of the host environments alone.

``ALE/Pong-v5`` with the default DeepMind preprocessing (frame skip 4, 84x84 grayscale,
4 stacked frames, sticky actions), uniformly random actions, no agent: what the env layer
can feed a learner. Rows: the gymnasium backend (Python loop over the copies) and envpool
(C++ threads) when installed. Frames = agent steps x frame_skip.

    python benchmarks/atari_env_throughput.py [--num-envs 8] [--seconds 5]
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def frames_per_second(env_type: str, num_envs: int, seconds: float) -> tuple[float, float, int]:
    """``(frames/s, agent steps/s, steps timed)`` of ``env_type`` stepping for ``seconds``."""
    from evorl.envs import create_env

    env = create_env({"env_name": "ALE/Pong-v5", "env_type": env_type}, parallel=num_envs)
    rng = np.random.default_rng(0)
    env.reset(0)
    for _ in range(10):  # warm-up
        env.step(rng.integers(0, env.action_space.n, num_envs))
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.step(rng.integers(0, env.action_space.n, num_envs))
        steps += 1
    elapsed = time.perf_counter() - start
    env.close()
    agent_steps = steps * num_envs / elapsed
    return agent_steps * 4, agent_steps, steps  # frame_skip = 4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0, help="timed seconds per backend")
    args = parser.parse_args()
    backends = ["gymnasium"]
    try:
        import envpool  # noqa: F401

        backends.append("envpool")
    except ImportError:
        print("envpool is not installed: its row is skipped (pip install -e \".[envpool]\").")
    print(f"ALE/Pong-v5, {args.num_envs} envs, random actions, {args.seconds:.0f} s per backend")
    print(f"{'backend':>10} | {'frames/s':>10} | {'agent steps/s':>13} | {'vector steps':>12}")
    print(f"{'-' * 10}-+-{'-' * 10}-+-{'-' * 13}-+-{'-' * 12}")
    for env_type in backends:
        fps, sps, steps = frames_per_second(env_type, args.num_envs, args.seconds)
        print(f"{env_type:>10} | {fps:>10,.0f} | {sps:>13,.0f} | {steps:>12,}")


if __name__ == "__main__":
    main()

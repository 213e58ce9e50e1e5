"""The score of a uniformly random policy on an Atari game under evorl's preprocessing: the
baseline "clearly above random" is measured against.

    python benchmarks/atari_random.py [--config impala_atari_breakout] [--episodes 32] [--seed 0]

Plays ``--episodes`` episodes (one per env copy) with the env section of the config (same
preprocessing, sticky actions and episode cut as training) and prints the mean, std and
range of the unclipped episode returns.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="impala_atari_breakout")
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    from _common import load_config

    from evorl.envs import create_env

    env_cfg = load_config(args.config)["env"]
    env = create_env(env_cfg, parallel=args.episodes)
    rng = np.random.default_rng(args.seed)
    state = env.reset(args.seed)
    returns = np.full(args.episodes, np.nan)
    for _ in range(env.episode_length):
        state = env.step(rng.integers(0, env.action_space.n, args.episodes))
        ended = state.done & np.isnan(returns)
        returns[ended] = state.episode_return[ended]
        if not np.isnan(returns).any():
            break
    print(f"{env_cfg['env_name']} random policy, {args.episodes} episodes (cut at {env.episode_length} agent steps): "
          f"return {np.mean(returns):.2f} +- {np.std(returns):.2f} (min {np.min(returns):.0f}, max {np.max(returns):.0f})")


if __name__ == "__main__":
    main()

"""Host CartPole-v1: evorl's asynchronous IMPALA against Stable-Baselines3 PPO.

Both train gymnasium's CartPole-v1 (stepped on the host), each for its own budget: SB3 for
``--sb3-steps`` (default 200k: its PPO defaults usually reach 500 by then), evorl for its
config's (``training.num_iterations``, 972,800 env steps; ``--evorl-steps`` to change it).
SB3 with its defaults (``PPO("MlpPolicy", env)``: one env, 2048-step rollouts, 10 epochs
of 64-sample minibatches, [64, 64] tanh MLPs, torch on the CPU), evorl with
``configs/impala_gymnasium_cartpole.yaml`` (2 actors x 16 envs). Each side runs in a fresh
process; the script prints env steps/s (training wall time, compilation excluded for evorl
and reported apart) and the final greedy return over 16 episodes, then the ratio.
Needs ``pip install stable-baselines3`` (and torch).

    python benchmarks/sb3_cartpole.py [--sb3-steps 200000] [--evorl-steps N] [--seeds 0,1,2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
EVAL_EPISODES = 16


def run_sb3(steps: int, seed: int) -> dict:
    import gymnasium as gym
    import numpy as np
    import torch
    from stable_baselines3 import PPO

    torch.set_num_threads(2)
    model = PPO("MlpPolicy", gym.make("CartPole-v1"), seed=seed, device="cpu", verbose=0)
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    seconds = time.perf_counter() - start
    env, returns = gym.make("CartPole-v1"), []
    for episode in range(EVAL_EPISODES):
        obs, _ = env.reset(seed=10_000 + episode)
        total, done = 0.0, False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return {"side": "sb3", "steps": model.num_timesteps, "seconds": seconds, "compile_s": 0.0,
            "eval_return": float(np.mean(returns))}


def run_evorl(steps: int, seed: int) -> dict:
    import jax

    sys.path.insert(0, str(HERE))
    from _common import build, load_config

    cfg = load_config("impala_gymnasium_cartpole")
    per_iteration = cfg["training"]["num_envs"] * cfg["training"]["rollout_length"]
    iterations = -(-steps // per_iteration) if steps else cfg["training"]["num_iterations"]
    cfg["training"].update(num_iterations=iterations, eval_interval=iterations, eval_episodes=EVAL_EPISODES)
    cfg["seed"] = seed
    cfg["logging"] = {"recorders": []}
    workflow = build(cfg, recorders=[])
    state = workflow.init(jax.random.PRNGKey(seed))
    compile_s = workflow.compile(state)
    with workflow.executor.running(state):
        start = time.perf_counter()
        state, _ = workflow.executor.run(state, iterations)
        seconds = time.perf_counter() - start
    return {"side": "evorl", "steps": iterations * per_iteration, "seconds": seconds, "compile_s": compile_s,
            "eval_return": workflow.evaluate(state)["eval/episode_return"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sb3-steps", type=int, default=200_000)
    parser.add_argument("--evorl-steps", type=int, default=0, help="0: the config's budget")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--one", choices=["sb3", "evorl"], help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        run = run_sb3 if args.one == "sb3" else run_evorl
        print(json.dumps(run(args.steps, args.seed)))
        return
    rows = []
    for seed in map(int, args.seeds.split(",")):
        for side in ("evorl", "sb3"):
            steps = args.sb3_steps if side == "sb3" else args.evorl_steps
            out = subprocess.run([sys.executable, __file__, "--one", side, "--steps", str(steps),
                                  "--seed", str(seed)], capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"{side} seed {seed} failed:\n{out.stderr[-3000:]}")
            rows.append({**json.loads(out.stdout.strip().splitlines()[-1]), "seed": seed})
    print("gymnasium CartPole-v1, each side at its own budget\n")
    print("| side | seed | env steps | train seconds | compile s | env steps/s | greedy return (16 episodes) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['side']} | {r['seed']} | {r['steps']:,} | {r['seconds']:.1f} | {r['compile_s']:.1f} | "
              f"{r['steps'] / r['seconds']:,.0f} | {r['eval_return']:.1f} |")
    mean = lambda side, key: sum(r[key] if key != "rate" else r["steps"] / r["seconds"]  # noqa: E731
                                 for r in rows if r["side"] == side) / sum(r["side"] == side for r in rows)
    print(f"\nmean env steps/s: evorl {mean('evorl', 'rate'):,.0f}, SB3 {mean('sb3', 'rate'):,.0f} "
          f"({mean('evorl', 'rate') / mean('sb3', 'rate'):.1f}x); mean greedy return: evorl "
          f"{mean('evorl', 'eval_return'):.1f}, SB3 {mean('sb3', 'eval_return'):.1f}")


if __name__ == "__main__":
    main()

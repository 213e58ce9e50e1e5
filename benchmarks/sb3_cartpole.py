"""Host CartPole-v1 at equal settings: evorl's asynchronous PPO and IMPALA against
Stable-Baselines3 PPO, all three at one shape and one budget.

The shape (``SHAPE``): 32 envs x 16-step rollouts (512 env steps per update), 2 epochs of 4
minibatches (128 transitions each), learning rate 1e-3 annealed linearly to 0, [64, 64] tanh
actor and critic networks, gamma 0.99, GAE lambda 0.95 (IMPALA: V-trace lambda 1), entropy
0.01, gradient norm clipped at 0.5, no observation normalisation; every side trains
``--steps`` env steps of gymnasium's CartPole-v1, stepped in Python on the host.
- **SB3 PPO**: ``PPO("MlpPolicy", DummyVecEnv(32 x CartPole-v1), n_steps=16, batch_size=128,
  n_epochs=2, ...)``, torch on the CPU (1 thread: quicker than 2 for these MLPs);
- **evorl PPO**: the default job's PPO, ``env.env_type=gymnasium runner.mode=async`` (2 actor
  threads x 16 envs, a learner), the same keys;
- **evorl IMPALA**: ``configs/impala_gymnasium_cartpole.yaml`` (the same shape).
Each run is a fresh process. Printed per run: env steps/s over training (evorl: compilation
excluded and reported apart), the end-to-end wall time of the process (imports, build,
compile, training, final evaluation), and the final greedy return over 16 episodes.
Needs ``pip install stable-baselines3`` (and torch).

    python benchmarks/sb3_cartpole.py [--steps 491520] [--seeds 0,1,2] [--sides sb3,evorl-ppo,evorl-impala]
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
#: The one shape every side trains at.
SHAPE = {"num_envs": 32, "rollout_length": 16, "num_epochs": 2, "num_minibatches": 4, "learning_rate": 1e-3,
         "gamma": 0.99, "gae_lambda": 0.95, "ent_coef": 0.01, "clip_epsilon": 0.2, "max_grad_norm": 0.5,
         "hidden": [64, 64]}
SIDES = ("sb3", "evorl-ppo", "evorl-impala")


def run_sb3(steps: int, seed: int) -> dict:
    import gymnasium as gym
    import numpy as np
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)  # [64, 64] MLPs: one thread is quicker than two, and spins less on a busy machine
    sh = SHAPE
    env = make_vec_env("CartPole-v1", n_envs=sh["num_envs"], seed=seed)  # DummyVecEnv
    model = PPO("MlpPolicy", env, n_steps=sh["rollout_length"],
                batch_size=sh["num_envs"] * sh["rollout_length"] // sh["num_minibatches"], n_epochs=sh["num_epochs"],
                learning_rate=lambda remaining: sh["learning_rate"] * remaining, gamma=sh["gamma"],
                gae_lambda=sh["gae_lambda"], clip_range=sh["clip_epsilon"], ent_coef=sh["ent_coef"], vf_coef=0.5,
                max_grad_norm=sh["max_grad_norm"],
                policy_kwargs={"net_arch": {"pi": sh["hidden"], "vf": sh["hidden"]}, "activation_fn": torch.nn.Tanh},
                seed=seed, device="cpu", verbose=0)
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


def evorl_config(side: str) -> dict:
    """The evorl config of ``side`` at :data:`SHAPE`."""
    sys.path.insert(0, str(HERE))
    from run import load_config

    sh = SHAPE
    training = {f"training.{k}": sh[k] for k in ("num_envs", "rollout_length", "num_epochs", "num_minibatches",
                                                   "learning_rate", "gamma", "max_grad_norm")}
    agent = {"agent.actor_hidden_layer_sizes": sh["hidden"], "agent.critic_hidden_layer_sizes": sh["hidden"],
             "agent.ent_coef": sh["ent_coef"]}
    if side == "evorl-impala":
        return load_config("impala_gymnasium_cartpole", {**training, **agent, "training.gae_lambda": 1.0})
    return load_config("config", {**training, **agent, "training.gae_lambda": sh["gae_lambda"],
                                  "agent.clip_epsilon": sh["clip_epsilon"], "agent.normalize_obs": False,
                                  "agent.activation": "tanh", "env.env_type": "gymnasium",
                                  "runner.mode": "async", "runner.num_actors": 2})


def run_evorl(side: str, steps: int, seed: int) -> dict:
    return run_evorl_config(side, evorl_config(side), steps, seed)


def run_evorl_config(side: str, cfg: dict, steps: int, seed: int, check=None) -> dict:
    """Trains ``cfg`` for ``steps`` env steps (``check(workflow)`` first, if given): env
    steps/s over training, compilation excluded, the runner's waiting fractions, the greedy return."""
    import jax

    from evorl.workflows import resolve_workflow_cls

    per_iteration = cfg["training"]["num_envs"] * cfg["training"]["rollout_length"]
    iterations = -(-steps // per_iteration)
    cfg["training"].update(num_iterations=iterations, eval_interval=iterations, eval_episodes=EVAL_EPISODES)
    cfg["seed"] = seed
    cfg["logging"] = {"recorders": []}
    workflow = resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=[])
    if check is not None:
        check(workflow)
    state = workflow.init(jax.random.PRNGKey(seed))
    compile_s = workflow.compile(state)
    with workflow.executor.running(state):
        start = time.perf_counter()
        state, _ = workflow.executor.run(state, iterations)
        seconds = time.perf_counter() - start
        actors = workflow.executor.host_metrics()
    return {"side": side, "steps": iterations * per_iteration, "seconds": seconds, "compile_s": compile_s,
            "eval_return": workflow.evaluate(state)["eval/episode_return"],
            "lag": actors["actors/policy_lag_mean"], "learner_wait": actors["actors/learner_wait_fraction"],
            "actor_wait": actors["actors/actor_wait_fraction"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=491_520, help="env steps per run (every side)")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--one", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        result = run_sb3(args.steps, args.seed) if args.one == "sb3" else run_evorl(args.one, args.steps, args.seed)
        print(json.dumps(result))
        return
    rows = []
    for seed in map(int, args.seeds.split(",")):
        for side in args.sides.split(","):
            start = time.perf_counter()
            out = subprocess.run([sys.executable, __file__, "--one", side, "--steps", str(args.steps),
                                  "--seed", str(seed)], capture_output=True, text=True)
            wall = time.perf_counter() - start
            if out.returncode != 0:
                sys.exit(f"{side} seed {seed} failed:\n{out.stderr[-3000:]}")
            rows.append({**json.loads(out.stdout.strip().splitlines()[-1]), "seed": seed, "wall": wall})
            r = rows[-1]
            print(f"{side} seed {seed}: {r['steps'] / r['seconds']:,.0f} env steps/s, end to end {wall:.1f} s, "
                  f"return {r['eval_return']:.1f}", flush=True)
    print(f"\ngymnasium CartPole-v1, every side at one shape ({SHAPE}) and {args.steps:,} env steps\n")
    print("| side | seed | env steps/s (training) | compile s | end-to-end s | greedy return (16 episodes) "
          "| policy lag | learner wait | actor wait |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        extra = (f"{r['lag']:.2f} | {r['learner_wait']:.0%} | {r['actor_wait']:.0%}" if "lag" in r else " | | ")
        print(f"| {r['side']} | {r['seed']} | {r['steps'] / r['seconds']:,.0f} | {r['compile_s']:.1f} | {r['wall']:.1f} "
              f"| {r['eval_return']:.1f} | {extra} |")
    rate = {side: [r["steps"] / r["seconds"] for r in rows if r["side"] == side] for side in args.sides.split(",")}
    if "sb3" in rate:
        for side in rate:
            if side != "sb3":
                print(f"{side} / sb3 env steps/s: " + ", ".join(f"{a / b:.2f}" for a, b in zip(rate[side], rate["sb3"])))


if __name__ == "__main__":
    main()

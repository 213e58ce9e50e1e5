"""The peer of ``configs/dqn_minatar_breakout.yaml``: Stable-Baselines3's DQN (PyTorch) on
MinAtar's own Breakout (``pip install minatar``, Young & Tian's Python package, not gymnax's
port), with the config's network and hyperparameters, at its budget.

Both sides, matched setting by setting:
- **env**: Breakout, MinAtar's minimal action set (no-op, left, right), observations
  ``[10, 10, 4]`` in {0, 1}, MinAtar's sticky actions (``--sticky``, default 0.1: the
  previous action repeats with that probability, in training and evaluation, as the config's
  ``env.repeat_action_probability``) and a 1,000-step time limit (gymnax's ``Breakout-MinAtar``'s);
- **network**: one 16-channel 3x3 convolution (stride 1, no padding), ReLU, 128 ReLU units,
  one Q-value per action (MinAtar's reference network; evorl's ``network: cnn``);
- **DQN**: max-target (no double Q), Huber loss (delta 1), Adam 2.5e-4 (epsilon 1e-8),
  gradient norm clipped at 10, gamma 0.99, batch 32, buffer 100k, 8 envs with one gradient step
  per 4 env steps (8 per 32 transitions), target network copied every 1,000 env steps, 5,000
  uniformly random env steps before learning, epsilon 1 -> 0.1 over the first 100k env steps;
- **budget**: the config's 2M env steps (``--steps``); evaluation every 200k env steps,
  ``--eval-episodes`` greedy episodes (default 64).
``--env gymnax`` runs SB3 on gymnax's ``Breakout-MinAtar`` itself (wrapped as a gymnasium env,
one jitted step per env step, without sticky actions: ``--sticky 0``): the same env on both
sides, so a gap is the learner's.
SB3's side runs torch on 1 thread. Printed per seed: the evaluations, the final greedy return,
env steps/s and the wall time; ``--json`` appends one line per seed.

    pip install stable-baselines3 minatar   # (minatar: --no-deps is enough; it imports numpy)
    python benchmarks/sb3_minatar_dqn.py --seeds 100 101 102 [--steps 2000000] [--env gymnax --sticky 0] [--json out.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time

import numpy as np

TIME_LIMIT = 1000
EVAL_EVERY = 200_000


class GymnaxBreakout:
    """gymnax's ``Breakout-MinAtar`` (the env evorl trains) as a gymnasium env: its jitted
    ``reset_env`` / ``step_env`` (no auto-reset), the key split per call."""

    def __new__(cls, seed: int):
        import gymnasium as gym
        import gymnax
        import jax

        env, params = gymnax.make("Breakout-MinAtar")
        reset = jax.jit(lambda key: env.reset_env(key, params))
        step = jax.jit(lambda key, state, action: env.step_env(key, state, action, params)[:4])

        class Wrapped(gym.Env):
            action_space = gym.spaces.Discrete(env.num_actions)
            observation_space = gym.spaces.Box(0.0, 1.0, (10, 10, 4), np.float32)

            def __init__(self):
                self.key, self.state = jax.random.PRNGKey(seed), None

            def reset(self, seed=None, options=None):
                if seed is not None:
                    self.key = jax.random.PRNGKey(seed)
                self.key, key = jax.random.split(self.key)
                obs, self.state = reset(key)
                return np.asarray(obs, np.float32), {}

            def step(self, action):
                self.key, key = jax.random.split(self.key)
                obs, self.state, reward, done = step(key, self.state, int(action))
                return np.asarray(obs, np.float32), float(reward), bool(done), False, {}

        return Wrapped()


def make_env(seed: int, backend: str = "minatar", sticky: float = 0.1):
    """MinAtar Breakout as a gymnasium env (see the module docstring); ``backend="gymnax"``:
    gymnax's port of it (:class:`GymnaxBreakout`)."""
    import gymnasium as gym

    if backend == "gymnax":
        if sticky:  # main() refuses it first; a caller of make_env gets the same answer
            raise ValueError("--env gymnax wraps gymnax's step without sticky actions: pass --sticky 0")
        env = gym.wrappers.TimeLimit(GymnaxBreakout(seed), TIME_LIMIT)
        env.reset(seed=seed)
        return env
    from minatar import Environment

    class MinAtarBreakout(gym.Env):
        def __init__(self):
            self.game = Environment("breakout", sticky_action_prob=sticky)
            self.actions = self.game.minimal_action_set()  # [0, 1, 3]: no-op, left, right
            self.action_space = gym.spaces.Discrete(len(self.actions))
            self.observation_space = gym.spaces.Box(0.0, 1.0, (10, 10, 4), np.float32)

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            if seed is not None:
                self.game.seed(seed)
            self.game.reset()
            return self.game.state().astype(np.float32), {}

        def step(self, action):
            reward, done = self.game.act(self.actions[int(action)])
            return self.game.state().astype(np.float32), float(reward), bool(done), False, {}

    env = gym.wrappers.TimeLimit(MinAtarBreakout(), TIME_LIMIT)
    env.reset(seed=seed)
    return env


def greedy_return(model, seed: int, backend: str, sticky: float, episodes: int) -> tuple[float, float]:
    """The mean greedy return over ``episodes`` and its standard error."""
    env, returns = make_env(seed, backend, sticky), []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        total, done = 0.0, False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += reward
            done = terminated or truncated
        returns.append(total)
    return float(np.mean(returns)), float(np.std(returns) / np.sqrt(len(returns)))


def run(seed: int, steps: int, backend: str = "minatar", sticky: float = 0.1, episodes: int = 64) -> dict:
    import torch
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from stable_baselines3.common.vec_env import DummyVecEnv

    torch.set_num_threads(1)

    class MinAtarConv(BaseFeaturesExtractor):
        """[N, 10, 10, 4] -> relu(conv 16 x 3x3) flattened: [N, 1024]."""

        def __init__(self, observation_space):
            super().__init__(observation_space, features_dim=16 * 8 * 8)
            self.conv = torch.nn.Conv2d(4, 16, 3, stride=1)

        def forward(self, obs):
            return torch.relu(self.conv(obs.permute(0, 3, 1, 2))).flatten(1)

    evaluations = []

    class Evaluate(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps // EVAL_EVERY > len(evaluations):
                evaluations.append((self.num_timesteps, *greedy_return(self.model, 10_000 + seed, backend, sticky, episodes)))
            return True

    env = DummyVecEnv([lambda i=i: make_env(seed * 100 + i, backend, sticky) for i in range(8)])
    model = DQN("MlpPolicy", env, learning_rate=2.5e-4, buffer_size=100_000, learning_starts=5_000, batch_size=32,
                tau=1.0, gamma=0.99, train_freq=4, gradient_steps=8, target_update_interval=1_000,
                exploration_fraction=100_000 / steps, exploration_initial_eps=1.0, exploration_final_eps=0.1,
                max_grad_norm=10, seed=seed, device="cpu", verbose=0,
                policy_kwargs={"features_extractor_class": MinAtarConv, "net_arch": [128],
                               "activation_fn": torch.nn.ReLU, "normalize_images": False})
    start = time.perf_counter()
    model.learn(total_timesteps=steps, callback=Evaluate())
    seconds = time.perf_counter() - start
    if not evaluations or evaluations[-1][0] < steps:
        evaluations.append((steps, *greedy_return(model, 10_000 + seed, backend, sticky, episodes)))
    import stable_baselines3

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    return {"side": "sb3-dqn", "env": f"MinAtar Breakout ({backend})", "seed": seed, "steps": steps,
            "repeat_action_probability": sticky, "eval_episodes": episodes,
            "evaluations": evaluations, "final_greedy_return": evaluations[-1][1],
            "final_standard_error": evaluations[-1][2], "seconds": round(seconds, 1),
            "env_steps_per_s": round(steps / seconds, 1), "versions": {
                "stable_baselines3": stable_baselines3.__version__, "torch": torch.__version__},
            "machine": f"{platform.machine()} CPU, {os.cpu_count()} cores", "load": list(os.getloadavg()),
            "git_commit": commit, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[100, 101, 102, 103, 104])
    parser.add_argument("--steps", type=int, default=2_000_000)
    parser.add_argument("--sticky", type=float, default=0.1, help="MinAtar's sticky-action probability")
    parser.add_argument("--eval-episodes", type=int, default=64)
    parser.add_argument("--json", default=None, help="append one JSON line per seed to this file")
    parser.add_argument("--env", choices=("minatar", "gymnax"), default="minatar",
                        help="MinAtar's own Breakout, or gymnax's port (the env evorl trains)")
    args = parser.parse_args()
    if args.env == "gymnax" and args.sticky:
        parser.error("--env gymnax wraps gymnax's step without sticky actions: pass --sticky 0")
    if not 0.0 <= args.sticky < 1.0 or args.eval_episodes < 1:
        parser.error("--sticky is a probability in [0, 1) and --eval-episodes at least 1")
    for seed in args.seeds:
        row = run(seed, args.steps, args.env, args.sticky, args.eval_episodes)
        evals = ", ".join(f"{t // 1000}k: {r:.2f}" for t, r, _ in row["evaluations"])
        print(f"seed {seed}: {evals}; final {row['final_greedy_return']:.2f}; {row['env_steps_per_s']:,.0f} env "
              f"steps/s, {row['seconds']:.0f} s", flush=True)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()

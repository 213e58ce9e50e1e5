"""Off-policy speed side by side with SBX (Stable-Baselines-JAX, ``pip install sbx-rl``), at
one set of settings on both sides; optionally learning at an equal budget.

``--algo dqn`` (the only one so far; SAC/TD3 go in :data:`ALGOS` once evorl has them, the
natural pairing being gymnax ``Pendulum-v1`` for evorl against gymnasium ``Pendulum-v1``
for SBX): CartPole-v1 at ``configs/dqn_cartpole.yaml``'s shape (CleanRL's dqn.py settings):

* 10 envs x 10 steps per iteration (SBX: ``n_envs=10, train_freq=10``: 100 transitions per
  update phase), 10 gradient steps per iteration (SBX: ``gradient_steps=10``), batch 128,
  buffer 10,000 transitions, learning starts at 10,000 transitions, Adam 2.5e-4, gamma 0.99,
  target network copied every 50 gradient steps (= 500 env steps; SBX:
  ``target_update_interval=500``), epsilon 1 -> 0.05, a [120, 84] relu MLP (SBX's own
  ``QNetwork`` has one width for both layers, so this script gives it a [120, 84] one).
* the sides: ``sbx`` (gymnasium CartPole-v1 stepped on the host, SB3's replay buffer, one
  jitted ``lax.scan`` over the 10 gradient steps); ``evorl`` (gymnax CartPole-v1 inside the
  compiled iteration) with SBX's loss: DQN's max target (no double Q), Huber loss (delta 1),
  no gradient clipping; ``evorl-config``: ``configs/dqn_cartpole.yaml`` as it is (double DQN,
  half squared error, gradient norm clipped at 10): one more forward pass per step.

**Speed** (``--steps`` timed env steps): each side first fills the buffer to
``learning_starts`` (untimed), with epsilon already at its final 0.05 by then (so the timed
window is the end-of-training regime on both sides: SBX skips its Q-network forward on a
vector step it explores, with probability epsilon), then trains ``--steps`` env steps,
timed. Compile time is excluded and reported apart (evorl: the AOT compile of the chunk;
SBX: the first update phase's time less the median update phase's, its jit compiles of the
update and of the action selection). Gradient steps/s = env steps/s x 10 / 100 here.

**Learning** (``--learn-seeds 0,1,2``, optional): each side trains the config's budget
(500k env steps, epsilon over the first half) and its greedy policy is scored on 16
episodes; end-to-end training seconds (SBX: ``learn``; evorl: compile + ``learn``).

Each side runs in its own process; SBX in its own virtual environment (``--sbx-python``
or ``$SBX_PYTHON``, default ``/work/sbx-venv/bin/python``) with the same jax version.

    python benchmarks/sbx_offpolicy.py [--algo dqn] [--steps 200000] [--sides sbx,evorl,evorl-config]
        [--repeats 1] [--learn-seeds 0,1,2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
EVAL_EPISODES = 16

#: Per algorithm: the shared settings, the evorl config, and the evorl overrides that make
#: its computation SBX's (side ``evorl``; ``evorl-config`` runs the config as it is).
ALGOS = {
    "dqn": {
        "evorl_config": "dqn_cartpole",
        "gymnasium_env": "CartPole-v1",
        "settings": {"num_envs": 10, "rollout_length": 10, "num_updates": 10, "batch_size": 128,
                     "buffer_size": 10_000, "learning_starts": 10_000, "learning_rate": 2.5e-4, "gamma": 0.99,
                     "target_update_period": 50, "hidden": [120, 84], "epsilon_end": 0.05,
                     "learn_steps": 500_000, "epsilon_decay_fraction": 0.5},
        "evorl_matched": {"agent.double_q": False, "agent.huber_delta": 1.0, "training.max_grad_norm": None},
    },
}
SIDES = ("sbx", "evorl", "evorl-config")


# --- SBX side (runs in the SBX virtual environment) --------------------------------------
def sbx_dqn(settings: dict, steps: int, seed: int, learn: bool) -> dict:
    from collections.abc import Sequence
    from importlib.metadata import version

    import flax.linen as nn
    import gymnasium as gym
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch
    from sbx import DQN
    from sbx.common.policies import Flatten
    from sbx.common.type_aliases import RLTrainState
    from sbx.dqn.policies import DQNPolicy
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)  # SB3's replay buffer is torch; keep it off the second core
    s = settings

    class QNet(nn.Module):  # SBX's QNetwork with one Dense per listed width
        n_actions: int
        hidden: Sequence[int]

        @nn.compact
        def __call__(self, x):
            x = Flatten()(x)
            for width in self.hidden:
                x = nn.relu(nn.Dense(width)(x))
            return nn.Dense(self.n_actions)(x)

    class SizedPolicy(DQNPolicy):
        def __init__(self, *args, net_arch=None, **kwargs):
            super().__init__(*args, net_arch=net_arch, **kwargs)
            self.hidden = tuple(net_arch)

        def build(self, key, lr_schedule):  # DQNPolicy.build with QNet
            key, qf_key = jax.random.split(key, 2)
            obs = jnp.array([self.observation_space.sample()])
            self.qf = QNet(n_actions=int(self.action_space.n), hidden=self.hidden)
            self.qf_state = RLTrainState.create(
                apply_fn=self.qf.apply, params=self.qf.init({"params": qf_key}, obs),
                target_params=self.qf.init({"params": qf_key}, obs),
                tx=self.optimizer_class(learning_rate=lr_schedule(1), **self.optimizer_kwargs))
            self.qf.apply = jax.jit(self.qf.apply)
            return key

    class Clock(BaseCallback):  # the start time of every update phase (rollout of train_freq vector steps)
        def __init__(self):
            super().__init__()
            self.marks = []

        def _on_rollout_start(self):
            self.marks.append((time.perf_counter(), self.model.num_timesteps))

        def _on_step(self):
            return True

    total = s["learn_steps"] if learn else s["learning_starts"] + steps
    decay = s["epsilon_decay_fraction"] if learn else s["learning_starts"] / total
    env = make_vec_env(ALGOS["dqn"]["gymnasium_env"], n_envs=s["num_envs"], seed=seed)  # DummyVecEnv
    model = DQN(SizedPolicy, env, learning_rate=s["learning_rate"], buffer_size=s["buffer_size"],
                learning_starts=s["learning_starts"], batch_size=s["batch_size"], tau=1.0, gamma=s["gamma"],
                train_freq=s["rollout_length"], gradient_steps=s["num_updates"],
                target_update_interval=s["target_update_period"] * s["num_envs"] * s["rollout_length"] // s["num_updates"],
                exploration_fraction=decay, exploration_initial_eps=1.0, exploration_final_eps=s["epsilon_end"],
                policy_kwargs={"net_arch": s["hidden"]}, seed=seed, verbose=0)
    clock = Clock()
    start = time.perf_counter()
    model.learn(total_timesteps=total, callback=clock)
    end = time.perf_counter()
    marks = clock.marks + [(end, model.num_timesteps)]
    # update phases from the one that starts at learning_starts (its update compiles, as does the greedy action)
    first = next(i for i, (_, n) in enumerate(marks) if n >= s["learning_starts"])
    phases = [marks[i + 1][0] - marks[i][0] for i in range(first, len(marks) - 1)]
    median = statistics.median(phases[1:])
    timed_steps = marks[-1][1] - marks[first + 1][1]
    timed_s = marks[-1][0] - marks[first + 1][0]
    out = {"side": "sbx", "steps": timed_steps, "seconds": timed_s, "compile_s": phases[0] - median,
           "gradient_steps": model._n_updates, "total_s": end - start,
           "versions": {name: version(name) for name in ("sbx-rl", "jax", "gymnasium", "flax", "optax")}}
    if learn:
        eval_env, returns = gym.make(ALGOS["dqn"]["gymnasium_env"]), []
        for episode in range(EVAL_EPISODES):
            obs, _ = eval_env.reset(seed=10_000 + episode)
            ret, done = 0.0, False
            while not done:
                action, _ = model.predict(obs, deterministic=True)
                obs, reward, terminated, truncated, _ = eval_env.step(int(action))
                ret += float(reward)
                done = terminated or truncated
            returns.append(ret)
        out["eval_return"] = float(np.mean(returns))
    return out


# --- evorl side ---------------------------------------------------------------------------
def evorl_config(algo: str, side: str, learn: bool) -> dict:
    sys.path.insert(0, str(HERE))
    from run import load_config

    spec, s = ALGOS[algo], ALGOS[algo]["settings"]
    overrides = {f"training.{k}": s[k] for k in ("num_envs", "rollout_length", "num_updates", "batch_size",
                                                   "buffer_size", "learning_starts", "learning_rate", "gamma",
                                                   "target_update_period")}
    overrides.update({"agent.q_hidden_layer_sizes": s["hidden"], "agent.epsilon_end": s["epsilon_end"],
                      "training.tau": 1.0, "training.n_step": 1, "logging.recorders": []})
    overrides["agent.epsilon_decay_steps"] = (s["epsilon_decay_fraction"] * s["learn_steps"] if learn
                                              else s["learning_starts"])
    if side == "evorl":
        overrides.update(spec["evorl_matched"])
    return load_config(spec["evorl_config"], overrides)


def evorl_run(algo: str, side: str, steps: int, seed: int, learn: bool) -> dict:
    import jax

    from evorl.workflows import resolve_workflow_cls

    s = ALGOS[algo]["settings"]
    cfg = evorl_config(algo, side, learn)
    per_iteration = s["num_envs"] * s["rollout_length"]
    cfg["seed"] = seed
    from importlib.metadata import version

    versions = {name: version(name) for name in ("evorl", "jax", "gymnax", "flax", "optax")}
    if learn:
        iterations = s["learn_steps"] // per_iteration
        cfg["training"].update(num_iterations=iterations, eval_interval=iterations, eval_episodes=EVAL_EPISODES)
        workflow = resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=[])
        start = time.perf_counter()
        state = workflow.init(jax.random.PRNGKey(seed))
        state = workflow.learn(state)
        total = time.perf_counter() - start
        return {"side": side, "steps": iterations * per_iteration, "total_s": total,
                "eval_return": float(workflow.evaluate(state)["eval/episode_return"]), "versions": versions}
    warm = -(-s["learning_starts"] // per_iteration)
    iterations = steps // per_iteration
    cfg["training"].update(num_iterations=warm + iterations, eval_interval=warm + iterations)
    workflow = resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=[])
    state = workflow.init(jax.random.PRNGKey(seed))
    compile_s = workflow.executor.compile(state)
    state, _ = workflow.executor.run(state, warm)  # fills the buffer to learning_starts (no gradient step)
    jax.block_until_ready(state)
    start = time.perf_counter()
    state, metrics = workflow.executor.run(state, iterations)
    jax.block_until_ready(state)
    seconds = time.perf_counter() - start
    return {"side": side, "steps": iterations * per_iteration, "seconds": seconds, "compile_s": compile_s,
            "gradient_steps": int(state.gradient_steps), "versions": versions}


# --- driver -------------------------------------------------------------------------------
def load() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def run_side(args, side: str, seed: int, learn: bool) -> dict:
    python = args.sbx_python if side == "sbx" else sys.executable
    cmd = [python, __file__, "--algo", args.algo, "--one", side, "--steps", str(args.steps), "--seed", str(seed)]
    if learn:
        cmd.append("--learn")
    before = load()
    wall = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - wall
    if out.returncode != 0:
        sys.exit(f"{side} seed {seed} failed:\n{out.stderr[-3000:]}")
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "seed": seed, "wall": wall, "load_before": before,
            "load_after": load()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", choices=sorted(ALGOS), default="dqn")
    parser.add_argument("--steps", type=int, default=200_000, help="timed env steps per speed run (each side)")
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--repeats", type=int, default=1, help="speed runs per side (seeds 0, 1, ...)")
    parser.add_argument("--learn-seeds", default="", help="also train the full budget on these seeds, e.g. 0,1,2")
    parser.add_argument("--learn-sides", default="sbx,evorl")
    parser.add_argument("--sbx-python", default=os.environ.get("SBX_PYTHON", "/work/sbx-venv/bin/python"))
    parser.add_argument("--json", help="write every row here")
    parser.add_argument("--one", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--learn", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    settings = ALGOS[args.algo]["settings"]
    if args.one:
        if args.one == "sbx":
            result = {"dqn": sbx_dqn}[args.algo](settings, args.steps, args.seed, args.learn)
        else:
            result = evorl_run(args.algo, args.one, args.steps, args.seed, args.learn)
        print(json.dumps(result))
        return

    print(f"{args.algo}: {settings}; {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs", flush=True)
    speed = []
    for repeat in range(args.repeats):
        for side in args.sides.split(","):
            r = run_side(args, side, repeat, learn=False)
            speed.append(r)
            print(f"speed {side} seed {repeat}: {r['steps'] / r['seconds']:,.0f} env steps/s, "
                  f"compile {r['compile_s']:.1f} s, load {r['load_before']} -> {r['load_after']}", flush=True)
    learning = []
    for seed in [int(x) for x in args.learn_seeds.split(",") if x]:
        for side in args.learn_sides.split(","):
            r = run_side(args, side, seed, learn=True)
            learning.append(r)
            print(f"learn {side} seed {seed}: return {r['eval_return']:.1f}, {r['total_s']:.1f} s, "
                  f"load {r['load_before']} -> {r['load_after']}", flush=True)

    ratio = settings["num_updates"] / (settings["num_envs"] * settings["rollout_length"])
    print(f"\n{args.algo}, {args.steps:,} timed env steps per run after learning_starts; versions: "
          + "; ".join(f"{r['side']}: " + ", ".join(f"{k} {v}" for k, v in r["versions"].items() if v)
                      for r in {r["side"]: r for r in speed}.values()))
    print("\n| side | seed | env steps/s | gradient steps/s | compile s | process wall s | load (1-min avg) before -> after |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for r in speed:
        rate = r["steps"] / r["seconds"]
        print(f"| {r['side']} | {r['seed']} | {rate:,.0f} | {rate * ratio:,.0f} | {r['compile_s']:.1f} | "
              f"{r['wall']:.1f} | {r['load_before']} -> {r['load_after']} |")
    if learning:
        print("\n| side | seed | final greedy return (16 episodes) | training s (incl. compile) | load before -> after |")
        print("|---|---:|---:|---:|---|")
        for r in learning:
            print(f"| {r['side']} | {r['seed']} | {r['eval_return']:.1f} | {r['total_s']:.1f} | "
                  f"{r['load_before']} -> {r['load_after']} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"settings": settings, "speed": speed, "learning": learning}, indent=1))


if __name__ == "__main__":
    main()

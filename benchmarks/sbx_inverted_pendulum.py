"""SAC and TD3 learning side by side with SBX (``pip install sbx-rl``) on gymnasium's MuJoCo
``InvertedPendulum-v5``, at one set of settings on both sides.

The settings are ``configs/sac_gymnasium_inverted_pendulum.yaml``'s (read from the file):
4 envs, 8 steps per env per iteration (32 transitions), 32 gradient steps per iteration (one
per env step), batch 256, [256, 256] relu networks, Adam 3e-4, gamma 0.99, tau 0.005, a
100k-transition buffer, uniformly random actions for the first 1,000 env steps, 25,600 env
steps in all. SAC: twin critics, temperature learned from 1 towards -dim(A). TD3 (``--algo
td3``, the same file with ``TD3Workflow``): policy delay 2, exploration noise 0.1, target noise
0.2 clipped at 0.5, all in the [-1, 1] action cube on both sides.

* ``sbx``: ``SAC``/``TD3("MlpPolicy", make_vec_env(env, n_envs=4), train_freq=8,
  gradient_steps=32, learning_starts=1000, ...)``: the 4 envs stepped in lockstep on the host.
* ``evorl``: the config as it is, through the actor-learner (2 actor threads of 2 envs each,
  the learner taking one rollout from each per update: the same 32 transitions and 32
  gradient steps per update, acted with parameters up to ``queue_size`` updates old).
* ``evorl-lockstep``: the same with ``runner.lockstep: true`` (no policy lag: SBX's schedule).

Each seed trains in its own process (SBX in its own virtual environment, ``--sbx-python`` or
``$SBX_PYTHON``, with the same jax version); its greedy policy is then scored on 10 episodes
(the maximum return is 1000). Reported per run: the final return, the training seconds
(end to end, compile included) and the load before and after.

    python benchmarks/sbx_inverted_pendulum.py [--algo sac|td3] [--seeds 200,201,202,203,204]
        [--sides sbx,evorl] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sbx_offpolicy import learn_side_by_side, returns_summary  # noqa: E402
CONFIG = "sac_gymnasium_inverted_pendulum"
ENV = "InvertedPendulum-v5"
EVAL_EPISODES = 10
SIDES = ("sbx", "evorl", "evorl-lockstep")
TD3 = {"policy_delay": 2, "exploration_noise": 0.1, "target_noise": 0.2, "target_noise_clip": 0.5}


def evorl_config(algo: str, lockstep: bool, iterations: int | None = None) -> dict:
    from run import load_config

    cfg = load_config(CONFIG, {"logging.recorders": [], "runner.lockstep": lockstep})
    if iterations:
        cfg["training"]["num_iterations"] = iterations
    if algo == "td3":
        cfg["workflow_cls"] = "evorl.workflows.TD3Workflow"
        for key in ("alpha", "target_entropy"):
            cfg["agent"].pop(key, None)
        cfg["agent"].update(TD3)
        cfg["training"]["target_update_period"] = TD3["policy_delay"]
    return cfg


def settings_of(algo: str, cfg: dict) -> dict:
    """The numbers both sides use, from the evorl config."""
    t, a = cfg["training"], cfg["agent"]
    assert a["actor_hidden_layer_sizes"] == a["critic_hidden_layer_sizes"]
    keys = ("num_envs", "rollout_length", "num_updates", "batch_size", "buffer_size", "learning_starts",
            "learning_rate", "gamma", "tau", "num_iterations")
    return {**{k: t[k] for k in keys}, "hidden": a["actor_hidden_layer_sizes"], **(TD3 if algo == "td3" else {})}


# --- one side, one seed (a child process) --------------------------------------------------
def sbx_run(algo: str, s: dict, seed: int) -> dict:
    from importlib.metadata import version

    import gymnasium as gym
    import torch
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    from sbx_offpolicy import sbx_actor_critic_model

    torch.set_num_threads(1)  # SB3's replay buffer is torch; keep it off the second core
    model = sbx_actor_critic_model(algo, make_vec_env(ENV, n_envs=s["num_envs"], seed=seed), s, seed)
    steps = s["num_iterations"] * s["num_envs"] * s["rollout_length"]
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    total = time.perf_counter() - start
    eval_env = gym.make(ENV)
    eval_env.reset(seed=10_000 + seed)
    mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True)
    return {"steps": int(model.num_timesteps), "gradient_steps": int(model._n_updates), "total_s": total,
            "eval_return": float(mean), "versions": {n: version(n) for n in ("sbx-rl", "jax", "gymnasium", "mujoco")}}


def evorl_run(algo: str, lockstep: bool, seed: int, iterations: int | None) -> dict:
    from importlib.metadata import version

    import jax

    from evorl.workflows import resolve_workflow_cls

    cfg = evorl_config(algo, lockstep, iterations)
    cfg["seed"] = seed
    t = cfg["training"]
    t.update(eval_interval=t["num_iterations"], eval_episodes=EVAL_EPISODES)
    workflow = resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=[])
    start = time.perf_counter()
    state = workflow.learn(workflow.init(jax.random.PRNGKey(seed)))
    jax.block_until_ready(state)
    total = time.perf_counter() - start
    return {"steps": t["num_iterations"] * t["num_envs"] * t["rollout_length"],
            "gradient_steps": int(state.gradient_steps), "total_s": total,
            "eval_return": float(workflow.evaluate(state)["eval/episode_return"]),
            "versions": {n: version(n) for n in ("evorl", "jax", "gymnasium", "mujoco")}}


# --- driver -------------------------------------------------------------------------------
def side_command(args, settings: dict):
    """``command(side, seed)``: one side's run of one seed, in a child process."""
    def command(side: str, seed: int) -> list[str]:
        python = args.sbx_python if side == "sbx" else sys.executable
        return [python, __file__, "--algo", args.algo, "--one", side, "--seed", str(seed), "--settings",
                json.dumps(settings), "--iterations", str(settings["num_iterations"])]
    return command


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", choices=("sac", "td3"), default="sac")
    parser.add_argument("--seeds", default="200,201,202,203,204")
    parser.add_argument("--sides", default="sbx,evorl")
    parser.add_argument("--sbx-python", default=os.environ.get("SBX_PYTHON", "/work/sbx-venv/bin/python"))
    parser.add_argument("--iterations", type=int, help="iterations of 32 env steps (default: the config's, 800)")
    parser.add_argument("--json", help="append every row here (JSON lines)")
    parser.add_argument("--one", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--settings", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        result = (sbx_run(args.algo, json.loads(args.settings), args.seed) if args.one == "sbx"
                  else evorl_run(args.algo, args.one == "evorl-lockstep", args.seed, args.iterations))
        print(json.dumps(result))
        return

    settings = settings_of(args.algo, evorl_config(args.algo, lockstep=False, iterations=args.iterations))
    print(f"{args.algo} on {ENV}: {settings}; {os.cpu_count()} CPUs", flush=True)
    rows = learn_side_by_side([int(x) for x in args.seeds.split(",") if x], args.sides.split(","),
                              side_command(args, settings), {"algo": args.algo, "env": ENV, "settings": settings},
                              args.json)
    print(f"\n| side | seed | final greedy return ({EVAL_EPISODES} episodes) | training s (incl. compile) | "
          "load before -> after |\n|---|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['side']} | {r['seed']} | {r['eval_return']:.1f} | {r['total_s']:.1f} | "
              f"{r['load_before']} -> {r['load_after']} |")
    for side in args.sides.split(","):
        returns, summary = returns_summary(rows, side)
        print(f"{summary}; >= 900 on {sum(x >= 900 for x in returns)}/{len(returns)}")


if __name__ == "__main__":
    main()

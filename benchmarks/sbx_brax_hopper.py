"""SAC and TD3 learning side by side with SBX (``pip install sbx-rl``) on brax ``hopper``, at
one set of settings on both sides and a CPU budget: the target's source is the peer, SBX, on the same simulator at the same
budget.

The settings are ``configs/{sac,td3}_brax_hopper.yaml``'s (CleanRL's MuJoCo settings, read from
the file: one env, one env step and one gradient step per iteration, batch 256, [256, 256] relu
networks, Adam 3e-4, gamma 0.99, tau 0.005, a 1M-transition buffer; SAC: twin critics,
temperature learned from 1 towards -dim(A); TD3: policy delay 2, exploration noise 0.1, target
noise 0.2 clipped at 0.5, in the [-1, 1] action cube on both sides) with three changes, the same
on both sides, for a 2-core CPU: the ``positional`` backend (the CPU's fastest; the configs use
mjx), ``--steps`` env steps in all (default 50,000; the configs' 1M is a GPU run), and 5,000
uniformly random env steps before learning for both algorithms (TD3's config has 25,000).
Episodes end when the hopper falls (termination: bootstrap from zero) or after 1,000 steps
(truncation: bootstrap from the last observation) on both sides.

* ``sbx``: ``SAC``/``TD3("MlpPolicy", env, train_freq=1, gradient_steps=1, ...)`` on brax's
  hopper behind a small gymnasium adapter (the env's jitted ``reset``/``step`` on the host,
  ``TimeLimit(1000)``).
* ``evorl``: the config through ``scripts/train.py``'s path (``SACWorkflow``/``TD3Workflow``,
  the env stepped inside the compiled iteration).

Each seed trains in its own process (SBX in its own virtual environment, ``--sbx-python`` or
``$SBX_PYTHON``, with the same jax version); its greedy policy is then scored on 10 episodes.
A return near 1,000 is what standing still for 1,000 steps earns (1 per healthy step); above
it, the hopper moves forward. Reported per run: the final return, training seconds (end to end,
compile included) and the load before and after.

    python benchmarks/sbx_brax_hopper.py [--algo sac|td3] [--seeds 300,301,302,303,304]
        [--steps 50000] [--sides sbx,evorl] [--json FILE]
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

EVAL_EPISODES = 10
EPISODE_LENGTH = 1000
BACKEND = "positional"
RANDOM_STEPS = 5000


def evorl_config(algo: str, steps: int) -> dict:
    from run import load_config

    cfg = load_config(f"{algo}_brax_hopper", {"logging.recorders": []})
    cfg["env"].update(backend=BACKEND, episode_length=EPISODE_LENGTH)
    cfg["training"].update(num_iterations=steps, learning_starts=RANDOM_STEPS, warmup_steps=RANDOM_STEPS,
                           eval_interval=steps, eval_episodes=EVAL_EPISODES)
    return cfg


def settings_of(algo: str, cfg: dict) -> dict:
    """The numbers both sides use, from the evorl config."""
    t, a = cfg["training"], cfg["agent"]
    assert a["actor_hidden_layer_sizes"] == a["critic_hidden_layer_sizes"]
    assert t["num_envs"] == t["rollout_length"] == t["num_updates"] == 1, "one env step, one gradient step"
    keys = ("num_envs", "rollout_length", "num_updates", "batch_size", "buffer_size", "learning_starts",
            "learning_rate", "gamma", "tau", "num_iterations")
    td3 = {k: a[k] for k in ("policy_delay", "exploration_noise", "target_noise", "target_noise_clip")} if algo == "td3" else {}
    return {**{k: t[k] for k in keys}, "hidden": a["actor_hidden_layer_sizes"], **td3}


# --- one side, one seed (a child process) --------------------------------------------------
def brax_gymnasium_env(seed: int):
    """brax's hopper as a gymnasium env: the jitted ``reset``/``step`` on the host; a fall
    terminates, ``TimeLimit`` truncates at EPISODE_LENGTH steps."""
    import gymnasium as gym
    import jax
    import numpy as np
    from brax import envs

    class BraxHopper(gym.Env):
        metadata = {"render_modes": []}

        def __init__(self):
            env = envs.get_environment("hopper", backend=BACKEND)
            self._reset, self._step = jax.jit(env.reset), jax.jit(env.step)
            self.observation_space = gym.spaces.Box(-np.inf, np.inf, (env.observation_size,), np.float32)
            self.action_space = gym.spaces.Box(-1.0, 1.0, (env.action_size,), np.float32)
            self._key = jax.random.PRNGKey(seed)
            self._state = None

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            if seed is not None:
                self._key = jax.random.PRNGKey(seed)
            self._key, key = jax.random.split(self._key)
            self._state = self._reset(key)
            return np.asarray(self._state.obs), {}

        def step(self, action):
            self._state = self._step(self._state, jax.numpy.asarray(action, jax.numpy.float32))
            s = self._state
            return np.asarray(s.obs), float(s.reward), bool(s.done), False, {}

    return gym.wrappers.TimeLimit(BraxHopper(), max_episode_steps=EPISODE_LENGTH)


def sbx_run(algo: str, s: dict, seed: int) -> dict:
    from importlib.metadata import version

    import torch
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import DummyVecEnv

    from sbx_offpolicy import sbx_actor_critic_model

    torch.set_num_threads(1)  # SB3's replay buffer is torch; keep it off the second core
    model = sbx_actor_critic_model(algo, DummyVecEnv([lambda: brax_gymnasium_env(seed)]), s, seed)
    start = time.perf_counter()
    model.learn(total_timesteps=s["num_iterations"])
    total = time.perf_counter() - start
    eval_env = brax_gymnasium_env(10_000 + seed)
    mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True)
    return {"steps": int(model.num_timesteps), "gradient_steps": int(model._n_updates), "total_s": total,
            "eval_return": float(mean), "versions": {n: version(n) for n in ("sbx-rl", "jax", "brax")}}


def evorl_run(algo: str, seed: int, steps: int) -> dict:
    from importlib.metadata import version

    import jax

    from evorl.workflows import resolve_workflow_cls

    cfg = evorl_config(algo, steps)
    cfg["seed"] = seed
    workflow = resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=[])
    start = time.perf_counter()
    state = workflow.learn(workflow.init(jax.random.PRNGKey(seed)))
    jax.block_until_ready(state)
    total = time.perf_counter() - start
    return {"steps": steps, "gradient_steps": int(state.gradient_steps), "total_s": total,
            "eval_return": float(workflow.evaluate(state)["eval/episode_return"]),
            "versions": {n: version(n) for n in ("evorl", "jax", "brax")}}


# --- driver -------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", choices=("sac", "td3"), default="sac")
    parser.add_argument("--seeds", default="300,301,302,303,304")
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--sides", default="sbx,evorl")
    parser.add_argument("--sbx-python", default=os.environ.get("SBX_PYTHON", "/work/sbx-venv/bin/python"))
    parser.add_argument("--json", help="append every row here (JSON lines)")
    parser.add_argument("--one", choices=("sbx", "evorl"), help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--settings", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        result = (sbx_run(args.algo, json.loads(args.settings), args.seed) if args.one == "sbx"
                  else evorl_run(args.algo, args.seed, args.steps))
        print(json.dumps(result))
        return

    settings = settings_of(args.algo, evorl_config(args.algo, args.steps))
    print(f"{args.algo} on brax hopper ({BACKEND}): {settings}; {os.cpu_count()} CPUs", flush=True)

    def command(side: str, seed: int) -> list[str]:
        python = args.sbx_python if side == "sbx" else sys.executable
        return [python, __file__, "--algo", args.algo, "--one", side, "--seed", str(seed), "--steps", str(args.steps),
                "--settings", json.dumps(settings)]

    record = {"algo": args.algo, "env": f"brax hopper {BACKEND}", "settings": settings}
    rows = learn_side_by_side([int(x) for x in args.seeds.split(",") if x], args.sides.split(","), command, record,
                              args.json)
    for side in args.sides.split(","):
        returns, summary = returns_summary(rows, side)
        print(f"{summary}: {', '.join(f'{x:.1f}' for x in returns)}")


if __name__ == "__main__":
    main()

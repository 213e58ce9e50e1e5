"""Off-policy speed side by side with SBX (Stable-Baselines-JAX, ``pip install sbx-rl``), at
one set of settings on both sides; optionally learning at an equal budget.

``--algo sac|td3``: ``configs/algo/sac.yaml`` / ``td3.yaml`` (CleanRL's settings: one env, one
gradient step per env step, batch 256, [256, 256] relu networks, Adam 3e-4, tau 0.005, buffer
1M, 5,000 uniformly random steps before learning; TD3: policy delay 2, exploration noise 0.1,
target noise 0.2 clipped at 0.5, in the [-1, 1] action cube on both sides; SAC: twin critics,
temperature learned from 1 towards -dim(A)) on gymnax ``Pendulum-v1`` for evorl (observations
and rewards raw, as SBX's) against gymnasium ``Pendulum-v1`` for SBX; speed only.

``--algo dqn``: CartPole-v1 at CleanRL's dqn.py settings (``configs/dqn_cartpole.yaml``'s shape, whose
5-step returns and 100k buffer since 2026-12-06 this script sets back to 1 step and 10k):

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
SBX: the first 10 update phases' time above the median phase's, its jit compiles of the
update and of the action selection, left out of the timed window). Gradient steps/s = env steps/s x 10 / 100 here.

**Learning** (``--learn-seeds 0,1,2``, optional): each side trains the budget (DQN: 500k env
steps, epsilon over the first half; SAC and TD3: 15k env steps, the first 5,000 uniformly
random) and its greedy policy is scored on ``eval_episodes`` episodes (DQN 16; SAC and TD3 100:
a Pendulum return depends on its start state by hundreds, so 16 episodes leave a spread of about
25 between sets of start states) from start states drawn per seed (gymnasium's env seeded
10,000 + 1,000 x seed + episode for SBX; gymnax's from the run's key for evorl); end-to-end
training seconds (SBX: ``learn``; evorl: compile + ``learn``; compile s apart: SBX's as in the
speed runs, evorl's AOT compile). The seeds alternate sides, each run in a fresh process.

**Population** (``--population 8``, SAC and TD3): ``training.num_seeds=8`` in one evorl process
against 8 SBX processes started at once (what a user does instead), each agent for
``learning_starts + --steps`` env steps (e.g. ``--steps 3000``: 8,000 per agent). Reported per
side: the wall time from launch to the last exit; the training time (evorl: compile, warm-up
and learning, timed apart; SBX: from the first ``learn`` start to the last ``learn`` end, its
compiles inside); env steps/s per agent and in aggregate over both; the learning phase's env
steps/s per agent with compiles excluded (evorl: the learning iterations; SBX: each process's
timed window as in the speed runs, mean over the processes); and every agent's greedy return
after the budget (``eval_episodes`` episodes). SBX's processes take seeds ``--seed + i``;
evorl's agents the keys split from ``--seed``.

Each side runs in its own process; SBX in its own virtual environment (``--sbx-python``
or ``$SBX_PYTHON``, default ``/work/sbx-venv/bin/python``) with the same jax version.

    python benchmarks/sbx_offpolicy.py [--algo dqn] [--steps 200000] [--sides sbx,evorl,evorl-config]
        [--repeats 1] [--learn-seeds 0,1,2]
    python benchmarks/sbx_offpolicy.py --algo sac --population 8 --steps 3000 [--seed 5000] [--sbx-first] [--devices 2]

``--population`` also reports each side's CPU seconds (user + system, over all of its processes,
``getrusage(RUSAGE_CHILDREN)``): on a shared machine, 8 processes take a larger share of the
cores than one does, and CPU seconds per env step compare the work apart from that share.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIDES_ALL = ("sbx", "evorl", "evorl-config")
#: SBX: update phases after learning_starts left out of the timed window (their compiles).
SKIP_PHASES = 10

#: Per algorithm: the shared settings, the evorl config (a file, or the composed config with
#: ``groups``), and the evorl overrides that make its computation SBX's (side ``evorl``;
#: ``evorl-config`` runs the config as it is).
ALGOS = {
    "dqn": {
        "evorl_config": "dqn_cartpole",
        "gymnasium_env": "CartPole-v1",
        "settings": {"num_envs": 10, "rollout_length": 10, "num_updates": 10, "batch_size": 128,
                     "buffer_size": 10_000, "learning_starts": 10_000, "learning_rate": 2.5e-4, "gamma": 0.99,
                     "target_update_period": 50, "tau": 1.0, "hidden": [120, 84], "epsilon_end": 0.05,
                     "learn_steps": 500_000, "epsilon_decay_fraction": 0.5},
        "evorl_matched": {"agent.double_q": False, "agent.huber_delta": 1.0, "training.max_grad_norm": None},
        "sides": SIDES_ALL,
        "steps": 200_000,
        "eval_episodes": 16,
    },
    # SAC and TD3: algo/sac.yaml and algo/td3.yaml (CleanRL's settings) on Pendulum-v1, one env,
    # one gradient step per env step; SBX's own defaults are these too (but learning_starts).
    "sac": {
        "evorl_config": "config", "groups": {"algo": "sac", "env": "pendulum"},
        "gymnasium_env": "Pendulum-v1",
        "settings": {"num_envs": 1, "rollout_length": 1, "num_updates": 1, "batch_size": 256,
                     "buffer_size": 1_000_000, "learning_starts": 5_000, "learning_rate": 3e-4, "gamma": 0.99,
                     "target_update_period": 1, "tau": 0.005, "hidden": [256, 256], "learn_steps": 15_000},
        "evorl_matched": {},
        "sides": ("sbx", "evorl"),
        "steps": 20_000,
        "eval_episodes": 100,
    },
    "td3": {
        "evorl_config": "config", "groups": {"algo": "td3", "env": "pendulum"},
        "gymnasium_env": "Pendulum-v1",
        "settings": {"num_envs": 1, "rollout_length": 1, "num_updates": 1, "batch_size": 256,
                     "buffer_size": 1_000_000, "learning_starts": 5_000, "learning_rate": 3e-4, "gamma": 0.99,
                     "target_update_period": 2, "tau": 0.005, "hidden": [256, 256], "learn_steps": 15_000,
                     "policy_delay": 2,
                     "exploration_noise": 0.1, "target_noise": 0.2, "target_noise_clip": 0.5},
        "evorl_matched": {},
        "sides": ("sbx", "evorl"),
        "steps": 20_000,
        "eval_episodes": 100,
    },
}


# --- SBX side (runs in the SBX virtual environment) --------------------------------------
def sbx_dqn(settings: dict, steps: int, seed: int, learn: bool) -> dict:
    from collections.abc import Sequence
    from importlib.metadata import version

    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import torch
    from sbx import DQN
    from sbx.common.policies import Flatten
    from sbx.common.type_aliases import RLTrainState
    from sbx.dqn.policies import DQNPolicy
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

    total = s["learn_steps"] if learn else s["learning_starts"] + steps
    decay = s["epsilon_decay_fraction"] if learn else s["learning_starts"] / total
    env = make_vec_env(ALGOS["dqn"]["gymnasium_env"], n_envs=s["num_envs"], seed=seed)  # DummyVecEnv
    model = DQN(SizedPolicy, env, learning_rate=s["learning_rate"], buffer_size=s["buffer_size"],
                learning_starts=s["learning_starts"], batch_size=s["batch_size"], tau=s["tau"], gamma=s["gamma"],
                train_freq=s["rollout_length"], gradient_steps=s["num_updates"],
                target_update_interval=s["target_update_period"] * s["num_envs"] * s["rollout_length"] // s["num_updates"],
                exploration_fraction=decay, exploration_initial_eps=1.0, exploration_final_eps=s["epsilon_end"],
                policy_kwargs={"net_arch": s["hidden"]}, seed=seed, verbose=0)
    out = timed_learn(model, total, s["learning_starts"], "sbx",
                      {name: version(name) for name in ("sbx-rl", "jax", "gymnasium", "flax", "optax")})
    if learn:
        out["eval_return"] = sbx_greedy_return(model, "dqn", seed)
    return out


def sbx_greedy_return(model, algo: str, seed: int) -> float:
    """Mean return of ``model``'s greedy policy over ``eval_episodes`` episodes of gymnasium's env
    (seeded 10,000 + 1,000 x ``seed`` + episode)."""
    import gymnasium as gym
    import numpy as np

    eval_env, returns = gym.make(ALGOS[algo]["gymnasium_env"]), []
    for episode in range(ALGOS[algo]["eval_episodes"]):
        obs, _ = eval_env.reset(seed=10_000 + 1_000 * seed + episode)
        ret, done = 0.0, False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = eval_env.step(int(action) if algo == "dqn" else action)
            ret += float(reward)
            done = terminated or truncated
        returns.append(ret)
    return float(np.mean(returns))


def sbx_actor_critic_model(algo: str, env, s: dict, seed: int):
    """SBX's SAC or TD3 on a vector env at ``settings`` (one update phase per ``rollout_length``
    steps of each env, ``num_updates`` gradient steps in it)."""
    import numpy as np
    from sbx import SAC, TD3
    from stable_baselines3.common.noise import NormalActionNoise

    common = dict(learning_rate=s["learning_rate"], buffer_size=s["buffer_size"], learning_starts=s["learning_starts"],
                  batch_size=s["batch_size"], tau=s["tau"], gamma=s["gamma"], train_freq=s["rollout_length"],
                  gradient_steps=s["num_updates"], policy_kwargs={"net_arch": s["hidden"]}, seed=seed, verbose=0)
    if algo == "td3":
        dim = env.action_space.shape[0]
        return TD3("MlpPolicy", env, policy_delay=s["policy_delay"], target_policy_noise=s["target_noise"],
                   target_noise_clip=s["target_noise_clip"],
                   action_noise=NormalActionNoise(np.zeros(dim), s["exploration_noise"] * np.ones(dim)), **common)
    return SAC("MlpPolicy", env, ent_coef="auto_1.0", **common)  # learned temperature from 1, as evorl's


def sbx_actor_critic(algo: str, settings: dict, steps: int, seed: int, learn: bool, evaluate: bool = False) -> dict:
    """SBX's SAC or TD3 on gymnasium's env at ``settings``: ``learning_starts + steps`` env steps
    (``learn``: ``learn_steps``), timed as :func:`timed_learn`; the greedy return after it with
    ``learn`` or ``evaluate``."""
    from importlib.metadata import version

    import torch
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    s = settings
    env = make_vec_env(ALGOS[algo]["gymnasium_env"], n_envs=s["num_envs"], seed=seed)
    model = sbx_actor_critic_model(algo, env, s, seed)
    out = timed_learn(model, s["learn_steps"] if learn else s["learning_starts"] + steps, s["learning_starts"], "sbx",
                      {name: version(name) for name in ("sbx-rl", "jax", "gymnasium", "flax", "optax")})
    if learn or evaluate:
        out["eval_return"] = sbx_greedy_return(model, algo, seed)
    return out


def timed_learn(model, total: int, learning_starts: int, side: str, versions: dict) -> dict:
    """``model.learn(total)`` with the start time of every update phase kept: env steps/s over the
    phases after the first SKIP_PHASES trained ones; compile = their time above the median phase."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Clock(BaseCallback):
        def __init__(self):
            super().__init__()
            self.marks = []

        def _on_rollout_start(self):
            self.marks.append((time.perf_counter(), self.model.num_timesteps))

        def _on_step(self):
            return True

    clock = Clock()
    start, start_epoch = time.perf_counter(), time.time()
    model.learn(total_timesteps=total, callback=clock)
    end, end_epoch = time.perf_counter(), time.time()
    marks = clock.marks + [(end, model.num_timesteps)]
    # update phases from the one that starts at learning_starts: the first ones compile the update
    # (TD3: two programs, with and without the delayed actor step) and the policy; the timed
    # window starts after SKIP_PHASES of them, whose time above the median phase is the compile time
    first = next(i for i, (_, n) in enumerate(marks) if n >= learning_starts)
    phases = [marks[i + 1][0] - marks[i][0] for i in range(first, len(marks) - 1)]
    median = statistics.median(phases[SKIP_PHASES:])
    timed = first + SKIP_PHASES
    return {"side": side, "steps": marks[-1][1] - marks[timed][1], "seconds": marks[-1][0] - marks[timed][0],
            "compile_s": sum(max(0.0, p - median) for p in phases[:SKIP_PHASES]), "gradient_steps": model._n_updates,
            "total_s": end - start, "learn_start_epoch": start_epoch, "learn_end_epoch": end_epoch,
            "versions": versions}


# --- evorl side ---------------------------------------------------------------------------
def evorl_config(algo: str, side: str, learn: bool) -> dict:
    sys.path.insert(0, str(HERE))
    from run import load_config

    spec, s = ALGOS[algo], ALGOS[algo]["settings"]
    overrides = {f"training.{k}": s[k] for k in ("num_envs", "rollout_length", "num_updates", "batch_size",
                                                   "buffer_size", "learning_starts", "learning_rate", "gamma",
                                                   "target_update_period", "tau")}
    overrides.update({"training.n_step": 1, "logging.recorders": []})
    if algo == "dqn":
        overrides.update({"agent.q_hidden_layer_sizes": s["hidden"], "agent.epsilon_end": s["epsilon_end"]})
        overrides["agent.epsilon_decay_steps"] = (s["epsilon_decay_fraction"] * s["learn_steps"] if learn
                                                  else s["learning_starts"])
    else:  # SBX: uniformly random actions before learning_starts, raw observations and rewards
        overrides.update({"agent.actor_hidden_layer_sizes": s["hidden"], "agent.critic_hidden_layer_sizes": s["hidden"],
                          "training.warmup_steps": s["learning_starts"], "agent.normalize_obs": False,
                          "env.reward_scale": 1.0, "training.max_grad_norm": None})
        if algo == "td3":
            overrides.update({f"agent.{k}": s[k] for k in ("policy_delay", "exploration_noise", "target_noise",
                                                           "target_noise_clip")})
    if side == "evorl":
        overrides.update(spec["evorl_matched"])
    return load_config(spec["evorl_config"], overrides, spec.get("groups"))


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
        if "learn_steps" not in s:
            raise SystemExit(f"--learn-seeds: not implemented for {algo} (speed only)")
        iterations = s["learn_steps"] // per_iteration
        cfg["training"].update(num_iterations=iterations, eval_interval=iterations,
                               eval_episodes=ALGOS[algo]["eval_episodes"])
        workflow = resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=[])
        start = time.perf_counter()
        state = workflow.init(jax.random.PRNGKey(seed))
        compile_s = workflow.compile(state)  # learn() then finds it compiled
        state = workflow.learn(state)
        total = time.perf_counter() - start
        return {"side": side, "steps": iterations * per_iteration, "total_s": total, "compile_s": compile_s,
                "gradient_steps": int(state.gradient_steps),
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


def evorl_population(algo: str, num_agents: int, steps: int, seed: int, devices: int = 1) -> dict:
    """``training.num_seeds=num_agents`` in this process, each agent ``learning_starts + steps``
    env steps: compile, warm-up (to ``learning_starts``) and learning timed apart, then every
    agent's greedy return. ``devices > 1``: the agents split over that many host devices
    (``distributed.layout=population``; the caller sets ``XLA_FLAGS``)."""
    from importlib.metadata import version

    import jax
    import numpy as np

    from evorl.workflows import resolve_workflow_cls

    s = ALGOS[algo]["settings"]
    cfg = evorl_config(algo, "evorl", learn=False)
    warm, iterations = s["learning_starts"] // s["num_envs"], steps // s["num_envs"]
    cfg["seed"] = seed
    cfg["training"].update(num_seeds=num_agents, num_iterations=warm + iterations, eval_interval=warm + iterations,
                           eval_episodes=ALGOS[algo]["eval_episodes"])
    if jax.device_count() != devices:
        sys.exit(f"jax sees {jax.device_count()} devices, not {devices}")
    if devices > 1:
        cfg["distributed"] = {"multi_devices": True, "layout": "population"}
    workflow = resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=[])
    start, start_epoch = time.perf_counter(), time.time()
    state = workflow.init(jax.random.PRNGKey(seed))
    compile_s = workflow.compile(state)
    times = {}
    for phase, n in (("warmup_s", warm), ("learning_s", iterations)):
        t = time.perf_counter()
        state, _ = workflow.run_iterations(state, n)
        jax.block_until_ready(state)
        times[phase] = time.perf_counter() - t
    total = time.perf_counter() - start
    workflow.evaluate(state)
    returns = np.asarray(workflow.last_metrics_per_agent["eval/episode_return"]).reshape(-1)
    return {"side": "evorl", "agents": num_agents, "devices": devices, "steps_per_agent": (warm + iterations) * s["num_envs"],
            "learning_steps_per_agent": iterations * s["num_envs"], "compile_s": compile_s, **times,
            "total_s": total, "learn_start_epoch": start_epoch, "learn_end_epoch": start_epoch + total,
            "gradient_steps": np.asarray(state.gradient_steps).reshape(-1).tolist(),
            "eval_returns": returns.tolist(),
            "versions": {name: version(name) for name in ("evorl", "jax", "gymnax", "flax", "optax")}}


def population_side_by_side(args) -> list[dict]:
    """evorl's population in one process, then ``args.population`` SBX processes at once (or
    the other way round with ``--sbx-first``): one row per side, with every process's row."""
    s = ALGOS[args.algo]["settings"]
    n, per_agent = args.population, s["learning_starts"] + args.steps
    evorl_cmd = [sys.executable, __file__, "--algo", args.algo, "--one", "evorl", "--population", str(n),
                 "--steps", str(args.steps), "--seed", str(args.seed), "--devices", str(args.devices)]
    evorl_env = dict(os.environ, XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") +
                                            f" --xla_force_host_platform_device_count={args.devices}").strip())
    sbx_cmds = [[args.sbx_python, __file__, "--algo", args.algo, "--one", "sbx", "--evaluate", "--steps",
                 str(args.steps), "--seed", str(args.seed + i)] for i in range(n)]
    rows = []
    for side in (("sbx", "evorl") if args.sbx_first else ("evorl", "sbx")):
        before, usage = load(), resource.getrusage(resource.RUSAGE_CHILDREN)
        wall = time.perf_counter()
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=None if side == "sbx" else evorl_env)
                 for cmd in (sbx_cmds if side == "sbx" else [evorl_cmd])]
        outs = [proc.communicate() for proc in procs]
        wall = time.perf_counter() - wall
        after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the side's processes, all waited for
        cpu_s = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
        for proc, (_, err) in zip(procs, outs):
            if proc.returncode != 0:
                sys.exit(f"{side} failed:\n{err[-3000:]}")
        children = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
        span = max(c["learn_end_epoch"] for c in children) - min(c["learn_start_epoch"] for c in children)
        if side == "evorl":
            c = children[0]
            learning_rate = c["learning_steps_per_agent"] / c["learning_s"]
            returns, gradient_steps = c["eval_returns"], c["gradient_steps"]
        else:  # each process's timed window: after learning_starts and its compiles
            learning_rate = statistics.mean(c["steps"] / c["seconds"] for c in children)
            returns, gradient_steps = [c["eval_return"] for c in children], [c["gradient_steps"] for c in children]
        row = {"side": side, "algo": args.algo, "agents": n, "steps_per_agent": per_agent, "wall": wall, "cpu_s": cpu_s,
               "training_s": span, "per_agent_steps_per_s": per_agent / span, "aggregate_steps_per_s": n * per_agent / span,
               "learning_steps_per_s_per_agent": learning_rate, "eval_returns": returns,
               "gradient_steps": gradient_steps, "load_before": before, "load_after": load(), "children": children}
        rows.append(row)
        print(f"{side}: {n} agents x {per_agent:,} env steps, wall {wall:.1f} s, CPU {cpu_s:.1f} s, training {span:.1f} s, "
              f"{row['per_agent_steps_per_s']:.1f} env steps/s per agent ({row['aggregate_steps_per_s']:.1f} aggregate), "
              f"learning phase {learning_rate:.1f} per agent, returns {[round(r, 1) for r in returns]}, "
              f"load {before} -> {row['load_after']}", flush=True)
    evorl, sbx = (next(r for r in rows if r["side"] == side) for side in ("evorl", "sbx"))
    e = evorl["children"][0]
    print(f"\nevorl phases: compile {e['compile_s']:.1f} s, warm-up {e['warmup_s']:.1f} s, learning "
          f"{e['learning_s']:.1f} s; SBX processes' learn: "
          + ", ".join(f"{c['total_s']:.0f}" for c in sbx["children"]) + " s")
    print("\n| side | agents x env steps | wall s | CPU s (all its processes) | training s | env steps/s per agent | "
          "aggregate | learning phase per agent (no compile) | mean greedy return | load before -> after |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['side']} | {n} x {per_agent:,} | {r['wall']:.1f} | {r['cpu_s']:.1f} | {r['training_s']:.1f} | "
              f"{r['per_agent_steps_per_s']:.1f} | {r['aggregate_steps_per_s']:.1f} | "
              f"{r['learning_steps_per_s_per_agent']:.1f} | {statistics.mean(r['eval_returns']):.1f} | "
              f"{r['load_before']} -> {r['load_after']} |")
    print(f"\nevorl / SBX, env steps/s per agent: {evorl['per_agent_steps_per_s'] / sbx['per_agent_steps_per_s']:.2f}x "
          f"(training), {sbx['wall'] / evorl['wall']:.2f}x (wall); learning phase "
          f"{evorl['learning_steps_per_s_per_agent'] / sbx['learning_steps_per_s_per_agent']:.2f}x")
    return rows


# --- driver -------------------------------------------------------------------------------
def load() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def returns_summary(rows: list[dict], side: str) -> tuple[list[float], str]:
    """``side``'s final returns over its rows and ``mean +- std over N seeds`` (population std)."""
    returns = [r["eval_return"] for r in rows if r["side"] == side]
    mean = sum(returns) / len(returns)
    std = (sum((x - mean) ** 2 for x in returns) / len(returns)) ** 0.5
    return returns, f"{side}: {mean:.1f} +- {std:.1f} over {len(returns)} seeds"


def learn_side_by_side(seeds: list[int], sides: list[str], command, record: dict, json_path: str | None) -> list[dict]:
    """Every seed's run of every side, each in its own process (``command(side, seed)``, see
    :func:`run_child`), printed as it ends and appended to ``json_path`` (with ``record``)."""
    rows = []
    for seed in seeds:
        for side in sides:
            r = {**run_child(command(side, seed), f"{side} seed {seed}"), "side": side, "seed": seed}
            rows.append(r)
            print(f"{side} seed {seed}: return {r['eval_return']:.1f}, {r['steps']:,} env steps, "
                  f"{r['gradient_steps']:,} gradient steps, {r['total_s']:.1f} s, load {r['load_before']} -> "
                  f"{r['load_after']}", flush=True)
            if json_path:
                with open(json_path, "a") as f:
                    f.write(json.dumps({**record, **r}) + "\n")
    return rows


def run_child(cmd: list[str], label: str) -> dict:
    """One side's run in its own process: the JSON of its last stdout line, with its wall time
    and the load average before and after."""
    before = load()
    wall = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - wall
    if out.returncode != 0:
        sys.exit(f"{label} failed:\n{out.stderr[-3000:]}")
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "wall": wall, "load_before": before, "load_after": load()}


def run_side(args, side: str, seed: int, learn: bool) -> dict:
    python = args.sbx_python if side == "sbx" else sys.executable
    cmd = [python, __file__, "--algo", args.algo, "--one", side, "--steps", str(args.steps), "--seed", str(seed)]
    if learn:
        cmd.append("--learn")
    return {**run_child(cmd, f"{side} seed {seed}"), "seed": seed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", choices=sorted(ALGOS), default="dqn")
    parser.add_argument("--steps", type=int, help="timed env steps per speed run (each side; dqn 200k, sac/td3 20k)")
    parser.add_argument("--sides", help="default: sbx,evorl,evorl-config (dqn); sbx,evorl (sac, td3)")
    parser.add_argument("--repeats", type=int, default=1, help="speed runs per side (seeds 0, 1, ...)")
    parser.add_argument("--learn-seeds", default="", help="also train the full budget on these seeds, e.g. 0,1,2")
    parser.add_argument("--learn-sides", default="sbx,evorl")
    parser.add_argument("--sbx-python", default=os.environ.get("SBX_PYTHON", "/work/sbx-venv/bin/python"))
    parser.add_argument("--population", type=int, help="sac/td3: training.num_seeds=N in one evorl process "
                        "against N SBX processes at once, each agent learning_starts + --steps env steps")
    parser.add_argument("--seed", type=int, default=0, help="--population: the first seed")
    parser.add_argument("--sbx-first", action="store_true", help="--population: run SBX's processes first")
    parser.add_argument("--devices", type=int, default=1, help="--population: evorl's agents over this many host "
                        "devices (distributed.layout=population; the script sets XLA_FLAGS for evorl's process)")
    parser.add_argument("--json", help="write every row here")
    parser.add_argument("--one", choices=SIDES_ALL, help=argparse.SUPPRESS)
    parser.add_argument("--learn", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--evaluate", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    settings = ALGOS[args.algo]["settings"]
    args.steps = args.steps or ALGOS[args.algo]["steps"]
    args.sides = args.sides or ",".join(ALGOS[args.algo]["sides"])
    if args.population and args.algo == "dqn":
        parser.error("--population: sac or td3")
    if args.one:
        if args.one == "sbx":
            result = (sbx_dqn(settings, args.steps, args.seed, args.learn) if args.algo == "dqn"
                      else sbx_actor_critic(args.algo, settings, args.steps, args.seed, args.learn, args.evaluate))
        elif args.population:
            result = evorl_population(args.algo, args.population, args.steps, args.seed, args.devices)
        else:
            result = evorl_run(args.algo, args.one, args.steps, args.seed, args.learn)
        print(json.dumps(result))
        return
    if args.population:
        print(f"{args.algo}: {settings}; {args.population} agents; {os.cpu_count()} CPUs", flush=True)
        rows = population_side_by_side(args)
        if args.json:
            with open(args.json, "a") as f:
                for r in rows:
                    f.write(json.dumps(r) + "\n")
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
            print(f"learn {side} seed {seed}: return {r['eval_return']:.1f}, {r['total_s']:.1f} s "
                  f"(compile {r['compile_s']:.1f} s), {r['gradient_steps']:,} gradient steps, "
                  f"load {r['load_before']} -> {r['load_after']}", flush=True)

    if speed:
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
        print(f"\n| side | seed | final greedy return ({ALGOS[args.algo]['eval_episodes']} episodes) | training s (incl. compile) | compile s | "
              "env steps/s without compile | load before -> after |")
        print("|---|---:|---:|---:|---:|---:|---|")
        for r in learning:
            print(f"| {r['side']} | {r['seed']} | {r['eval_return']:.1f} | {r['total_s']:.1f} | {r['compile_s']:.1f} | "
                  f"{settings['learn_steps'] / (r['total_s'] - r['compile_s']):.1f} | {r['load_before']} -> {r['load_after']} |")
        for side in args.learn_sides.split(","):
            print(returns_summary(learning, side)[1])
    if args.json:
        Path(args.json).write_text(json.dumps({"settings": settings, "speed": speed, "learning": learning}, indent=1))


if __name__ == "__main__":
    main()

"""One actor step of the asynchronous actor-learner on a host env, its time split into parts.

An actor of ``configs/impala_gymnasium_cartpole.yaml`` (gymnasium CartPole-v1, 32 envs / 2
actors = 16 envs per actor, 16-step rollouts, [64, 64] tanh networks) steps its envs with
the loop of :func:`evorl.rl.host_rollout.host_rollout`, here with ``time.perf_counter`` around
each part of a step:

* ``obs -> device``: the observations ``[B, 4]`` (NumPy) put on the device;
* ``policy call``: the call of the jitted policy step (keys, network, sampling) until it
  returns; JAX on a CPU runs so small a program inline, so this is dispatch and compute;
* ``policy wait``: waiting for its arrays (``block_until_ready``), if they were not ready;
* ``actions -> host``: ``jax.device_get`` of actions, extras and env actions;
* ``env step (backend)``: the backend's step of the B envs (``_step_envs``: gymnasium's
  ``env.step`` per env and evorl's conversions), without resets;
* ``env restarts (backend)``: the backend's resets of the envs whose episode ended;
* ``env step (evorl)``: :meth:`HostVectorEnv.step`'s own NumPy (statistics, time limit);
* ``trajectory writes``: the rollout's buffers and episode sums;
* ``queue put``: the rollout put on the bounded queue (4 rollouts), per step (/ T).

Each part's mean microseconds per actor step are printed for three conditions, each on its
own: the actor alone (a thread takes its rollouts off the queue and drops them); the actor
and a learner thread that takes 2 rollouts per update off the queue, puts them on the
device and runs the run's compiled IMPALA update (as the runner's learner does); the actor
beside a second actor and that learner (the run's shape). ``off CPU`` is the share of the
actor thread's wall time it did not run (``time.thread_time``): waiting for the GIL, for a
core, or for XLA's threads. The GIL switch interval is the runner's (0.2 ms). A row
``host_rollout as is`` times the library's loop without the timers (same steps, same
condition alone), and ``raw physics`` times ``env.unwrapped.step`` of the B envs only. A
last table times, alone, the policy side of one call (the jitted step on NumPy observations,
its outputs fetched) and one env step at 8 to 64 envs per call: what more envs per policy
dispatch would save; and one policy call four ways (:func:`policy_variants`).

    python benchmarks/actor_step_profile.py [--steps 3000] [--set env.vectorization=none]
        [--policy-variants-only]
"""

from __future__ import annotations

import argparse
import contextlib
import queue
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import jax
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import apply_overrides, build, load_config  # noqa: E402

PARTS = ("obs -> device", "policy call", "policy wait", "actions -> host", "env step (backend)",
         "env restarts (backend)", "env step (evorl)", "trajectory writes", "queue put")


class Timers:
    def __init__(self):
        self.seconds = defaultdict(float)
        self.steps = 0

    def per_step_us(self) -> dict[str, float]:
        return {k: 1e6 * v / max(self.steps, 1) for k, v in self.seconds.items()}


def timed_backend(env, timers: Timers):
    """``env`` (a HostVectorEnv) with its backend hooks timed into ``timers``."""
    step_envs, restart_envs = env._step_envs, env._restart_envs

    def _step_envs(actions, ids):
        start = time.perf_counter()
        try:
            return step_envs(actions, ids)
        finally:
            timers.seconds["env step (backend)"] += time.perf_counter() - start

    def _restart_envs(ids):
        start = time.perf_counter()
        try:
            return restart_envs(ids)
        finally:
            timers.seconds["env restarts (backend)"] += time.perf_counter() - start

    env._step_envs, env._restart_envs = _step_envs, _restart_envs
    return env


def profiled_rollout(env, act, agent_state, env_state, key, length, env_ids, timers: Timers, q: queue.Queue):
    """:func:`evorl.rl.host_rollout.host_rollout`'s loop with a timer around each part."""
    pc = time.perf_counter
    step_keys = jax.random.split(key, length)
    b = env_state.reward.shape[0]
    obs_buf = np.empty((length,) + env_state.obs.shape, env_state.obs.dtype)
    next_buf = np.empty_like(obs_buf)
    rewards = np.empty((length, b), np.float32)
    terminated = np.empty((length, b), bool)
    truncated = np.empty((length, b), bool)
    actions_buf = extras_buf = None
    return_sum = length_sum = count = np.float32(0.0)
    s = timers.seconds
    for t in range(length):
        t0 = pc()
        obs = jax.device_put(env_state.obs)
        t1 = pc()
        out = act(agent_state, obs, step_keys, np.int32(t), env_ids)[0]
        t2 = pc()
        jax.block_until_ready(out)
        t3 = pc()
        actions, extras, env_actions = jax.device_get(out)
        t4 = pc()
        backend_before = s["env step (backend)"] + s["env restarts (backend)"]
        next_state = env.step(env_actions)
        t5 = pc()
        backend = s["env step (backend)"] + s["env restarts (backend)"] - backend_before
        if actions_buf is None:
            actions_buf = np.empty((length,) + np.shape(actions), np.asarray(actions).dtype)
            extras_buf = jax.tree.map(lambda x: np.empty((length,) + np.shape(x), np.asarray(x).dtype), extras)
        obs_buf[t], next_buf[t] = env_state.obs, next_state.final_obs
        rewards[t], terminated[t], truncated[t] = next_state.reward, next_state.terminated, next_state.truncated
        actions_buf[t] = actions
        jax.tree.map(lambda buf, x, t=t: buf.__setitem__(t, x), extras_buf, extras)
        done = next_state.done.astype(np.float32)
        return_sum = np.float32(return_sum + np.sum(done * next_state.episode_return, dtype=np.float32))
        length_sum = np.float32(length_sum + np.sum(done * next_state.episode_length, dtype=np.float32))
        count = np.float32(count + np.sum(done, dtype=np.float32))
        env_state = next_state
        t6 = pc()
        s["obs -> device"] += t1 - t0
        s["policy call"] += t2 - t1
        s["policy wait"] += t3 - t2
        s["actions -> host"] += t4 - t3
        s["env step (evorl)"] += (t5 - t4) - backend
        s["trajectory writes"] += t6 - t5
        s["total"] += t6 - t0
    from evorl.rl.rollout import Trajectory

    t0 = pc()
    q.put(Trajectory(obs=obs_buf, actions=actions_buf, rewards=rewards, terminated=terminated,
                     truncated=truncated, next_obs=next_buf, extras=extras_buf))
    s["queue put"] += pc() - t0
    s["total"] += pc() - t0
    timers.steps += length
    return env_state


def actor_loop(env, act, agent_state, seed, length, env_ids, steps, timers, q, stop=None):
    env_state = env.reset(seed)
    key = jax.random.PRNGKey(seed)
    cpu, wall = time.thread_time(), time.perf_counter()
    while timers.steps < steps and not (stop is not None and stop.is_set()):
        key, rollout_key = jax.random.split(key)
        env_state = profiled_rollout(env, act, agent_state, env_state, rollout_key, length, env_ids, timers, q)
    timers.off_cpu = 1.0 - (time.thread_time() - cpu) / (time.perf_counter() - wall)


def drain(q: queue.Queue, stop: threading.Event):
    while not stop.is_set():
        try:
            q.get(timeout=0.01)
        except queue.Empty:
            pass


def learner_loop(executor, state, totals, q: queue.Queue, stop: threading.Event, counter: list):
    """The runner's learner: 2 rollouts per update off the queue, on the device, one update."""
    while not stop.is_set():
        items = []
        while len(items) < executor.num_actors and not stop.is_set():
            try:
                items.append(q.get(timeout=0.01))
            except queue.Empty:
                pass
        if stop.is_set():
            return
        trajectories = tuple(jax.device_put(t, executor._batch_sharding) for t in items)
        state, totals, _ = executor._step(state, totals, executor.alive, trajectories, executor._episodes_like())
        jax.block_until_ready(totals)
        counter[0] += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3000, help="actor steps per condition (x B envs)")
    parser.add_argument("--config", default="impala_gymnasium_cartpole")
    parser.add_argument("--set", nargs="*", default=[], metavar="SECTION.KEY=VALUE", help="config overrides")
    parser.add_argument("--policy-variants-only", action="store_true",
                        help="only the last table (policy call variants)")
    args = parser.parse_args()

    from evorl.rl.host_rollout import host_rollout, make_policy_step
    from evorl.engine.actor_learner import GIL_SWITCH_SECONDS

    cfg = load_config(args.config, num_iterations=10, eval_interval=10)
    apply_overrides(cfg, args.set)
    cfg["logging"] = {"recorders": []}
    workflow = build(cfg, recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    executor = workflow.executor
    executor.compile(state)
    tc = workflow.config.training
    b, length = executor.envs_per_actor, tc.rollout_length
    agent, agent_state = executor.agent, state.agent_state
    act = make_policy_step(agent)
    if args.policy_variants_only:
        print_variants(policy_variants(act, agent_state, b), b)
        return

    def new_env(timers):
        return timed_backend(executor.env.with_num_envs(b), timers)

    # one batch for the learner thread: real rollouts of every actor's share
    warm = Timers()
    trajectories = []
    for k in range(executor.num_actors):
        env = executor.env.with_num_envs(b)
        env_state = env.reset(100 + k * b)
        _, trajectory, _ = host_rollout(env, agent, agent_state, env_state, jax.random.PRNGKey(k), length,
                                        np.arange(k * b, (k + 1) * b), act=act)
        trajectories.append(jax.device_put(trajectory))
        env.close()
    trajectories = tuple(trajectories)
    totals = executor._zero_totals(executor.place(state), trajectories)
    lstate = executor.place(state)
    executor._step(lstate, totals, executor.alive, trajectories, executor._episodes_like())  # warm
    actor_loop(new_env(warm), act, agent_state, 0, length, np.arange(b), 2 * length, warm,
               queue.Queue())  # compiles the policy

    switch = sys.getswitchinterval()
    sys.setswitchinterval(GIL_SWITCH_SECONDS)
    results, learner_rates = {}, {}
    try:
        for condition in ("alone", "with learner", "with learner + actor"):
            timers = Timers()
            stop, counter, q = threading.Event(), [0], queue.Queue(maxsize=executor.runner.queue_size)
            if condition == "alone":
                threads = [threading.Thread(target=drain, args=(q, stop), daemon=True)]
            else:
                threads = [threading.Thread(target=learner_loop, daemon=True,
                                            args=(executor, lstate, totals, q, stop, counter))]
            if condition == "with learner + actor":
                other = Timers()
                threads.append(threading.Thread(target=actor_loop, daemon=True, args=(
                    new_env(other), act, agent_state, 7, length, np.arange(b, 2 * b), 10**9, other, q, stop)))
            for th in threads:
                th.start()
            start = time.perf_counter()
            actor_loop(new_env(timers), act, agent_state, 1, length, np.arange(b), args.steps, timers, q)
            wall = time.perf_counter() - start
            stop.set()
            while any(th.is_alive() for th in threads):  # a blocked put of the other actor ends
                with contextlib.suppress(queue.Empty):
                    q.get_nowait()
                time.sleep(0.005)
            results[condition] = {**timers.per_step_us(), "off CPU": timers.off_cpu}
            learner_rates[condition] = counter[0] / wall
        # the library's loop without timers, alone
        env = executor.env.with_num_envs(b)
        env_state = env.reset(1)
        key, n, start = jax.random.PRNGKey(1), 0, time.perf_counter()
        while n < args.steps:
            key, rollout_key = jax.random.split(key)
            env_state, _, _ = host_rollout(env, agent, agent_state, env_state, rollout_key, length, np.arange(b),
                                           act=act)
            n += length
        as_is = 1e6 * (time.perf_counter() - start) / n
    finally:
        sys.setswitchinterval(switch)

    raw = raw_physics_us(executor.env.env_name, b, args.steps)
    scaling = scaling_rows(executor, act, agent_state, args.steps)
    backend = type(executor.env).__name__ + (f" ({executor.env.vectorization})" if hasattr(executor.env, "vectorization")
                                             else "")
    print(f"{args.config} {' '.join(args.set)}: one actor of {b} envs ({backend}), {length}-step rollouts, "
          f"{args.steps} actor steps per condition; microseconds per actor step (mean)\n")
    conditions = list(results)
    print("| part | " + " | ".join(conditions) + " |")
    print("|---|" + "---:|" * len(conditions))
    for part in PARTS + ("total",):
        cells = [f"{results[c].get(part, 0.0):,.0f} ({results[c].get(part, 0.0) / results[c]['total']:.0%})"
                 if part != "total" else f"**{results[c]['total']:,.0f}**" for c in conditions]
        print(f"| {part} | " + " | ".join(cells) + " |")
    print("| env steps/s of this actor | " + " | ".join(f"{b * 1e6 / results[c]['total']:,.0f}" for c in conditions)
          + " |")
    print("| actor thread off CPU | " + " | ".join(f"{results[c]['off CPU']:.0%}" for c in conditions) + " |")
    print("| learner updates/s beside it | " + " | ".join(
        "-" if c == "alone" else f"{learner_rates[c]:.1f}" for c in conditions) + " |")
    print(f"\nhost_rollout as is (no timers, alone): {as_is:,.0f} us per actor step; raw physics "
          f"(env.unwrapped.step x {b}, no wrappers, no conversion): {raw:,.0f} us")
    print("\nMore envs per policy call, alone (us per call):\n")
    print("| envs per call | policy side (call + fetch) | env step | us per env step |")
    print("|---:|---:|---:|---:|")
    print("\n".join(scaling))
    print_variants(policy_variants(act, agent_state, b), b)


def print_variants(variants: dict[str, float], b: int) -> None:
    print(f"\nOne policy call at {b} envs, alone, four ways interleaved (us per call):\n")
    print("| way | us per call |\n|---|---:|")
    for name, us in variants.items():
        print(f"| {name} | {us:,.0f} |")


def scaling_rows(executor, act, agent_state, steps: int, sizes=(8, 16, 32, 64)) -> list[str]:
    """Per call, alone: the policy side (the jitted step on NumPy obs, outputs fetched) and
    the env's step, at B envs per call."""
    rows = []
    for b in sizes:
        env = executor.env.with_num_envs(b)
        env_state = env.reset(0)
        step_keys, env_ids = jax.random.split(jax.random.PRNGKey(0), 16), np.arange(b)
        actions = np.zeros((b,) + env.action_space.shape, np.int32)
        jax.device_get(act(agent_state, env_state.obs, step_keys, np.int32(0), env_ids)[0])  # compile at b
        n = max(200, steps * 16 // b)
        start = time.perf_counter()
        for t in range(n):
            jax.device_get(act(agent_state, env_state.obs, step_keys, np.int32(t % 16), env_ids)[0])
        policy = 1e6 * (time.perf_counter() - start) / n
        start = time.perf_counter()
        for t in range(n):
            env.step(actions if t % 2 else 1 - actions)
        stepping = 1e6 * (time.perf_counter() - start) / n
        env.close()
        rows.append(f"| {b} | {policy:,.0f} | {stepping:,.0f} | {(policy + stepping) / b:,.1f} |")
    return rows


def policy_variants(act, agent_state, b: int, rounds: int = 60) -> dict[str, float]:
    """Microseconds per policy call at ``b`` envs, alone, four ways interleaved: as
    ``host_rollout`` does (``jax.device_get`` of the outputs), the outputs read with
    ``np.asarray``, the call alone (outputs not read), and a floor (a jitted ``x * 1`` on the
    observations, read back)."""
    obs = np.random.default_rng(0).normal(size=(b, 4)).astype(np.float32)
    keys, ids = jax.random.split(jax.random.PRNGKey(1), 16), jax.numpy.arange(b)
    ident = jax.jit(lambda o: o * 1.0)
    ways = {
        "device_get (as is)": lambda t: jax.device_get(act(agent_state, obs, keys, np.int32(t), ids)[0]),
        "np.asarray": lambda t: jax.tree.map(np.asarray, act(agent_state, obs, keys, np.int32(t), ids)[0]),
        "call only": lambda t: jax.block_until_ready(act(agent_state, obs, keys, np.int32(t), ids)[0]),
        "floor (jitted x * 1)": lambda t: np.asarray(ident(obs)),
    }
    seconds = dict.fromkeys(ways, 0.0)
    for name, way in ways.items():
        way(0)
    for _ in range(rounds):
        for name, way in ways.items():
            start = time.perf_counter()
            for t in range(16):
                way(t)
            seconds[name] += time.perf_counter() - start
    return {name: 1e6 * v / (16 * rounds) for name, v in seconds.items()}


def raw_physics_us(env_name: str, b: int, steps: int) -> float:
    import gymnasium

    envs = [gymnasium.make(env_name).unwrapped for _ in range(b)]
    for i, e in enumerate(envs):
        e.reset(seed=i)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 2, size=(steps, b))
    start = time.perf_counter()
    for t in range(steps):
        for e, a in zip(envs, actions[t]):
            _, _, terminated, _, _ = e.step(int(a))
            if terminated:
                e.reset()
    return 1e6 * (time.perf_counter() - start) / steps


if __name__ == "__main__":
    main()

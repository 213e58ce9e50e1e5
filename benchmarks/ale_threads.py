"""Do actor threads scale on gymnasium's Atari envs? One thread stepping ``N`` envs against
``K`` threads stepping ``N / K`` each, and against ``K`` processes stepping ``N / K`` each
(``--processes``), uniformly random actions, in alternating rounds.

The actor-learner's actors are threads unless ``runner.actor_processes=true``. If an env's
step holds the GIL for most of its time, K threads step no faster than one, and only actor
processes add speed. The envs are ``ALE/Breakout-v5`` as ``gymnasium.make`` builds
them (frameskip 4, sticky actions 0.25), without evorl's wrappers: what is measured is the
env's own step. Each process builds its envs before its timed ``--seconds`` start, so the
processes' windows overlap up to their build times (well under a second).

    python benchmarks/ale_threads.py [--envs 16] [--threads 2] [--seconds 5] [--rounds 2] [--processes]
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np


def make_envs(n: int) -> list:
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    envs = [gym.make("ALE/Breakout-v5") for _ in range(n)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    return envs


def step_for(envs: list, seconds: float, seed: int) -> float:
    """Env steps/s of one thread stepping ``envs`` in turn for ``seconds``."""
    rng, steps, start = np.random.default_rng(seed), 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for env in envs:
            _, _, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
            if terminated or truncated:
                env.reset()
            steps += 1
    return steps / (time.perf_counter() - start)


def threaded(envs: list, threads: int, seconds: float) -> float:
    """Env steps/s of ``threads`` threads together, each stepping its share of ``envs``."""
    rates: list[float] = []
    workers = [threading.Thread(target=lambda k=k: rates.append(step_for(envs[k::threads], seconds, k)))
               for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sum(rates)


def _build_and_step(n: int, seconds: float, seed: int) -> float:
    return step_for(make_envs(n), seconds, seed)


def in_processes(envs: int, processes: int, seconds: float) -> float:
    """Env steps/s of ``processes`` processes together, each stepping ``envs / processes`` of its own."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn")) as pool:
        return sum(pool.map(_build_and_step, [envs // processes] * processes, [seconds] * processes,
                            range(processes)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--processes", action="store_true", help="also K processes (K = --threads)")
    args = parser.parse_args()
    envs = make_envs(args.envs)
    ratios = []
    for r in range(args.rounds):
        order = ("one", "threads") if r % 2 == 0 else ("threads", "one")
        rates = {side: step_for(envs, args.seconds, r) if side == "one" else threaded(envs, args.threads, args.seconds)
                 for side in order}
        ratios.append(rates["threads"] / rates["one"])
        print(f"round {r}: 1 thread x {args.envs} envs {rates['one']:,.0f} steps/s; {args.threads} threads x "
              f"{args.envs // args.threads} envs {rates['threads']:,.0f} steps/s: x{ratios[-1]:.2f}", flush=True)
        if args.processes:
            rate = in_processes(args.envs, args.threads, args.seconds)
            print(f"round {r}: {args.threads} processes x {args.envs // args.threads} envs {rate:,.0f} steps/s: "
                  f"x{rate / rates['one']:.2f} of one thread", flush=True)
    print(f"{args.threads} threads / 1 thread: " + ", ".join(f"x{x:.2f}" for x in ratios))


if __name__ == "__main__":
    main()

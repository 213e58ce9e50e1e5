"""gymnasium CartPole-v1 stepped one env per copy vs as gymnasium's vector env, in the async
IMPALA of ``sb3_cartpole.py``, with SB3 PPO at the same shape for the ratio.

Each round runs three fresh processes in turn: evorl async IMPALA with
``env.vectorization=none`` (one gymnasium env per copy, the older path), the same
with ``env.vectorization=vector_entry_point`` (gymnasium's ``CartPoleVectorEnv``), and SB3
PPO (``DummyVecEnv``); every side at ``sb3_cartpole.SHAPE`` (32 envs x 16 steps, 2 epochs of
4 minibatches, [64, 64] tanh) for ``--steps`` env steps. Printed per run: env steps/s over
training (compilation excluded), the learner's and the actors' waiting fractions (the
runner's ``actors/learner_wait_fraction`` and ``actors/actor_wait_fraction``), the final
greedy return (16 episodes); then the per-round ratios. A side ``MODE:K`` runs evorl with
``runner.num_actors=K`` (the config's 2 otherwise): 32 / K envs per policy call. The side
``envpool`` (``envpool[:K]``) steps envpool's CartPole-v1 instead (``env.env_type=envpool``);
``envpool@T[:K]`` with ``T`` threads in envpool's pool (``env.kwargs.num_threads=T``; envpool's
default 0 is one thread per core). A side ending in ``+p`` runs each actor in a process of its
own (``runner.actor_processes=true``), e.g. ``vector_entry_point:1+p``.

    python benchmarks/host_vectorization.py [--steps 491520] [--rounds 3] [--seed 0]
        [--sides none,vector_entry_point,sb3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIDES = ("none", "vector_entry_point", "sb3")


def run_evorl(side: str, steps: int, seed: int) -> dict:
    sys.path.insert(0, str(HERE))
    from sb3_cartpole import evorl_config, run_evorl_config

    cfg = evorl_config("evorl-impala")
    spec, _, suffix = side.partition("+")
    if suffix not in ("", "p"):
        raise SystemExit(f"side {side!r}: the only suffix is +p (actor processes)")
    cfg["runner"]["actor_processes"] = suffix == "p"
    vectorization, _, actors = spec.partition(":")
    vectorization, _, threads = vectorization.partition("@")
    if vectorization == "envpool":
        cfg["env"]["env_type"] = "envpool"
        if threads:
            cfg["env"]["kwargs"] = {"num_threads": int(threads)}
    else:
        cfg["env"]["vectorization"] = vectorization
    if actors:
        cfg["runner"]["num_actors"] = int(actors)

    def check(workflow):
        if vectorization == "envpool":
            assert type(workflow.env).__name__ == "EnvpoolEnv", type(workflow.env)
        else:
            assert workflow.env.vectorization == vectorization, workflow.env.vectorization

    return run_evorl_config(side, cfg, steps, seed, check)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=491_520)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        if args.one == "sb3":
            sys.path.insert(0, str(HERE))
            from sb3_cartpole import run_sb3

            print(json.dumps(run_sb3(args.steps, args.seed)))
        else:
            print(json.dumps(run_evorl(args.one, args.steps, args.seed)))
        return
    sides = args.sides.split(",")
    rows = []
    for round_ in range(args.rounds):
        for side in sides:
            out = subprocess.run([sys.executable, __file__, "--one", side, "--steps", str(args.steps),
                                  "--seed", str(args.seed)], capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"{side} failed:\n{out.stderr[-3000:]}")
            r = {**json.loads(out.stdout.strip().splitlines()[-1]), "round": round_}
            rows.append(r)
            print(f"round {round_} {side}: {r['steps'] / r['seconds']:,.0f} env steps/s", flush=True)
    print(f"\ngymnasium CartPole-v1, {args.steps:,} env steps per run, seed {args.seed}\n")
    print("| round | side | env steps/s | compile s | learner waiting | actors waiting | policy lag | greedy return |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        evorl = "lag" in r
        print(f"| {r['round']} | {'SB3 PPO' if r['side'] == 'sb3' else 'evorl IMPALA, ' + r['side']} | "
              f"{r['steps'] / r['seconds']:,.0f} | {r['compile_s']:.1f} | "
              + (f"{r['learner_wait']:.0%} | {r['actor_wait']:.0%} | {r['lag']:.2f}" if evorl else " | | ")
              + f" | {r['eval_return']:.1f} |")
    rate = {s: [r["steps"] / r["seconds"] for r in rows if r["side"] == s] for s in sides}
    base = sides[0]
    print()
    for s in sides[1:]:
        ratios = [b / a for a, b in zip(rate[base], rate[s])]
        print(f"{s} / {base}, per round: {', '.join(f'{x:.2f}' for x in ratios)} "
              f"(median {statistics.median(ratios):.2f})")
    if "sb3" in rate:
        for s in sides:
            if s == "sb3":
                continue
            print(f"evorl IMPALA {s} / SB3 PPO, per round: "
                  + ", ".join(f"{a / b:.2f}" for a, b in zip(rate[s], rate["sb3"])))


if __name__ == "__main__":
    main()

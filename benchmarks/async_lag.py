"""Asynchronous runs under policy lag: does learning hold when the actors run far ahead?

Trains async IMPALA (``configs/impala_gymnasium_cartpole.yaml``) and async PPO (the default
job's PPO on gymnasium CartPole-v1, ``env.env_type=gymnasium runner.mode=async``) at their
full length on several seeds, with the learner slowed by ``runner.learner_delay_seconds``
and a deeper queue, so that the rollouts the learner consumes were acted several updates
ago. Prints, per run, the measured mean and maximum policy lag (learner updates between the
parameters a rollout acted with and the update that learns from it; the mean over the
run's logged chunks), the final greedy return and the best periodic evaluation.

    python benchmarks/async_lag.py [--seeds 100,101,102,103,104] [--delay SECONDS] [--queue-size 10]
                                    [--only impala|ppo]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from run import load_config  # noqa: E402

#: name -> (config file, groups or None, overrides, default learner delay in seconds). PPO's
#: actors take longer per rollout (128 steps), so its learner needs a longer delay to fall as
#: far behind: measured on 2 busy cores, 0.1 s gives IMPALA a mean lag of 6.0, PPO 2.9-4.6.
RUNS = {
    "impala": ("impala_gymnasium_cartpole", None, {}, 0.1),
    "ppo": ("config", {}, {"env.env_type": "gymnasium", "runner.mode": "async", "training.num_iterations": 150}, 0.4),
}


class Log:
    """A recorder keeping the evaluation returns and the actors' lag figures per chunk."""

    def __init__(self):
        self.evals, self.lag_mean, self.lag_max = [], [], []

    def init(self, config):
        pass

    def write(self, metrics, step):
        if "eval/episode_return" in metrics:
            self.evals.append(float(metrics["eval/episode_return"]))
        if "actors/policy_lag_mean" in metrics:
            self.lag_mean.append(float(metrics["actors/policy_lag_mean"]))
            self.lag_max.append(float(metrics["actors/policy_lag_max"]))

    def close(self):
        pass


def train(name: str, seed: int, delay: float, queue_size: int) -> dict:
    import jax

    from evorl.workflows import resolve_workflow_cls

    config, groups, overrides, _ = RUNS[name]
    cfg = load_config(config, {**overrides, "runner.learner_delay_seconds": delay,
                               "runner.queue_size": queue_size}, groups)
    log = Log()
    workflow = resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=[log])
    start = time.perf_counter()
    state = workflow.learn(workflow.init(jax.random.PRNGKey(seed)))
    final = workflow.evaluate(state)["eval/episode_return"]
    return {"name": name, "seed": seed, "final": final, "best": max([final, *log.evals]),
            "lag_mean": statistics.mean(log.lag_mean), "lag_max": max(log.lag_max),
            "seconds": time.perf_counter() - start}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="100,101,102,103,104")
    parser.add_argument("--delay", type=float, default=None,
                        help="runner.learner_delay_seconds (default: each run's, see RUNS)")
    parser.add_argument("--queue-size", type=int, default=10, help="runner.queue_size")
    parser.add_argument("--only", default="", choices=["", *RUNS])
    parser.add_argument("--target", type=float, default=475.0)
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = []
    for name in [args.only] if args.only else list(RUNS):
        for seed in seeds:
            delay = RUNS[name][3] if args.delay is None else args.delay
            rows.append(train(name, seed, delay, args.queue_size))
            r = rows[-1]
            r["delay"] = delay
            print(f"{name} seed {seed}: final {r['final']:.1f} best {r['best']:.1f} lag mean {r['lag_mean']:.2f} "
                  f"max {r['lag_max']:.0f} ({r['seconds']:.0f} s)", flush=True)
    print(f"\n| run | seed | learner delay (s) | policy lag mean | lag max | final | best | reached {args.target:g} |")
    print("|---|---:|---:|---:|---:|---:|---:|:-:|")
    for r in rows:
        print(f"| {r['name']} | {r['seed']} | {r['delay']:g} | {r['lag_mean']:.2f} | {r['lag_max']:.0f} | {r['final']:.1f} "
              f"| {r['best']:.1f} | {'yes' if r['final'] >= args.target else 'no'} |")
    print(f"\nrunner.queue_size={args.queue_size}")
    return 0 if all(r["final"] >= args.target for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

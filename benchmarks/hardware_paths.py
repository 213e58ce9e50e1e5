"""evorl.hardware's plain and fast paths side by side in one process: plain / fast time ratios.

* ``cnn``: forward and forward + backward of the MinAtar torso (``ConvTorso((16,))`` and a
  256-unit layer) on one rollout step of ``ppo_minatar_breakout`` (``[64, 10, 10, 4]``) and one
  of its minibatches (``[1024, 10, 10, 4]``), and of the Nature CNN (``[32, 84, 84, 4]``),
  conv path only;
* ``ppo``: one PPO CartPole iteration of ``ppo_throughput.py``'s job (4 envs x 128 steps, 4 x 4
  minibatches, [64, 64] tanh), all paths (random and conv; CartPole has no conv).

Each measurement alternates plain and fast ``--rounds`` times and reports the median time of
each and the median of the per-round ratios plain / fast (> 1: the fast path is faster).

    python benchmarks/hardware_paths.py [--rounds 5] [--only cnn|ppo]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def timed(fn, *args, calls: int) -> float:
    """Seconds per call of a compiled ``fn`` (after a warm-up call)."""
    jax.block_until_ready(fn(*args))
    start = time.perf_counter()
    for _ in range(calls):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / calls


def cnn_programs(nature: bool, shape: tuple, fast: bool):
    import flax.linen as nn

    from evorl import hardware
    from evorl.networks import ConvTorso, NatureCNNTorso

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = NatureCNNTorso()(x) if nature else ConvTorso((16,), "relu")(x)
            return nn.Dense(1)(nn.relu(nn.Dense(256)(x)))[..., 0]

    x = jax.random.uniform(jax.random.PRNGKey(0), shape, maxval=255.0 if nature else 1.0)
    net = Net()
    params = net.init(jax.random.PRNGKey(1), x)
    with hardware.use_fast_paths(conv=fast):  # the choice is taken when the programs are traced
        forward = jax.jit(net.apply).lower(params, x).compile()
        grad = jax.jit(jax.grad(lambda p, x: jnp.mean(net.apply(p, x) ** 2))).lower(params, x).compile()
    return forward, grad, params, x


def ppo_program(fast: bool):
    from evorl import hardware
    from evorl.workflows import PPOWorkflow
    from ppo_throughput import framework_config

    cfg = framework_config(0)
    with hardware.use_fast_paths(fast):
        workflow = PPOWorkflow.build_from_config(cfg, recorders=[])
        state = workflow.init(jax.random.PRNGKey(0))
        workflow.executor.compile(state)
    return workflow, state


def ratio_line(name: str, plain: list[float], fast: list[float], unit: float = 1e3, label: str = "ms") -> str:
    ratios = [p / f for p, f in zip(plain, fast)]
    plain_s, fast_s = statistics.median(plain) * unit, statistics.median(fast) * unit
    return (f"{name:34s} plain {plain_s:8.3f} {label}  fast {fast_s:8.3f} {label}  "
            f"plain/fast x{statistics.median(ratios):.2f} (rounds {', '.join(f'{r:.2f}' for r in ratios)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", choices=["cnn", "ppo"])
    parser.add_argument("--iterations", type=int, default=30, help="PPO iterations timed per round")
    args = parser.parse_args()
    print(f"backend {jax.default_backend()}, load {os.getloadavg()[0]:.2f} (1-min average), {args.rounds} rounds")
    if args.only in (None, "cnn"):
        for nature, shape in ((False, (64, 10, 10, 4)), (False, (1024, 10, 10, 4)), (True, (32, 84, 84, 4))):
            programs = {fast: cnn_programs(nature, shape, fast) for fast in (False, True)}
            times = {(fast, part): [] for fast in (False, True) for part in (0, 1)}
            for _ in range(args.rounds):
                for fast in (False, True):
                    forward, grad, params, x = programs[fast]
                    times[fast, 0].append(timed(forward, params, x, calls=5 if nature else 20))
                    times[fast, 1].append(timed(grad, params, x, calls=5 if nature else 20))
            name = f"{'Nature' if nature else 'MinAtar'} CNN {list(shape)}"
            print(ratio_line(name + " forward", times[False, 0], times[True, 0]))
            print(ratio_line(name + " fwd+bwd", times[False, 1], times[True, 1]))
    if args.only in (None, "ppo"):
        programs = {fast: ppo_program(fast) for fast in (False, True)}
        times = {False: [], True: []}
        for _ in range(args.rounds):
            for fast in (False, True):
                workflow, state = programs[fast]
                start = time.perf_counter()
                state, _ = workflow.run_iterations(state, args.iterations)
                jax.block_until_ready(state)
                times[fast].append((time.perf_counter() - start) / args.iterations)
                programs[fast] = workflow, state
        print(ratio_line("PPO CartPole iteration (4 x 128)", times[False], times[True]))
        a, b = programs[False][1], programs[True][1]  # the same run on both paths: the same bits
        same = all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a.agent_state.params),
                                                          jax.tree.leaves(b.agent_state.params)))
        print(f"PPO parameters after {args.rounds * args.iterations} iterations identical on both paths: {same}")
    print(f"load {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()

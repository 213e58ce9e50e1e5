"""How many distinct episodes a DQN config's greedy evaluation plays, and the epsilon-greedy
means beside it, along training: the diagnosis of ``dqn_minatar_breakout``'s "collapses".

    python benchmarks/greedy_episodes.py dqn_minatar_breakout --seed 101 \\
        --set env.repeat_action_probability=0.0 --set training.num_iterations=31250 [--chunks 10]

The config trains in ``--chunks`` equal parts; after each, ``--episodes`` greedy episodes
print their mean and each distinct return with its count, and ``--episodes`` episodes with
the agent's epsilon set to each ``--epsilons`` value print their mean and standard error. In
a deterministic env a greedy policy plays one episode per start state, whatever the count.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import load_config  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--chunks", type=int, default=10)
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--epsilons", default="0.01,0.05,0.1", help="comma-separated, empty for none")
    args = parser.parse_args(argv)

    import jax
    import jax.numpy as jnp
    import numpy as np

    from evorl.engine.evaluator import Evaluator
    from evorl.workflows import resolve_workflow_cls

    cfg = load_config(args.config, {k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in args.set)})
    workflow = resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg)
    greedy = jax.jit(Evaluator(workflow.evaluator.env, workflow.agent, args.episodes).evaluate)
    sampled = jax.jit(Evaluator(workflow.evaluator.env, workflow.agent, args.episodes, deterministic=False).evaluate)
    epsilons = [float(e) for e in args.epsilons.split(",") if e]
    chunk = workflow.config.training.num_iterations // args.chunks
    state, start = workflow.init(jax.random.PRNGKey(args.seed)), time.perf_counter()
    for k in range(1, args.chunks + 1):
        state, _ = workflow.run_iterations(state, chunk)
        key = jax.random.PRNGKey(1000 + k)
        returns = np.asarray(greedy(state.agent_state, key)[0])  # [E]
        values, counts = np.unique(returns, return_counts=True)
        line = (f"{k * chunk * workflow.env_steps_per_iteration:,} env steps: greedy {returns.mean():.2f} over "
                f"{len(values)} distinct returns" + (f" ({', '.join(f'{v:g} x{c}' for v, c in zip(values, counts))})"
                                                     if len(values) <= 4 else ""))
        for epsilon in epsilons:  # the agent acts epsilon-greedily at hparams.epsilon_end when sampled
            hparams = state.agent_state.hparams.replace(epsilon_end=jnp.float32(epsilon))
            r = np.asarray(sampled(state.agent_state.replace(hparams=hparams), key)[0])
            line += f" | epsilon {epsilon:g}: {r.mean():.2f} +- {r.std() / np.sqrt(len(r)):.2f}"
        print(line + f" [{time.perf_counter() - start:.0f} s]", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

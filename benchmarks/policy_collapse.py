"""Which agents of a population's MinAtar run collapsed, and how: per agent, the training
entropy, the greedy return, and the policy on observations of uniformly random play (its mean
entropy and how often its greedy choice is each action). An agent whose greedy policy never takes
some action and whose entropy sits far below the others' has collapsed early.

    python benchmarks/policy_collapse.py a2c_minatar_breakout --seed 77001 --agents 8 --iterations 1500 \
        --out benchmarks/results/minatar/a2c_breakout_collapse.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("config", help="a MinAtar config in configs/ (a discrete-action actor-critic)")
    p.add_argument("--seed", type=int, required=True, help="the run's seed: the agents' keys are split from it")
    p.add_argument("--agents", type=int, default=8)
    p.add_argument("--iterations", type=int, required=True)
    p.add_argument("--eval-episodes", type=int, default=32)
    p.add_argument("--out", help="append the row here (JSON lines)")
    p.add_argument("--machine", default=platform.node(), help="the machine's name in the row")
    args = p.parse_args()

    import gymnax
    import jax
    import jax.numpy as jnp
    import numpy as np
    from omegaconf import OmegaConf

    from evorl.workflows import resolve_workflow_cls

    cfg = OmegaConf.to_container(OmegaConf.load(ROOT / "configs" / f"{args.config}.yaml"), resolve=True)
    cfg.pop("defaults", None)
    cfg["seed"] = args.seed
    cfg["training"].update(num_seeds=args.agents, num_iterations=args.iterations, eval_interval=args.iterations,
                           eval_episodes=args.eval_episodes)
    workflow = resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=[])
    state, _ = workflow.run_iterations(workflow.init(jax.random.PRNGKey(args.seed)), args.iterations)
    per_agent = dict(workflow.last_metrics_per_agent)  # the training metrics of the last iteration
    workflow.evaluate(state)
    per_agent.update(workflow.last_metrics_per_agent)

    env, params = gymnax.make(cfg["env"]["env_name"])
    n, steps = 512, 20
    obs, env_state = jax.vmap(env.reset, (0, None))(jax.random.split(jax.random.PRNGKey(0), n), params)

    def play(carry, key):  # uniformly random play: observations the policy is read on
        obs, env_state = carry
        action = jax.random.randint(key, (n,), 0, env.num_actions)
        next_obs, env_state, *_ = jax.vmap(env.step, (0, 0, 0, None))(jax.random.split(key, n), env_state, action, params)
        return (next_obs, env_state), obs

    _, observations = jax.lax.scan(play, (obs, env_state), jax.random.split(jax.random.PRNGKey(1), steps))
    observations = observations.reshape(n * steps, *observations.shape[2:]).astype(jnp.float32)  # [T * B, ...]
    entropy, counts = [], []
    for i in range(args.agents):
        logits = workflow.agent.policy_output(jax.tree.map(lambda x: x[i], state.agent_state), observations)  # [N, A]
        probs = jax.nn.softmax(logits)
        entropy.append(round(float(-(probs * jnp.log(probs + 1e-12)).sum(-1).mean()), 4))
        counts.append(np.bincount(np.asarray(jnp.argmax(logits, -1)), minlength=env.num_actions).tolist())

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    row = {"config": args.config, "seed": args.seed, "agents": args.agents, "iterations": args.iterations,
           "env_steps_per_agent": args.iterations * workflow.env_steps_per_iteration, "backend": jax.default_backend(),
           "machine": args.machine, "load": [round(x, 2) for x in os.getloadavg()], "git_commit": commit,
           "train_entropy_per_agent": [round(float(x), 4) for x in per_agent["train/entropy"]],
           "eval_return_per_agent": [round(float(x), 2) for x in per_agent["eval/episode_return"]],
           "eval_episodes": args.eval_episodes,
           "policy_entropy_on_random_play": entropy, "greedy_action_counts_on_random_play": counts,
           "random_play_observations": n * steps}
    print(json.dumps(row))
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()

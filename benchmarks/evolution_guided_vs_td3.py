"""CEM-RL and ERL against TD3 alone at the same env steps: brax hopper and
halfcheetah, or gymnax Pendulum-v1 (``--envs pendulum``, 200-step episodes, rewards scaled by
0.1 and gamma 0.95 as ``configs/cemrl_pendulum.yaml``), the same networks, optimiser, batch, discount, target networks and TD3 noise on
all three sides, one critic gradient step per env step on all three, the same 10k-step
uniform warm-up, and greedy evaluation (10 episodes) of what each side would deploy: TD3's
actor, CEM-RL's distribution mean, ERL's champion.

    python benchmarks/evolution_guided_vs_td3.py --envs hopper halfcheetah --seeds 0 1 2 \\
        --env-steps 200000 --out benchmarks/figures/evolution_guided_vs_td3.jsonl
    python benchmarks/evolution_guided_vs_td3.py --envs pendulum --seeds 4411 4412 4413 4414 4415 \\
        --env-steps 44000 --warmup 2000 --out pendulum.jsonl

Each (env, algorithm, seed) appends one JSON line to ``--out`` as it finishes (so runs can
be split across processes and the table printed later with ``--table``). The published
direction (Pourchot & Sigaud 2019, Table 1; Khadka & Tumer 2018, Fig. 3): CEM-RL >= TD3 and
ERL >= DDPG on MuJoCo at 1M steps; here a CPU budget, far shorter.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

POPULATION = 10
#: Per env name: the env section and the discount (the brax envs' 1000-step episodes; gymnax
#: Pendulum-v1 as the Pendulum configs of this repository).
ENVS = {
    "pendulum": ({"env_name": "Pendulum-v1", "env_type": "gymnax", "episode_length": 200, "reward_scale": 0.1}, 0.95),
}


def env_section(env_name: str, backend: str) -> tuple[dict, float]:
    if env_name in ENVS:
        return ENVS[env_name]
    return {"env_name": env_name, "env_type": "brax", "backend": backend, "episode_length": 1000}, 0.99


def configs(env_name: str, backend: str, hidden: list[int], env_steps: int, warmup: int) -> dict[str, dict]:
    """The three sides' configs, equal wherever the algorithms share a setting."""
    env, gamma = env_section(env_name, backend)
    episode_length = env["episode_length"]
    agent = {"actor_hidden_layer_sizes": hidden, "critic_hidden_layer_sizes": hidden, "activation": "relu",
             "exploration_noise": 0.1, "target_noise": 0.2, "target_noise_clip": 0.5, "policy_delay": 2}
    common = {"seed": 0, "env": env, "logging": {"recorders": [], "plot": False}}
    shared = {"batch_size": 100, "buffer_size": 1_000_000, "learning_starts": warmup, "warmup_steps": warmup,
              "tau": 0.005}
    eval_keys = {"eval_episodes": 10, "learning_rate": 1e-3, "gamma": gamma}
    num_envs = 10  # TD3: 10 envs x 1 step, then 10 gradient steps: one per env step
    cem_generation = POPULATION * episode_length
    erl_generation = (POPULATION + 1) * episode_length
    return {
        "TD3": {**common, "workflow_cls": "evorl.workflows.TD3Workflow", "agent": agent,
                "training": {**shared, **eval_keys, "num_iterations": env_steps // num_envs, "rollout_length": 1,
                             "num_envs": num_envs, "num_updates": num_envs, "max_grad_norm": None,
                             "target_update_period": 2, "eval_interval": env_steps // num_envs}},
        "CEM-RL": {**common, "workflow_cls": "evorl.workflows.CEMRLWorkflow", "agent": {**agent, "exploration_noise": 0.0},
                   "cemrl": {**shared, "population_size": POPULATION, "num_elites": POPULATION // 2,
                             "num_updates": cem_generation},
                   "training": {**eval_keys, "num_iterations": env_steps // cem_generation,
                                "eval_interval": env_steps // cem_generation}},
        "ERL": {**common, "workflow_cls": "evorl.workflows.ERLWorkflow", "agent": agent,
                "erl": {**shared, "population_size": POPULATION, "num_updates": erl_generation, "sync_period": 1},
                "training": {**eval_keys, "num_iterations": env_steps // erl_generation,
                             "eval_interval": env_steps // erl_generation}},
    }


def run_one(cfg: dict, seed: int) -> dict:
    import jax

    from evorl.workflows import resolve_workflow_cls

    workflow = resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=[])
    start = time.perf_counter()
    state = workflow.init(jax.random.PRNGKey(seed))
    state, _ = workflow.run_iterations(state, workflow.config.training.num_iterations)
    jax.block_until_ready(state)
    seconds = time.perf_counter() - start
    result = workflow.evaluate(state)
    steps = workflow.config.training.num_iterations * workflow.env_steps_per_iteration
    return {"return": float(result["eval/episode_return"]), "env_steps": int(steps), "seconds": round(seconds, 1)}


def table(rows: list[dict]) -> str:
    out = ["| env | algorithm | env steps | final greedy return per seed | mean +- std | wall s per run |",
           "| --- | --- | ---: | --- | ---: | ---: |"]
    keys = sorted({(r["env"], r["algorithm"]) for r in rows}, key=lambda k: (k[0], ["TD3", "CEM-RL", "ERL"].index(k[1])))
    for env, algo in keys:
        runs = sorted((r for r in rows if r["env"] == env and r["algorithm"] == algo), key=lambda r: r["seed"])
        returns = np.asarray([r["return"] for r in runs])
        out.append(f"| {env} | {algo} | {runs[0]['env_steps']:,} | "
                   + ", ".join(f"{r['return']:.0f} (seed {r['seed']})" for r in runs)
                   + f" | {returns.mean():.0f} +- {returns.std():.0f} | {np.mean([r['seconds'] for r in runs]):.0f} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="+", default=["hopper", "halfcheetah"])
    parser.add_argument("--algorithms", nargs="+", default=["TD3", "CEM-RL", "ERL"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--env-steps", type=int, default=200_000)
    parser.add_argument("--warmup", type=int, default=10_000)
    parser.add_argument("--backend", default="positional")
    parser.add_argument("--hidden", nargs="+", type=int, default=[64, 64])
    parser.add_argument("--out", type=Path, default=Path("evolution_guided_vs_td3.jsonl"))
    parser.add_argument("--table", action="store_true", help="only print the table of --out")
    args = parser.parse_args()
    done = set()
    if args.out.exists():  # rows already measured (a restarted run continues where it stopped)
        done = {(r["env"], r["algorithm"], r["seed"]) for r in map(json.loads, args.out.read_text().splitlines())}
    if not args.table:
        for env_name in args.envs:
            cfgs = configs(env_name, args.backend, args.hidden, args.env_steps, args.warmup)
            for seed in args.seeds:
                for algo in args.algorithms:
                    if (env_name, algo, seed) in done:
                        continue
                    row = {"env": env_name, "algorithm": algo, "seed": seed, "backend": args.backend,
                           "hidden": args.hidden, **run_one(cfgs[algo], seed)}
                    print(json.dumps(row), flush=True)
                    with args.out.open("a") as f:
                        f.write(json.dumps(row) + "\n")
    print(table([json.loads(line) for line in args.out.read_text().splitlines() if line.strip()]))


if __name__ == "__main__":
    main()

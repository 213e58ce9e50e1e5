"""Where a brax config's first minutes go, phase by phase, on whatever backend JAX finds.

For ``configs/<config>.yaml`` (default ``ppo_brax_ant``): the env's build, the compile and
the run of its vmapped ``reset`` and of ``--steps`` vmapped ``step`` calls (a ``lax.scan``),
then the PPO workflow's build, the training program's compile and one iteration. Each phase
prints one JSON line (seconds, backend, shapes) the moment it ends and appends it to
``--out``, so a run stopped by a time limit still says which phase it was in.

    python benchmarks/brax_phases.py --config ppo_brax_ant --steps 100
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="ppo_brax_ant")
    p.add_argument("--steps", type=int, default=100, help="env steps in the timed scan")
    p.add_argument("--num-envs", type=int, default=0, help="0: the config's")
    p.add_argument("--backend", default="", help="brax physics backend (default: the config's)")
    p.add_argument("--skip-workflow", action="store_true", help="time the env alone")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "brax_phases" / "phases.jsonl"))
    args = p.parse_args()

    import jax
    import jax.numpy as jnp
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(OmegaConf.load(ROOT / "configs" / f"{args.config}.yaml"), resolve=True)
    cfg.pop("defaults", None)
    if args.backend:
        cfg["env"]["backend"] = args.backend
    num_envs = args.num_envs or cfg["training"]["num_envs"]
    base = {"config": args.config, "backend_jax": jax.default_backend(), "device": jax.devices()[0].device_kind,
            "brax_backend": cfg["env"].get("backend"), "num_envs": num_envs}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    clock = [time.perf_counter()]

    def phase(name: str, **extra) -> None:
        now = time.perf_counter()
        row = {**base, "phase": name, "seconds": round(now - clock[0], 3), **extra}
        clock[0] = now
        print(json.dumps(row), flush=True)
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")

    phase("import jax")
    from brax import envs

    env = envs.get_environment(cfg["env"]["env_name"], **({"backend": cfg["env"]["backend"]}
                                                           if cfg["env"].get("backend") else {}))
    phase("build env")
    obs = jax.eval_shape(env.reset, jax.random.PRNGKey(0)).obs  # brax's observation_size runs reset op by op
    phase("trace reset", obs=int(obs.shape[-1]), actions=int(env.action_size))
    keys = jax.random.split(jax.random.PRNGKey(0), num_envs)
    reset = jax.jit(jax.vmap(env.reset)).lower(keys).compile()
    phase("compile reset")
    state = jax.block_until_ready(reset(keys))
    phase("run reset")

    def rollout(state):
        def body(s, _):
            return jax.vmap(env.step)(s, jnp.zeros((num_envs, env.action_size))), None
        return jax.lax.scan(body, state, None, length=args.steps)[0]

    steps = jax.jit(rollout).lower(state).compile()
    phase("compile step scan", steps=args.steps)
    jax.block_until_ready(steps(state))
    phase("run step scan (first)", steps=args.steps)
    start = time.perf_counter()
    jax.block_until_ready(steps(state))
    phase("run step scan", steps=args.steps, env_steps_per_s=round(args.steps * num_envs / (time.perf_counter() - start)))
    if args.skip_workflow:
        return
    from evorl.workflows import resolve_workflow_cls

    cfg["training"].update(num_envs=num_envs, num_iterations=2, eval_interval=2, eval_episodes=1)
    workflow = resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=[])
    wstate = workflow.init(jax.random.PRNGKey(0))
    phase("build workflow")
    workflow.executor.compile(wstate)
    phase("compile training program")
    wstate, _ = workflow.run_iterations(wstate, 1)
    jax.block_until_ready(wstate)
    phase("run one iteration (first)")
    start = time.perf_counter()
    wstate, _ = workflow.run_iterations(wstate, 1)
    jax.block_until_ready(wstate)
    phase("run one iteration", env_steps_per_s=round(workflow.env_steps_per_iteration / (time.perf_counter() - start)))


if __name__ == "__main__":
    main()

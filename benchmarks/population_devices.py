"""Learning-phase throughput of an off-policy population on one device against the same
population split over several host devices (``distributed.layout=population``).

SAC with ``configs/algo/sac.yaml`` on gymnax Pendulum-v1, ``training.num_seeds`` agents, learning
and random actions from 1,000 env steps. One fresh process per measurement: build, compile,
1,000 warm-up iterations, then ``ITERATIONS`` learning iterations timed; prints one JSON line
(the devices, the agents, the compile time and the aggregate env steps/s of the learning phase).
The device count is XLA's flag, set before jax is imported, so run it as:

    XLA_FLAGS=--xla_force_host_platform_device_count=1 python benchmarks/population_devices.py 1 8 1000
    XLA_FLAGS=--xla_force_host_platform_device_count=2 python benchmarks/population_devices.py 2 8 1000
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "algo" / "sac.yaml"
START = 1000


def main() -> None:
    devices, seeds, iterations = (int(a) for a in sys.argv[1:4])
    import jax
    from omegaconf import OmegaConf

    from evorl.workflows import resolve_workflow_cls

    if jax.device_count() != devices:
        raise SystemExit(f"jax sees {jax.device_count()} devices, not {devices}: set "
                         f"XLA_FLAGS=--xla_force_host_platform_device_count={devices} before running")
    cfg = OmegaConf.to_container(OmegaConf.load(CONFIG))
    cfg["env"] = {"env_name": "Pendulum-v1", "env_type": "gymnax"}
    cfg["training"].update(num_seeds=seeds, learning_starts=START, warmup_steps=START)
    if devices > 1:
        cfg["distributed"] = {"multi_devices": True, "layout": "population"}
    workflow = resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    compile_s = workflow.compile(state)
    state, _ = workflow.run_iterations(state, START)  # warm-up: every timed iteration below learns
    jax.block_until_ready(state)
    start = time.perf_counter()
    state, _ = workflow.run_iterations(state, iterations)
    jax.block_until_ready(state)
    seconds = time.perf_counter() - start
    print(json.dumps({"devices": devices, "agents": seeds, "compile_s": round(compile_s, 1),
                      "learning_env_steps_per_s": round(seeds * iterations / seconds, 1)}))


if __name__ == "__main__":
    main()

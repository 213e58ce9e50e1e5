"""One process of a multi-process run (started by test_multi_host.py); also the
single-process reference when ``num_processes`` is 1. Saves the final parameters."""

import json
import sys

import numpy as np


def main():
    cfg, out_path, iterations = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    import jax

    from evorl.workflows import PPOWorkflow
    from evorl.engine.execution import to_host  # gathers arrays split across processes

    workflow = PPOWorkflow.build_from_config(cfg, recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    print(f"process {jax.process_index()} of {jax.process_count()}: {jax.device_count()} devices, "
          f"{len(state.env_state.obs.addressable_shards)} local env shard(s)", flush=True)
    for _ in range(iterations):
        state, metrics = workflow.step(state)
        print(f"iteration {int(np.max(to_host(state.iteration)))} loss {metrics['train/loss']:.6f}", flush=True)
    leaves = {str(i): x for i, x in enumerate(jax.tree.leaves(to_host(state.agent_state.params)))}
    np.savez(out_path, **leaves)




def experiment():
    """``multi_host_worker.py experiment CFG RUN_DIR OUT``: run_experiment in RUN_DIR (shared by
    the processes), then save the final parameters to OUT."""
    cfg, run_dir, out_path = json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
    import jax

    from evorl.app.cli import exit_on_config_error
    from evorl.app.experiment import run_experiment

    with exit_on_config_error():  # as evorl-train
        result = run_experiment(cfg, output_dir=run_dir)
    leaves = {str(i): np.asarray(x) for i, x in enumerate(jax.tree.leaves(result.state.agent_state.params))}
    np.savez(out_path, **leaves)


if __name__ == "__main__":
    experiment() if sys.argv[1] == "experiment" else main()

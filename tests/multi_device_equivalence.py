"""Run by test_multi_device.py in a subprocess with 2 host devices (XLA_FLAGS must be set
before jax is imported): prints one JSON line comparing 1-device and 2-device training."""

import json
import sys

import jax
import numpy as np

from evorl.workflows import resolve_workflow_cls


def train(workflow_cls, cfg, multi, iterations):
    if not multi and "runner" in cfg:  # one device: the learner has no mesh
        cfg = {**cfg, "runner": {k: v for k, v in cfg["runner"].items() if k != "learner_devices"}}
    workflow = resolve_workflow_cls(workflow_cls).build_from_config(cfg, enable_multi_devices=multi, recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    state, metrics = workflow.run_iterations(state, iterations)
    return workflow, state, metrics


def steps_to_reach(workflow_cls, cfg, multi, seeds, threshold, max_iterations, eval_every):
    """Per seed, env steps at the first evaluation >= threshold (None if never)."""
    workflow = resolve_workflow_cls(workflow_cls).build_from_config(cfg, enable_multi_devices=multi, recorders=[])
    per_iteration = workflow.config.training.env_steps_per_iteration
    reached = []
    for seed in range(seeds):
        state, done, hit = workflow.init(jax.random.PRNGKey(seed)), 0, None
        while hit is None and done < max_iterations:
            state, _ = workflow.run_iterations(state, eval_every)
            done += eval_every
            if workflow.evaluate(state)["eval/episode_return"] >= threshold:
                hit = done * per_iteration
        reached.append(hit)
    return reached


def resumed_on_one_device(cfg, iterations, folder):
    """Trains ``iterations // 2`` iterations split over the 2 devices (checkpointed), resumes
    the run on 1 device to ``iterations``, and compares every leaf with a 1-device run never
    stopped."""
    from pathlib import Path

    from evorl.app.experiment import run_experiment

    cfg = {**cfg, "checkpoint": {"save_interval": iterations // 2}, "logging": {"recorders": [], "plot": False},
           "training": {**cfg["training"], "num_iterations": iterations, "eval_interval": iterations // 2}}
    split = {**cfg, "distributed": {**cfg.get("distributed", {}), "multi_devices": True},
             "training": {**cfg["training"], "num_iterations": iterations // 2}}
    first = run_experiment(split, output_dir=Path(folder) / "split")
    resumed = run_experiment({**cfg, "resume": str(Path(folder) / "split")})
    straight = run_experiment(cfg, output_dir=Path(folder) / "straight")
    leaves = list(zip(jax.tree.leaves(resumed.state), jax.tree.leaves(straight.state)))
    return {"first_devices": len(jax.tree.leaves(first.state.buffer.data)[0].sharding.device_set),
            "resumed_devices": len(jax.tree.leaves(resumed.state.buffer.data)[0].sharding.device_set),
            "iterations": int(resumed.state.iteration),
            "leaves_equal": sum(bool(np.array_equal(np.asarray(a), np.asarray(b))) for a, b in leaves),
            "leaves": len(leaves)}


def main():
    workflow_cls, cfg_json, iterations = sys.argv[1], sys.argv[2], int(sys.argv[3])
    cfg = json.loads(cfg_json)
    assert jax.device_count() == 2, jax.devices()
    if len(sys.argv) > 4 and sys.argv[4] == "resume":  # checkpointed on 2 devices, resumed on 1
        print(json.dumps(resumed_on_one_device(cfg, iterations, sys.argv[5])))
        return
    if len(sys.argv) > 4 and sys.argv[4] == "learn":
        print(json.dumps({
            f"{n}_devices": steps_to_reach(workflow_cls, cfg, n == 2, 3, 475.0, iterations, 10) for n in (1, 2)
        }))
        return
    single_workflow, single, m1 = train(workflow_cls, cfg, False, iterations)
    workflow, multi, m2 = train(workflow_cls, cfg, True, iterations)
    evals = [w.evaluate(s)["eval/episode_return"] for w, s in ((single_workflow, single), (workflow, multi))]
    diffs = jax.tree.map(
        lambda a, b: float(np.max(np.abs(np.asarray(a) - np.asarray(b)))), single.agent_state.params,
        multi.agent_state.params,
    )
    if not hasattr(multi, "env_state"):  # ES: the state is replicated, the population's members split
        placement = {"member_devices": workflow.placement.mesh.size,
                     "replicated": all(x.sharding.is_fully_replicated for x in jax.tree.leaves(multi)),
                     "max_state_diff": max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
                                           for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(multi)))}
    elif multi.env_state is None:  # the asynchronous learner: its state is replicated over the learner's mesh
        sharding = jax.tree.leaves(multi.agent_state.params)[0].sharding
        learner = workflow.executor.learner_mesh
        placement = {"learner_devices": 1 if learner is None else learner.size}
    else:
        sharding = multi.env_state.obs.sharding
        placement = {"env_devices": len(sharding.device_set), "partition": str(sharding.spec)}
        if hasattr(multi, "buffer"):  # off-policy: the replay buffer as stored, and its difference to 1 device's
            placement["buffer_partition"] = str(multi.buffer.data.obs.sharding.spec)
            placement["buffer_shard_shape"] = list(multi.buffer.data.obs.addressable_shards[0].data.shape)
            placement["max_buffer_diff"] = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
                                               for a, b in zip(jax.tree.leaves(single.buffer), jax.tree.leaves(multi.buffer)))
    print(json.dumps({
        **placement,
        "max_param_diff": max(jax.tree.leaves(diffs)),
        "param_scale": max(float(np.max(np.abs(np.asarray(x)))) for x in jax.tree.leaves(single.agent_state.params)),
        "episodes": [m1["train/episodes"], m2["train/episodes"]],
        "loss": [m1.get("train/loss"), m2.get("train/loss")],
        "metrics": [m1, m2],
        "eval_return": evals,
        # per-agent learning rates of an RL state (PBT checks them); ES has none
        "learning_rates": [np.asarray(s.learning_rate).tolist() if hasattr(s, "learning_rate") else None
                           for s in (single, multi)],
    }))


if __name__ == "__main__":
    main()

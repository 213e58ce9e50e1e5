"""Data parallelism over 2 CPU devices equals the 1-device run (same envs, keys and batches)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("multi_device_equivalence.py")


def run_two_devices(workflow_cls, cfg, iterations, *mode):
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    out = subprocess.run(
        [sys.executable, str(SCRIPT), workflow_cls, json.dumps(cfg), str(iterations), *mode],
        capture_output=True, text=True, env=env, timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


CARTPOLE = {"env_name": "CartPole-v1", "env_type": "gymnax"}


@pytest.mark.slow  # two device processes and a one-device run to compare
@pytest.mark.parametrize("workflow_cls, agent, training, layout", [
    ("evorl.workflows.PPOWorkflow", {"normalize_obs": True, "normalize_gae": True}, {}, "envs"),
    pytest.param("evorl.workflows.IMPALAWorkflow", {"normalize_obs": True}, {"actor_lag": 1}, "envs",
                 marks=pytest.mark.slow),
    pytest.param("evorl.workflows.PPOWorkflow", {"clip_epsilon": [0.1, 0.2]}, {"num_seeds": 2}, "envs",  # seeds x devices
                 marks=pytest.mark.slow),
    # whole agents on each device: 2 of the 4 agents per device
    pytest.param("evorl.workflows.PPOWorkflow", {"clip_epsilon": [0.1, 0.2], "normalize_obs": True}, {"num_seeds": 2},
                 "population", marks=pytest.mark.slow),
    pytest.param("evorl.workflows.IMPALAWorkflow", {}, {"num_seeds": 2, "learning_rate": [1e-3, 3e-4]}, "population",
                 marks=pytest.mark.slow),
])
def test_two_devices_equal_one_device(workflow_cls, agent, training, layout):
    cfg = {"env": CARTPOLE, "agent": {"actor_hidden_layer_sizes": [32, 32], "critic_hidden_layer_sizes": [32, 32], **agent},
           "training": {"num_envs": 8, "rollout_length": 32, "num_epochs": 2, "num_minibatches": 1, **training},
           "distributed": {"layout": layout}}
    result = run_two_devices(workflow_cls, cfg, iterations=5)
    assert result["env_devices"] == 2
    # envs: each agent's environments split (after the population axis, if any); population: agents split
    expected = {"envs": "devices" if not training.get("num_seeds") else "None, 'devices'", "population": "'devices'"}
    assert result["partition"].strip("P()").rstrip(",").replace('"', "'") in (expected[layout], f"'{expected[layout]}'"), result
    assert result["episodes"][0] == result["episodes"][1]
    assert result["eval_return"][0] == pytest.approx(result["eval_return"][1], abs=1e-3)
    assert result["max_param_diff"] <= 1e-5 * max(1.0, result["param_scale"]), result


@pytest.mark.slow
def test_an_env_that_never_terminates_splits_over_two_devices():
    """gymnax Pendulum never terminates: its ``terminated`` flags are constants, which JAX
    types as the same on every device while the rollout's carry varies; the rollout marks
    them varying (it failed to trace before), and PPO on 2 devices equals 1."""
    cfg = {"env": {"env_name": "Pendulum-v1", "env_type": "gymnax"},
           "agent": {"actor_hidden_layer_sizes": [16], "critic_hidden_layer_sizes": [16]},
           "training": {"num_envs": 4, "rollout_length": 16, "num_epochs": 1, "num_minibatches": 1},
           "distributed": {"layout": "envs"}}
    result = run_two_devices("evorl.workflows.PPOWorkflow", cfg, iterations=3)
    assert result["env_devices"] == 2, result
    assert result["max_param_diff"] <= 1e-5 * max(1.0, result["param_scale"]), result


@pytest.mark.slow  # two processes of 4 SAC agents: compile-bound
def test_sac_population_on_two_devices_equals_one_device():
    """Off-policy agents on several devices are whole agents per device (each with its buffer):
    4 SAC agents, 2 per device, equal the 4 on one device."""
    cfg = {"env": {"env_name": "Pendulum-v1", "env_type": "gymnax"},
           "agent": {"actor_hidden_layer_sizes": [16], "critic_hidden_layer_sizes": [16]},
           "training": {"num_envs": 2, "rollout_length": 8, "buffer_size": 256, "batch_size": 16, "num_updates": 2,
                        "learning_starts": 16, "warmup_steps": 16, "num_seeds": 2, "learning_rate": [1e-3, 3e-4]},
           "distributed": {"layout": "population"}}
    result = run_two_devices("evorl.workflows.SACWorkflow", cfg, iterations=4)
    assert result["env_devices"] == 2 and result["partition"].strip("P()").rstrip(",").strip("'\"") == "devices", result
    assert result["episodes"][0] == result["episodes"][1]
    assert result["max_param_diff"] <= 1e-5 * max(1.0, result["param_scale"]), result


@pytest.mark.slow  # two device processes and a one-device run to compare
@pytest.mark.parametrize("workflow_cls, env, agent, training", [
    ("evorl.workflows.DQNWorkflow", CARTPOLE, {"q_hidden_layer_sizes": [16], "epsilon_decay_steps": 200}, {}),
    pytest.param("evorl.workflows.SACWorkflow", {"env_name": "Pendulum-v1", "env_type": "gymnax"},
                 {"actor_hidden_layer_sizes": [16], "critic_hidden_layer_sizes": [16], "normalize_obs": True},
                 {"warmup_steps": 32}, marks=pytest.mark.slow),
    pytest.param("evorl.workflows.DQNWorkflow", CARTPOLE, {"q_hidden_layer_sizes": [16]},  # 4 agents, each split
                 {"num_seeds": 2, "learning_rate": [1e-3, 3e-4]}, marks=pytest.mark.slow),
])
def test_off_policy_agent_split_over_two_devices_equals_one_device(workflow_cls, env, agent, training):
    """``distributed.layout=envs`` splits one agent's environments and its replay buffer's
    columns over 2 devices: each device holds half the buffer, the buffer as a whole and the
    parameters equal the 1-device run's (every device draws the 1-device batch), across the
    buffer's wrap-around (6 iterations x 32 transitions into 64 slots)."""
    cfg = {"env": env, "agent": agent,
           "training": {"num_envs": 4, "rollout_length": 8, "buffer_size": 64, "batch_size": 16, "num_updates": 2,
                        "learning_starts": 32, "target_update_period": 3, **training},
           "distributed": {"layout": "envs"}}
    result = run_two_devices(workflow_cls, cfg, iterations=6)
    population = "num_seeds" in training
    assert result["env_devices"] == 2, result
    assert result["buffer_partition"].replace('"', "'") == ("P(None, None, 'devices')" if population
                                                           else "P(None, 'devices')"), result
    # this device's half: 16 rows x 2 of the 4 environments' columns (then the observation's shape)
    assert result["buffer_shard_shape"][:3 if population else 2] == ([4] if population else []) + [16, 2], result
    assert result["episodes"][0] == result["episodes"][1]
    assert result["max_buffer_diff"] <= 1e-4, result  # SAC: actions from parameters equal up to rounding
    assert result["max_param_diff"] <= 1e-5 * max(1.0, result["param_scale"]), result


@pytest.mark.slow  # three runs in one process
def test_off_policy_checkpoint_of_two_devices_resumes_on_one(tmp_path):
    """The split buffer is stored as the one-device buffer (its columns are the environments):
    a DQN run checkpointed at iteration 3 on 2 devices and resumed on 1 ends with every leaf
    equal to a 1-device run never stopped."""
    cfg = {"env": CARTPOLE, "workflow_cls": "evorl.workflows.DQNWorkflow",
           "agent": {"q_hidden_layer_sizes": [16], "epsilon_decay_steps": 200},
           "training": {"num_envs": 4, "rollout_length": 8, "buffer_size": 64, "batch_size": 16, "num_updates": 2,
                        "learning_starts": 32, "target_update_period": 3}}
    result = run_two_devices("evorl.workflows.DQNWorkflow", cfg, 6, "resume", str(tmp_path))
    assert (result["first_devices"], result["resumed_devices"], result["iterations"]) == (2, 1, 6), result
    assert result["leaves_equal"] == result["leaves"], result


@pytest.mark.slow
@pytest.mark.parametrize("workflow_cls", ["evorl.workflows.PPOWorkflow", "evorl.workflows.IMPALAWorkflow"])
def test_async_learner_on_two_devices_equals_one_device(workflow_cls):
    """The asynchronous learner's update data-parallel over a 2-device mesh (one actor in
    lockstep, so both runs learn from the same batches) equals its 1-device update."""
    cfg = {"env": CARTPOLE, "agent": {"actor_hidden_layer_sizes": [32, 32], "critic_hidden_layer_sizes": [32, 32],
                                      "normalize_obs": True},
           "training": {"num_envs": 8, "rollout_length": 32, "num_epochs": 2, "num_minibatches": 1},
           "runner": {"mode": "async", "num_actors": 1, "lockstep": True, "learner_devices": 2}}
    result = run_two_devices(workflow_cls, cfg, iterations=4)
    assert result["learner_devices"] == 2
    assert result["episodes"][0] == result["episodes"][1]
    assert result["max_param_diff"] <= 1e-5 * max(1.0, result["param_scale"]), result


@pytest.mark.slow
def test_two_devices_learn_cartpole_as_well_as_one():
    """With the usual shuffling (each device shuffles its own share): 3 seeds each reach a
    greedy return of 475 within 250k env steps, on 1 device and on 2."""
    cfg = {"env": CARTPOLE, "training": {"num_envs": 8, "num_minibatches": 8, "learning_rate": 5e-4,
                                          "num_iterations": 240}}
    result = run_two_devices("evorl.workflows.PPOWorkflow", cfg, 240, "learn")
    print(result)
    assert all(r is not None for r in result["1_devices"] + result["2_devices"]), result

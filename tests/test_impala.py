"""IMPALA: stale actors, importance-ratio metrics, config errors, the seed's distributed
snippet, and a learning test on CartPole-v1 with ``actor_lag > 0``."""

import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from evorl.config import ConfigError
from evorl.workflows import IMPALAWorkflow

CARTPOLE = {"env_name": "CartPole-v1", "env_type": "gymnax"}


def impala_config(agent=None, **training):
    return {
        "workflow_cls": "evorl.workflows.IMPALAWorkflow",
        "env": CARTPOLE,
        "agent": {"ent_coef": 0.01, **(agent or {})},
        "training": {"num_iterations": 1000, "rollout_length": 16, "num_envs": 32, "learning_rate": 1e-3,
                     "gae_lambda": 1.0, "num_epochs": 2, "num_minibatches": 4, "eval_interval": 100,
                     "actor_lag": 2, **training},
    }


def test_bad_vtrace_values_are_reported():
    with pytest.raises(ConfigError, match="vtrace_rho_bar must be > 0"):
        IMPALAWorkflow.build_from_config(impala_config({"vtrace_rho_bar": 0.0}))
    with pytest.raises(ConfigError, match="training.actor_lag must be >= 0"):
        IMPALAWorkflow.build_from_config(impala_config(actor_lag=-1))
    with pytest.raises(ConfigError, match="must divide training.num_envs per device"):
        IMPALAWorkflow.build_from_config(impala_config(num_minibatches=3))


@pytest.mark.slow  # ~35 s on 2 cores at load 8-10 (2026-12-03)
def test_rollout_acts_with_params_actor_lag_iterations_old():
    lag = 2
    workflow = IMPALAWorkflow.build_from_config(
        impala_config(actor_lag=lag, num_iterations=20, num_envs=8, num_minibatches=2), recorders=[]
    )
    state = workflow.init(jax.random.PRNGKey(0))
    history = [jax.device_get(state.agent_state.params)]  # params after i iterations
    for i in range(1, 5):
        state, _ = workflow.step(state)
        history.append(jax.device_get(state.agent_state.params))
        oldest = jax.tree.map(lambda x: x[0], jax.device_get(state.lagged_params))
        expected = history[max(i - lag, 0)]  # the next rollout acts with these
        jax.tree.map(np.testing.assert_array_equal, oldest, expected)

    _, metrics = workflow.run_iterations(state, 16)  # the stale behaviour policy is measured
    assert metrics["train/max_importance_ratio"] > 1.05
    assert metrics["train/mean_importance_ratio"] == pytest.approx(1.0, abs=0.1)


@pytest.mark.slow  # ~48 s on 2 cores at load 8-10 (2026-12-03)
def test_importance_ratios_are_one_on_policy():
    on_policy = impala_config(actor_lag=0, num_epochs=1, num_minibatches=1, num_iterations=3, num_envs=8)
    workflow = IMPALAWorkflow.build_from_config(on_policy, recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    assert state.lagged_params is None  # no lag, no snapshots
    _, metrics = workflow.run_iterations(state, 3)
    assert metrics["train/mean_importance_ratio"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["train/max_importance_ratio"] == pytest.approx(1.0, abs=1e-5)


SEED_SNIPPET = """
from evorl.algorithms.impala import IMPALAWorkflow
import jax

cfg = {
    "workflow_cls": "evorl.algorithms.impala.IMPALAWorkflow",
    "env": {"env_name": "Breakout", "env_type": "gymnax"},
    "agent": {
        "actor_hidden_layer_sizes": [256, 256],
        "vtrace_rho_bar": 1.0,
        "vtrace_c_bar": 1.0
    },
    "training": {
        "num_iterations": 2,
        "rollout_length": 20,
        "num_envs": 32
    }
}

workflow = IMPALAWorkflow.build_from_config(cfg, enable_multi_devices=True)
state = workflow.init(jax.random.PRNGKey(cfg["training"].get("seed", 42)))
final_state = workflow.learn(state)
assert int(final_state.iteration) == 2 and jax.local_device_count() == 2
print("OK", workflow.last_metrics["train/max_importance_ratio"])
"""


@pytest.mark.slow  # 12 s; test_multi_device.py keeps a 2-device run in the default set
def test_seed_distributed_snippet_runs_on_two_devices():
    """The seed's "Running Distributed IMPALA" code (num_iterations 10000 -> 2) on 2 CPU devices."""
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(SEED_SNIPPET)], env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OK" in result.stdout


@pytest.mark.slow
def test_impala_with_stale_actors_learns_cartpole():
    """512k env steps with actors 2 iterations (16 gradient steps) stale: eval return >= 475."""
    workflow = IMPALAWorkflow.build_from_config(impala_config(), recorders=[])
    assert workflow.config.training.actor_lag > 0
    state = workflow.learn(workflow.init(jax.random.PRNGKey(0)))
    assert int(state.iteration) * workflow.config.training.env_steps_per_iteration <= 1_000_000
    assert workflow.last_metrics["eval/episode_return"] >= 475, workflow.last_metrics
    assert workflow.last_metrics["train/max_importance_ratio"] > 1.0

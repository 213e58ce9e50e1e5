"""envpool stepped by several actor threads at once: gymnasium's float64-bounds warning, which
envpool's spaces raise on every call, stays silent (a per-call ``warnings.catch_warnings`` was
not thread-safe: two actors restored each other's filters and it leaked in 3 of 4 runs)."""

import subprocess
import sys

import pytest

RUN = """
from evorl.app.experiment import run_experiment
run_experiment({"workflow_cls": "evorl.workflows.PPOWorkflow",
                "env": {"env_type": "envpool", "env_name": "CartPole-v1"},
                "agent": {"core": "gru", "core_size": 8, "actor_hidden_layer_sizes": [8], "critic_hidden_layer_sizes": [8]},
                "training": {"num_envs": 8, "rollout_length": 16, "num_iterations": 2, "eval_interval": 2,
                             "eval_episodes": 2},
                "runner": {"mode": "async", "num_actors": 2}, "logging": {"recorders": []}})
"""


@pytest.mark.slow  # the command's run as a process, twice
@pytest.mark.parametrize("run", [0, 1])
def test_two_actor_threads_on_envpool_raise_no_float64_bounds_warning(run):
    pytest.importorskip("envpool", reason="envpool is an optional extra")
    out = subprocess.run([sys.executable, "-c", RUN], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "precision lowered" not in out.stderr, out.stderr[-3000:]

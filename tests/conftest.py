"""Shared fixtures: a tiny PPO CartPole config that compiles and runs in seconds."""

import copy

import pytest

TINY = {
    "workflow_cls": "evorl.workflows.PPOWorkflow",
    "seed": 3,
    "env": {"env_name": "CartPole-v1", "env_type": "gymnax"},
    "agent": {"actor_hidden_layer_sizes": [8], "critic_hidden_layer_sizes": [8], "normalize_obs": True},
    "training": {"num_iterations": 6, "eval_interval": 1, "rollout_length": 16, "num_envs": 4,
                 "num_minibatches": 2, "num_epochs": 1, "eval_episodes": 2},
    "checkpoint": {"save_interval": 2, "max_to_keep": None},
    "logging": {"recorders": [], "plot": False},
}


@pytest.fixture
def tiny_cfg():
    """A fresh copy of the tiny config (tests may edit it)."""
    return copy.deepcopy(TINY)


@pytest.fixture(scope="session", autouse=True)
def compilation_cache(tmp_path_factory):
    """Many tests build the same tiny workflow: compile each program once per session."""
    import jax

    jax.config.update("jax_compilation_cache_dir", str(tmp_path_factory.mktemp("jax_cache")))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    yield
    jax.config.update("jax_compilation_cache_dir", None)

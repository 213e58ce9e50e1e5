"""A2C: config errors and a learning test on CartPole-v1."""

from pathlib import Path

import jax
import pytest

from evorl.config import ConfigError
from evorl.workflows import A2CWorkflow

CARTPOLE = {"env_name": "CartPole-v1", "env_type": "gymnax"}


def a2c_config(**training):
    return {
        "workflow_cls": "evorl.workflows.A2CWorkflow",
        "env": CARTPOLE,
        "agent": {"ent_coef": 0.0},
        "training": {"num_iterations": 3000, "rollout_length": 8, "num_envs": 16, "learning_rate": 1e-3,
                     "gae_lambda": 1.0, "num_epochs": 1, "num_minibatches": 1, "eval_interval": 500,
                     **training},
    }


def test_a2c_rejects_several_gradient_steps_per_rollout():
    with pytest.raises(ConfigError, match="num_epochs=1 and training.num_minibatches=1"):
        A2CWorkflow.build_from_config(a2c_config(num_epochs=4))


def test_a2c_defaults_to_one_gradient_step_so_the_seed_yaml_switches_by_workflow_cls():
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(Path(__file__).resolve().parents[1] / "configs" / "ppo_cartpole.yaml")
    cfg.workflow_cls = "evorl.workflows.A2CWorkflow"
    del cfg["defaults"]
    cfg.agent.pop("clip_epsilon")  # PPO's own key
    training = A2CWorkflow.parse_config(cfg).training
    assert (training.num_epochs, training.num_minibatches) == (1, 1)


def test_a2c_rejects_ppo_keys():
    cfg = a2c_config()
    cfg["agent"] = {"clip_epsilon": 0.2}
    with pytest.raises(ConfigError, match="agent.clip_epsilon"):
        A2CWorkflow.build_from_config(cfg)


@pytest.mark.slow
def test_a2c_learns_cartpole():
    """384k env steps (~10 s of training): mean greedy evaluation return >= 400."""
    workflow = A2CWorkflow.build_from_config(a2c_config(), recorders=[])
    state = workflow.learn(workflow.init(jax.random.PRNGKey(0)))
    assert int(state.iteration) * workflow.config.training.env_steps_per_iteration <= 1_000_000
    assert workflow.last_metrics["eval/episode_return"] >= 400, workflow.last_metrics

"""A policy trained from Python (no run folder): ``Policy.from_workflow(workflow, state)``,
``policy.save(path)``, ``evorl.load_policy(path)`` acts as the saved one did."""

import copy

import jax
import numpy as np
import pytest
from conftest import TINY

import evorl
from evorl.app.policy import POLICY_STATE, POLICY_YAML, Policy
from evorl.config import ConfigError
from evorl.workflows import resolve_workflow_cls


def build(**changes):
    cfg = copy.deepcopy(TINY)
    cfg["training"]["num_iterations"] = 2
    cfg.pop("checkpoint")
    for section, values in changes.items():
        cfg[section] = {**cfg.get(section, {}), **values} if isinstance(values, dict) else values
    return resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg)


def observations(workflow, n=5):
    return np.asarray(workflow.env.reset(jax.random.PRNGKey(5)).obs)[:n]  # [n, *obs_shape]


@pytest.fixture(scope="module")
def trained():
    workflow = build()
    return workflow, workflow.learn(workflow.init(jax.random.PRNGKey(0)))


def test_a_policy_trained_from_python_saves_and_loads_acting_the_same(trained, tmp_path):
    workflow, state = trained
    policy = Policy.from_workflow(workflow, state)
    assert policy.iteration == 2
    folder = policy.save(tmp_path / "policy")
    assert sorted(p.name for p in folder.iterdir()) == sorted([POLICY_YAML, POLICY_STATE])
    loaded = evorl.load_policy(folder)
    obs = observations(workflow)
    assert loaded(obs[0]) == policy(obs[0])  # one observation
    np.testing.assert_array_equal(loaded(obs), policy(obs))  # a batch, greedy
    np.testing.assert_array_equal(loaded(obs, deterministic=False, seed=7), policy(obs, deterministic=False, seed=7))
    for saved, read in zip(jax.tree.leaves(policy.agent_state), jax.tree.leaves(loaded.agent_state)):
        np.testing.assert_array_equal(np.asarray(saved), np.asarray(read))  # normalize_obs' statistics too
    assert (loaded.obs_space.shape, loaded.iteration) == (policy.obs_space.shape, 2)
    loaded.save(tmp_path / "again")  # a loaded policy saves again
    np.testing.assert_array_equal(evorl.load_policy(tmp_path / "again")(obs), policy(obs))


def test_an_off_policy_agents_hyperparameters_come_back_for_sampled_actions(tmp_path):
    """DQN's sampled (epsilon-greedy) actions read its hyperparameters from the agent state."""
    from evorl.workflows import DQNWorkflow

    workflow = DQNWorkflow.build_from_config({
        "workflow_cls": "evorl.workflows.DQNWorkflow", "env": TINY["env"], "agent": {"q_hidden_layer_sizes": [8]},
        "training": {"num_iterations": 2, "eval_interval": 1, "num_envs": 4, "rollout_length": 4, "buffer_size": 64,
                     "learning_starts": 16, "batch_size": 8, "eval_episodes": 1}})
    policy = Policy.from_workflow(workflow, workflow.init(jax.random.PRNGKey(1)))
    loaded = evorl.load_policy(policy.save(tmp_path / "dqn"))
    obs = observations(workflow, 4)
    assert type(loaded.agent_state.hparams) is type(policy.agent_state.hparams)
    np.testing.assert_array_equal(loaded(obs), policy(obs))
    np.testing.assert_array_equal(loaded(obs, deterministic=False, seed=3), policy(obs, deterministic=False, seed=3))


def test_a_population_names_its_agent_and_saves_that_one(tmp_path):
    workflow = build(training={"num_iterations": 2, "eval_interval": 1, "rollout_length": 16, "num_envs": 4,
                               "num_minibatches": 2, "num_epochs": 1, "eval_episodes": 2, "num_seeds": 2})
    state = workflow.init(jax.random.PRNGKey(0))
    with pytest.raises(ConfigError, match=r"the workflow trained 2 agents: pass agent=0..1 to Policy.from_workflow \(agent 0 \(seed 0\); agent 1"):
        Policy.from_workflow(workflow, state)
    policy = Policy.from_workflow(workflow, state, agent=1)
    loaded = evorl.load_policy(policy.save(tmp_path / "agent1"))
    obs = observations(workflow)
    np.testing.assert_array_equal(loaded(obs), policy(obs))
    with pytest.raises(ConfigError, match="is a saved policy .*leave out step and agent"):
        evorl.load_policy(tmp_path / "agent1", agent=1)


def test_a_policy_assembled_by_hand_says_why_it_cannot_be_saved(trained, tmp_path):
    workflow, state = trained
    policy = Policy(workflow.agent, state.agent_state, workflow.env.obs_space, workflow.env.action_space)
    with pytest.raises(ValueError, match="no config to rebuild its agent from .*Policy.from_workflow"):
        policy.save(tmp_path / "p")

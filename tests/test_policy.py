"""``evorl.load_policy``: a trained run's policy as a callable on raw observations."""

import copy

import jax
import numpy as np
import pytest
from conftest import TINY

import evorl
from evorl.config import ConfigError
from evorl.experiment import run_experiment


def train(tmp_path, name, **changes):
    """A tiny run in ``tmp_path/name``; returns its folder and ``run_experiment``'s result (the
    trained state in memory: the reference the checkpoint-loaded policy is checked against)."""
    cfg = copy.deepcopy(TINY)
    cfg["training"]["num_iterations"] = 2
    for section, values in changes.items():
        cfg[section] = {**cfg.get(section, {}), **values}
    result = run_experiment(cfg, output_dir=tmp_path / name)
    return tmp_path / name, result


def greedy(result, agent_state, obs):
    agent = result.workflow.agent
    return np.asarray(agent.to_env_action(agent.evaluate_actions(agent_state, obs)))


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory):
    return train(tmp_path_factory.mktemp("policy"), "cartpole")


def observations(result, n):
    return np.asarray(result.workflow.env.reset(jax.random.PRNGKey(5)).obs)[:n]  # [n, *obs_shape], the env's own


def test_greedy_actions_are_the_agents_on_one_obs_and_on_a_batch(cartpole):
    run_dir, result = cartpole
    policy = evorl.load_policy(run_dir)
    obs = observations(result, 4) * 3.0  # away from 0, where the observation statistics matter
    expected = greedy(result, result.state.agent_state, obs)
    np.testing.assert_array_equal(policy(obs), expected)
    assert policy(obs[1]).shape == () and policy(obs[1]) == expected[1]
    assert policy.iteration == 2
    assert policy.obs_space.shape == (4,) and policy.action_space.n == 2
    assert policy(obs).dtype.kind == "i"


def test_sampled_actions_follow_the_key_and_are_valid(cartpole):
    run_dir, result = cartpole
    policy = evorl.load_policy(run_dir)
    obs = np.repeat(observations(result, 1), 256, axis=0)  # one state, many draws
    a, b = policy(obs, deterministic=False, seed=1), policy(obs, deterministic=False, seed=2)
    np.testing.assert_array_equal(a, policy(obs, deterministic=False, key=jax.random.PRNGKey(1)))
    assert not np.array_equal(a, b)  # an untrained policy is near uniform: 256 draws differ
    assert set(np.unique(np.concatenate([a, b]))) <= {0, 1}
    assert not np.array_equal(policy(obs, deterministic=False), policy(obs, deterministic=False))  # own key advances
    with pytest.raises(ValueError, match=r"observation of shape \(3,\); this policy takes one observation \[4\]"):
        policy(np.zeros(3))


def test_continuous_actions_lie_in_the_bounds(tmp_path):
    run_dir, result = train(tmp_path, "pendulum", env={"env_name": "Pendulum-v1"}, agent={"init_log_std": 1.0})
    policy = evorl.load_policy(run_dir)
    obs = np.repeat(observations(result, 1), 512, axis=0)
    low, high = policy.action_space.low, policy.action_space.high
    for actions in (policy(obs), policy(obs, deterministic=False, seed=0)):
        assert actions.shape == (512, 1) and actions.dtype == np.float32
        assert np.all(actions >= low) and np.all(actions <= high)
    sampled = policy(obs, deterministic=False, seed=0)
    assert np.any(sampled == high) or np.ptp(sampled) > 1.0  # exp(1) std: samples spread to the bounds


def test_a_population_needs_the_agent_index(tmp_path):
    run_dir, result = train(tmp_path, "pop", training={"num_seeds": 2})
    with pytest.raises(ConfigError, match=r"trained 2 agents: pass agent=0..1"):
        evorl.load_policy(run_dir)
    obs = observations(result, 4) * 3.0
    for i in range(2):
        agent_state = jax.tree.map(lambda x: x[i], result.state.agent_state)
        np.testing.assert_array_equal(evorl.load_policy(run_dir, agent=i)(obs), greedy(result, agent_state, obs))

"""``evorl.load_policy``: a trained run's policy as a callable on raw observations."""

import copy
import json
import re

import jax
import numpy as np
import pytest
from conftest import TINY

import evorl
from evorl.config import ConfigError
from evorl.app.experiment import run_experiment


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


@pytest.mark.slow  # trains a CartPole agent first (tests/test_policy_save.py is the light one)
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


@pytest.mark.slow  # trains a CartPole agent first (tests/test_policy_save.py is the light one)
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


@pytest.mark.slow  # ~45 s on 2 cores at load 8-10 (2026-12-03)
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


@pytest.mark.slow  # ~46 s on 2 cores at load 8-10 (2026-12-03)
def test_a_population_needs_the_agent_index(tmp_path):
    run_dir, result = train(tmp_path, "pop", training={"num_seeds": 2})
    with pytest.raises(ConfigError, match=r"trained 2 agents: pass agent=0..1"):
        evorl.load_policy(run_dir)
    obs = observations(result, 4) * 3.0
    for i in range(2):
        agent_state = jax.tree.map(lambda x: x[i], result.state.agent_state)
        np.testing.assert_array_equal(evorl.load_policy(run_dir, agent=i)(obs), greedy(result, agent_state, obs))


@pytest.mark.slow  # ~30 s on 2 busy cores: compiles a PBT chunk (the listing's logic: tests/test_pbt_lineage.py)
def test_a_pbt_population_is_listed_by_its_evolved_hyperparameters_best_first(tmp_path):
    """Not by the learning rates the agents started from: by the ones the last PBT step left
    (which the checkpoint trains with), each with its fitness, the best first."""
    pbt = {"enabled": True, "interval": 2, "exploit_fraction": 0.25, "eval_episodes": 2,
           "hyperparameters": {"training.learning_rate": [1e-6, 1e-2], "agent.ent_coef": [0.0, 0.05]}}
    run_dir, result = train(tmp_path, "pbt", training={"num_iterations": 4, "num_seeds": 2, "learning_rate": [1e-6, 3e-3]},
                            pbt=pbt)
    with pytest.raises(ConfigError, match="trained 4 agents: pass agent=0..3") as error:
        evorl.load_policy(run_dir)
    message = str(error.value)
    assert "as its step at iteration 4 left them, best first: agent " in message and "seed" not in message, message
    listed = re.findall(r"agent (\d) \(fitness ([-\d.e+]+)[^,]*, learning_rate=([\d.e+-]+), ent_coef=", message)
    assert sorted(int(a) for a, _, _ in listed) == [0, 1, 2, 3], message
    fitness = [float(f) for _, f, _ in listed]
    assert fitness == sorted(fitness, reverse=True)
    final_lr = np.asarray(result.state.learning_rate)
    assert sorted(final_lr.tolist()) != sorted(np.float32([1e-6, 1e-6, 3e-3, 3e-3]).tolist())  # PBT changed them
    for agent, _, lr in listed:
        assert float(lr) == pytest.approx(final_lr[int(agent)], rel=1e-3)
    best = int(listed[0][0])
    assert evorl.load_policy(run_dir, agent=best).iteration == 4
    # the lineage file holds each float32 as its shortest decimal: 1e-06, not 9.999999974752427e-07
    for record in map(json.loads, (run_dir / "pbt_lineage.jsonl").read_text().splitlines()):
        for values in [*record["hyperparameters"].values(), *record["new_hyperparameters"].values()]:
            assert all(v == float(str(np.float32(v))) for v in values), values

"""REINFORCE with a baseline: the returns, the mask and the loss against NumPy by hand; a
learning test on CartPole-v1."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evorl.rl.agent import AgentState, hparams_as_arrays
from evorl.algorithms.reinforce import REINFORCEAgent, REINFORCEHParams
from evorl.config import ConfigError
from evorl.envs.spaces import Box, Discrete
from evorl.networks import Network
from evorl.rl.rollout import Trajectory
from evorl.workflows import REINFORCEWorkflow

linear = Network(init=lambda key: None, apply=lambda w, obs: obs @ w)
W_POLICY = np.array([[0.5, -0.5], [0.0, 0.3]])
W_VALUE = np.array([2.0, -1.0])
OBS = np.array([[[1.0, 0.0], [0.0, 1.0]], [[0.5, 0.5], [1.0, 1.0]],
                [[0.0, 2.0], [-1.0, 0.0]], [[1.0, -1.0], [0.3, 0.2]]])  # [T=4, B=2, 2]
ACTIONS = np.array([[0, 1], [1, 1], [0, 0], [1, 0]])  # [T, B]
# env 0: rewards 1, 2, 3, 4, terminated at t=1; env 1: rewards 1 each, truncated at t=2.
REWARDS = np.array([[1.0, 1.0], [2.0, 1.0], [3.0, 1.0], [4.0, 1.0]])
TERMINATED = np.array([[0, 0], [1, 0], [0, 0], [0, 0]], bool)
TRUNCATED = np.array([[0, 0], [0, 0], [0, 1], [0, 0]], bool)
# gamma = 0.9: env 0's returns (1 + 0.9*2, 2 | 3 + 0.9*4, 4 cut by the rollout's end), env 1's
# (1 + 0.9 + 0.81, 1.9, 1 | 1 cut); complete: the steps up to each env's last episode end.
RETURNS = np.array([[2.8, 2.71], [2.0, 1.9], [6.6, 1.0], [4.0, 1.0]])
COMPLETE = np.array([[1, 1], [1, 1], [0, 1], [0, 0]], float)


def make_case(vf_coef=0.5, ent_coef=0.01):
    agent = REINFORCEAgent(action_space=Discrete(2), obs_space=Box(np.zeros(2), np.ones(2)),
                           policy_network=linear, value_network=linear)
    hparams = REINFORCEHParams(gamma=0.9, vf_coef=vf_coef, ent_coef=ent_coef)
    state = AgentState(params={"policy": jnp.asarray(W_POLICY), "value": jnp.asarray(W_VALUE)},
                       obs_stats=None, hparams=hparams_as_arrays(hparams))
    batch = Trajectory(obs=jnp.asarray(OBS), actions=jnp.asarray(ACTIONS), rewards=jnp.asarray(REWARDS),
                       terminated=jnp.asarray(TERMINATED), truncated=jnp.asarray(TRUNCATED),
                       next_obs=jnp.asarray(OBS), extras={})
    return agent, state, agent.compute_targets(state, batch)


def test_returns_are_monte_carlo_and_only_complete_steps_count():
    _, _, batch = make_case()
    np.testing.assert_allclose(batch.extras["returns"], RETURNS, rtol=1e-6)
    np.testing.assert_array_equal(batch.extras["complete"], COMPLETE)


def test_loss_by_hand():
    agent, state, batch = make_case()
    logits = OBS @ W_POLICY  # [T, B, 2]
    log_pi = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    log_prob = np.take_along_axis(log_pi, ACTIONS[..., None], -1)[..., 0]  # [T, B]
    entropy = -(np.exp(log_pi) * log_pi).sum(-1)
    values = OBS @ W_VALUE  # [T, B]
    n = COMPLETE.sum()  # 5 complete steps
    policy_loss = -(COMPLETE * log_prob * (RETURNS - values)).sum() / n
    value_loss = 0.5 * (COMPLETE * (RETURNS - values) ** 2).sum() / n
    mean_entropy = (COMPLETE * entropy).sum() / n
    loss, metrics = agent.loss(state, batch, None)
    assert float(metrics["policy_loss"]) == pytest.approx(policy_loss, rel=1e-5)
    assert float(metrics["value_loss"]) == pytest.approx(value_loss, rel=1e-5)
    assert float(metrics["entropy"]) == pytest.approx(mean_entropy, rel=1e-5)
    assert float(loss) == pytest.approx(policy_loss + 0.5 * value_loss - 0.01 * mean_entropy, rel=1e-5)


def test_the_baseline_learns_only_from_its_own_loss():
    """G - V is held constant in the policy term: with c_v = 0 the value gets no gradient."""
    agent, state, batch = make_case(vf_coef=0.0)
    grads = jax.grad(lambda p: agent.loss(state.replace(params=p), batch, None)[0])(state.params)
    np.testing.assert_array_equal(grads["value"], 0.0)
    assert np.abs(grads["policy"]).sum() > 0


def reinforce_config(**training):
    return {
        "workflow_cls": "evorl.workflows.REINFORCEWorkflow",
        "env": {"env_name": "CartPole-v1", "env_type": "gymnax"},
        "agent": {"ent_coef": 0.0},
        "training": {"num_iterations": 150, "rollout_length": 500, "num_envs": 8, "learning_rate": 1e-3,
                     "eval_interval": 50, **training},
    }


def test_reinforce_rejects_several_gradient_steps_per_rollout():
    with pytest.raises(ConfigError, match="num_epochs=1 and training.num_minibatches=1"):
        REINFORCEWorkflow.build_from_config(reinforce_config(num_minibatches=4))


@pytest.mark.slow  # ~13 s of training on 2 cores (2026-12-03)
def test_reinforce_learns_cartpole():
    """600k env steps: mean greedy evaluation return >= 400 (seeds 0, 1, 2 reached 483.7, 462.0, 434.1)."""
    workflow = REINFORCEWorkflow.build_from_config(reinforce_config(), recorders=[])
    workflow.learn(workflow.init(jax.random.PRNGKey(0)))
    assert workflow.last_metrics["eval/episode_return"] >= 400, workflow.last_metrics

"""PPO's loss on a two-sample batch against values worked out by hand."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from evorl.rl.agent import AgentState, hparams_as_arrays
from evorl.algorithms.ppo import PPOAgent, PPOHParams
from evorl.envs.spaces import Box, Discrete
from evorl.networks import Network
from evorl.rl.rollout import Trajectory

# Linear "networks" so every number below can be followed by hand.
linear_policy = Network(init=lambda key: None, apply=lambda w, obs: obs @ w)
linear_value = Network(init=lambda key: None, apply=lambda w, obs: obs @ w)


def make_case(value_clip_epsilon=None, normalize_gae=False):
    agent = PPOAgent(
        action_space=Discrete(2), obs_space=Box(np.zeros(2), np.ones(2)),
        policy_network=linear_policy, value_network=linear_value, normalize_gae=normalize_gae,
    )
    hparams = PPOHParams(gamma=0.99, gae_lambda=0.95, clip_epsilon=0.2, value_clip_epsilon=value_clip_epsilon,
                         vf_coef=0.5, ent_coef=0.01, kl_coef=0.1, target_kl=None)
    state = AgentState(
        params={"policy": jnp.array([[0.5, -0.5], [0.0, 0.3]]), "value": jnp.array([2.0, -1.0])},
        obs_stats=None, hparams=hparams_as_arrays(hparams),
    )
    batch = Trajectory(
        obs=jnp.eye(2), actions=jnp.array([0, 1]), rewards=jnp.zeros(2), terminated=jnp.zeros(2, bool),
        truncated=jnp.zeros(2, bool), next_obs=jnp.eye(2),
        extras={"logp": jnp.log(jnp.array([0.6, 0.5])), "advantages": jnp.array([1.0, -2.0]),
                "returns": jnp.array([2.5, -0.5]), "values": jnp.array([2.1, -0.8])},
    )
    return agent, state, batch


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def entropy2(p):
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


# Sample 0: logits (0.5, -0.5), action 0: pi = sigmoid(1.0); mu = 0.6; A = +1.
# Sample 1: logits (0.0, 0.3), action 1: pi = sigmoid(0.3); mu = 0.5; A = -2.
PI = (sigmoid(1.0), sigmoid(0.3))
RATIO = (PI[0] / 0.6, PI[1] / 0.5)  # 1.2184 (clipped to 1.2 since A > 0), 1.1489 (inside the clip range)
POLICY_LOSS = -(min(RATIO[0] * 1.0, 1.2 * 1.0) + min(RATIO[1] * -2.0, RATIO[1] * -2.0)) / 2
ENTROPY = (entropy2(PI[0]) + entropy2(PI[1])) / 2
APPROX_KL = sum((r - 1) - math.log(r) for r in RATIO) / 2


def test_ppo_loss_by_hand():
    agent, state, batch = make_case()
    value_loss = 0.5 * ((2.0 - 2.5) ** 2 + (-1.0 + 0.5) ** 2) / 2  # values are (2, -1)
    expected = POLICY_LOSS + 0.5 * value_loss - 0.01 * ENTROPY + 0.1 * APPROX_KL
    loss, metrics = agent.loss(state, batch, None)
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    assert float(metrics["policy_loss"]) == pytest.approx(POLICY_LOSS, rel=1e-5)
    assert float(metrics["value_loss"]) == pytest.approx(value_loss, rel=1e-5)
    assert float(metrics["entropy"]) == pytest.approx(ENTROPY, rel=1e-5)
    assert float(metrics["approx_kl"]) == pytest.approx(APPROX_KL, rel=1e-4)
    assert float(metrics["clip_fraction"]) == pytest.approx(0.5)  # only sample 0 is outside 1 +- 0.2


def test_ppo_clipped_value_loss_by_hand():
    agent, state, batch = make_case(value_clip_epsilon=0.05)
    # Old values (2.1, -0.8): clipped predictions (2.05, -0.85); errors vs returns (2.5, -0.5).
    err0 = max((2.0 - 2.5) ** 2, (2.05 - 2.5) ** 2)
    err1 = max((-1.0 + 0.5) ** 2, (-0.85 + 0.5) ** 2)
    _, metrics = agent.loss(state, batch, None)
    assert float(metrics["value_loss"]) == pytest.approx(0.5 * (err0 + err1) / 2, rel=1e-5)


def test_ppo_normalized_advantages_by_hand():
    agent, state, batch = make_case(normalize_gae=True)
    # A = (1, -2): mean -0.5, population std 1.5 -> (1.5 / 1.5, -1.5 / 1.5) = (1, -1).
    a = (1.5 / (1.5 + 1e-8), -1.5 / (1.5 + 1e-8))
    clip = lambda r: min(max(r, 0.8), 1.2)  # noqa: E731
    expected = -(min(RATIO[0] * a[0], clip(RATIO[0]) * a[0]) + min(RATIO[1] * a[1], clip(RATIO[1]) * a[1])) / 2
    _, metrics = agent.loss(state, batch, None)
    assert float(metrics["policy_loss"]) == pytest.approx(expected, rel=1e-5)

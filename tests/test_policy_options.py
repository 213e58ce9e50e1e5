"""Tanh-squashed Gaussian against independent references, state-dependent std, the CNN
torso, and the validation of the policy keywords."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evorl.algorithms.ppo import PPOWorkflow, make_mlp_ppo_agent
from evorl.config import ConfigError
from evorl.networks.distributions import DiagGaussian, TanhGaussian, log1m_tanh_sq, make_distribution
from evorl.envs.spaces import Box, Discrete
from evorl.networks import CNN_CHANNELS, ConvTorso, make_policy_network, make_v_network

BOX = Box(-np.ones(2, np.float32), np.ones(2, np.float32))


def test_log1m_tanh_sq_is_stable_and_exact():
    u = jnp.array([-30.0, -3.0, 0.0, 0.5, 3.0, 30.0])
    with np.errstate(divide="ignore"):
        expected = np.log1p(-np.tanh(np.float64(u)) ** 2)  # exact in float64 where it is finite
    finite = np.isfinite(expected)
    np.testing.assert_allclose(log1m_tanh_sq(u)[finite], expected[finite], rtol=1e-5)
    assert np.all(np.isfinite(log1m_tanh_sq(u)))
    np.testing.assert_allclose(log1m_tanh_sq(jnp.array(30.0)), math.log(4) - 60.0, rtol=1e-6)


def test_tanh_log_prob_is_the_change_of_variables_density():
    """log p(a) = log N(u) - log |d tanh / du|, with the Jacobian by finite differences."""
    dist = make_distribution(BOX, "tanh_gaussian")
    assert isinstance(dist, TanhGaussian)
    params = jnp.array([0.3, -0.5, np.log(0.7), np.log(1.3)])
    u = jnp.array([0.9, -1.7])
    h = 1e-3
    jac = (np.tanh(np.float64(u) + h) - np.tanh(np.float64(u) - h)) / (2 * h)
    gauss = DiagGaussian(BOX.low, BOX.high, BOX.shape).log_prob(params, u)
    np.testing.assert_allclose(dist.log_prob(params, u), gauss - np.log(jac).sum(), rtol=1e-5)


def test_tanh_density_integrates_to_one():
    """1-D: integrating exp(log_prob) over a = tanh(u) in (-1, 1) gives 1."""
    box1 = Box(-np.ones(1, np.float32), np.ones(1, np.float32))
    dist = make_distribution(box1, "tanh_gaussian")
    params = jnp.array([0.8, np.log(1.5)])
    a = np.linspace(-1 + 1e-6, 1 - 1e-6, 400_001)
    u = jnp.asarray(np.arctanh(a), jnp.float32)[:, None]
    density = np.exp(np.asarray(dist.log_prob(params, u), np.float64))
    np.testing.assert_allclose(np.trapezoid(density, a), 1.0, atol=2e-3)


def test_tanh_entropy_estimate_is_unbiased():
    """Mean of the one-sample estimates = H(u) + E[log(1 - tanh(u)^2)] by Monte Carlo."""
    dist = make_distribution(BOX, "tanh_gaussian")
    params = jnp.array([0.2, -1.0, np.log(0.5), np.log(2.0)])
    keys = jax.random.split(jax.random.PRNGKey(0), 20_000)
    estimates = jax.vmap(lambda k: dist.entropy(params, k))(keys)
    rng = np.random.default_rng(0)
    u = np.array([0.2, -1.0]) + np.array([0.5, 2.0]) * rng.standard_normal((200_000, 2))
    gaussian = np.sum(np.log([0.5, 2.0]) + 0.5 * (1 + np.log(2 * np.pi)))
    reference = gaussian + np.mean(np.sum(np.log1p(-np.tanh(u) ** 2), axis=1))
    np.testing.assert_allclose(estimates.mean(), reference, atol=0.03)
    np.testing.assert_allclose(dist.entropy(params), gaussian, rtol=1e-6)  # no key: H(u)


def test_env_actions_of_both_gaussians_lie_in_the_bounds():
    box = Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))
    u = jnp.array([[-10.0, 10.0], [0.0, 0.0]])
    np.testing.assert_allclose(make_distribution(box, "tanh_gaussian").to_env_action(u), [[-2, 1], [0, 0.5]], atol=1e-6)
    np.testing.assert_allclose(make_distribution(box, "clipped_gaussian").to_env_action(u), [[-2, 1], [0, 0.5]])


def test_state_dependent_std_network():
    obs_space = Box(-np.ones(3, np.float32), np.ones(3, np.float32))
    net = make_policy_network(BOX, obs_space, (8,), state_dependent_std=True, init_log_std=-0.5)
    params = net.init(jax.random.PRNGKey(0))
    assert "log_std" not in params["params"]
    obs = jax.random.normal(jax.random.PRNGKey(1), (5, 3))
    out = net.apply(params, obs)  # [5, 4]
    log_std = out[:, 2:]
    assert out.shape == (5, 4)
    assert np.ptp(np.asarray(log_std), axis=0).max() > 0, "log_std should vary with the state"
    np.testing.assert_allclose(log_std, -0.5, atol=0.1)  # small head init: starts near init_log_std
    big = net.apply(jax.tree.map(lambda p: p * 1e3, params), obs)[:, 2:]
    assert np.all((big >= -5.0) & (big <= 2.0))


def test_cnn_torso_shapes_and_parameters():
    obs_space = Box(np.zeros((10, 10, 4), np.float32), np.ones((10, 10, 4), np.float32))
    policy = make_policy_network(Discrete(3), obs_space, (32,), activation="relu", network="cnn")
    value = make_v_network(obs_space, (32,), activation="relu", network="cnn")
    p_params, v_params = policy.init(jax.random.PRNGKey(0)), value.init(jax.random.PRNGKey(1))
    obs = jnp.ones((7, 2, 10, 10, 4))
    assert policy.apply(p_params, obs).shape == (7, 2, 3)
    assert value.apply(v_params, obs).shape == (7, 2)
    kernel = p_params["params"]["ConvTorso_0"]["Conv_0"]["kernel"]
    assert kernel.shape == (3 * 3 * 4, CNN_CHANNELS[0])  # a [3, 3, C, out] kernel, flattened
    dense = p_params["params"]["Dense_0"]["kernel"]
    assert dense.shape == (8 * 8 * CNN_CHANNELS[-1], 32)  # 3x3 VALID: 10 -> 8
    # Per-sample: batching does not mix samples.
    np.testing.assert_allclose(value.apply(v_params, obs[:1, :1])[0, 0], value.apply(v_params, obs[0, 0]), rtol=1e-5)


def test_policy_option_errors_are_config_errors():
    vec_obs = Box(-np.ones(3, np.float32), np.ones(3, np.float32))
    with pytest.raises(ConfigError, match="policy_distribution 'beta'.*clipped_gaussian, tanh_gaussian"):
        make_mlp_ppo_agent(BOX, vec_obs, policy_distribution="beta")
    with pytest.raises(ConfigError, match="apply to Box"):
        make_mlp_ppo_agent(Discrete(2), vec_obs, policy_distribution="tanh_gaussian")
    with pytest.raises(ConfigError, match="network 'resnet'.*mlp, cnn"):
        make_mlp_ppo_agent(Discrete(2), vec_obs, network="resnet")
    with pytest.raises(ConfigError, match=r"network='cnn' needs image observations \[H, W, C\]"):
        make_mlp_ppo_agent(Discrete(2), vec_obs, network="cnn")
    agent_cfg = PPOWorkflow.parse_config({"agent": {"policy_distribution": "tanh_gaussian",
                                                    "state_dependent_std": True, "network": "mlp"}}).agent
    assert agent_cfg.policy_distribution == "tanh_gaussian" and agent_cfg.state_dependent_std


def test_tanh_ppo_agent_log_prob_matches_its_distribution():
    obs_space = Box(-np.ones(3, np.float32), np.ones(3, np.float32))
    agent = make_mlp_ppo_agent(BOX, obs_space, policy_distribution="tanh_gaussian")
    state = agent.init(jax.random.PRNGKey(0))
    obs = jax.random.normal(jax.random.PRNGKey(1), (4, 3))
    actions, extras = agent.compute_actions(state, obs, jax.random.PRNGKey(2))
    params = agent.policy_output(state, obs)
    np.testing.assert_allclose(extras["logp"], TanhGaussian(BOX.low, BOX.high, BOX.shape).log_prob(params, actions))
    assert np.all(np.abs(agent.to_env_action(actions)) <= 1.0)


def test_conv_torso_equals_lax_convolution():
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 3, 10, 9, 5))  # [..., H, W, C]
    torso = ConvTorso((6,), activation="relu")
    params = torso.init(jax.random.PRNGKey(1), x)
    w = params["params"]["Conv_0"]["kernel"].reshape(3, 3, 5, 6)  # HWIO
    b = params["params"]["Conv_0"]["bias"]
    ref = jax.lax.conv_general_dilated(
        x.reshape(6, 10, 9, 5), w, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    ref = jax.nn.relu(ref + b).reshape(2, 3, -1)  # [2, 3, 8*7*6]
    np.testing.assert_allclose(torso.apply(params, x), ref, rtol=1e-5, atol=1e-5)


def strided_conv_reference(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int) -> np.ndarray:
    """VALID convolution ``[H, W, C] * [k, k, C, O] -> [H', W', O]``, one kernel offset at a time."""
    k = w.shape[0]
    h, wd = (x.shape[0] - k) // stride + 1, (x.shape[1] - k) // stride + 1
    out = np.zeros((h, wd, w.shape[-1]), np.float64)
    for di in range(k):
        for dj in range(k):
            out += x[di : di + stride * (h - 1) + 1 : stride, dj : dj + stride * (wd - 1) + 1 : stride] @ w[di, dj]
    return out + b


@pytest.mark.slow  # 84x84 frames through the Nature CNN (test_conv_torso_equals_lax_convolution is the light one)
def test_nature_cnn_torso_equals_strided_convolutions():
    from evorl.networks import NatureCNNTorso

    obs = np.random.default_rng(0).integers(0, 256, (2, 84, 84, 4), dtype=np.uint8)  # Atari frames
    torso = NatureCNNTorso()
    params = torso.init(jax.random.PRNGKey(0), jnp.zeros((1, 84, 84, 4)))["params"]
    features = np.asarray(torso.apply({"params": params}, obs))
    assert features.shape == (2, 7 * 7 * 64)
    x = obs[1].astype(np.float64) / 255.0
    for k, (channels, size, stride) in enumerate(NatureCNNTorso.layers):
        conv = params[f"Conv_{k}"]
        # the [size^2 C, F] matrix over (qi, qj, di, dj, c) as a [size, size, C, F] kernel
        q, c = size // stride, x.shape[-1]
        kernel = np.asarray(conv["kernel"], np.float64).reshape(q, q, stride, stride, c, channels)
        kernel = kernel.transpose(0, 2, 1, 3, 4, 5).reshape(size, size, c, channels)
        x = np.maximum(strided_conv_reference(x, kernel, np.asarray(conv["bias"]), stride), 0)
    np.testing.assert_allclose(features[1], x.reshape(-1), rtol=1e-4, atol=1e-4)


def test_uint8_observations_become_float32():
    obs_space = Box(np.zeros((84, 84, 4), np.float32), np.full((84, 84, 4), 255.0, np.float32))
    agent = make_mlp_ppo_agent(Discrete(6), obs_space, network="nature_cnn")
    assert agent.policy_output(agent.init(jax.random.PRNGKey(0)), jnp.zeros((3, 84, 84, 4), jnp.uint8)).shape == (3, 6)
    # "mlp" on uint8 pixels: the values 200 + 100 must not wrap around in uint8
    small = Box(np.zeros((2, 2, 1), np.float32), np.full((2, 2, 1), 255.0, np.float32))
    net = make_v_network(small, (4,))
    params = net.init(jax.random.PRNGKey(0))
    pixels = np.array([[[[200], [100]], [[255], [0]]]], np.uint8)
    np.testing.assert_allclose(net.apply(params, pixels), net.apply(params, pixels.astype(np.float32)), rtol=1e-6)
    with pytest.raises(ConfigError, match=r"network='nature_cnn' needs image observations"):
        make_mlp_ppo_agent(Discrete(2), Box(-np.ones(3, np.float32), np.ones(3, np.float32)), network="nature_cnn")


@pytest.mark.slow  # trains each agent's shared torso through its loss
@pytest.mark.parametrize("make_agent", ["ppo", "a2c", "impala"])
def test_shared_torso_is_one_torso_read_by_both_heads_and_trained_by_both_losses(make_agent):
    """``shared_torso``: params hold one torso and two MLP heads over its features; the
    heads' outputs are the torso's features through an MLP (checked against a hand-built
    forward pass); the value loss alone moves the torso, which a policy-only gradient also does."""
    from evorl.algorithms.a2c import make_mlp_a2c_agent
    from evorl.algorithms.impala import make_mlp_impala_agent
    from evorl.networks import NatureCNNTorso

    factory = {"ppo": make_mlp_ppo_agent, "a2c": make_mlp_a2c_agent, "impala": make_mlp_impala_agent}[make_agent]
    obs_space = Box(np.zeros((84, 84, 4), np.float32), np.full((84, 84, 4), 255.0, np.float32))
    agent = factory(Discrete(4), obs_space, network="nature_cnn", activation="relu", shared_torso=True,
                    actor_hidden_layer_sizes=(8,), critic_hidden_layer_sizes=(8,))
    state = agent.init(jax.random.PRNGKey(0))
    assert set(state.params) == {"torso", "policy", "value"}
    obs = jax.random.randint(jax.random.PRNGKey(1), (3, 84, 84, 4), 0, 256).astype(jnp.uint8)
    features = NatureCNNTorso().apply({"params": state.params["torso"]["params"]["NatureCNNTorso_0"]}, obs)
    assert features.shape == (3, 3136)

    def head(params, x):  # Dense -> relu -> Dense, by hand
        p = params["params"]
        h = jnp.maximum(x @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"], 0)
        return h @ p["Dense_1"]["kernel"] + p["Dense_1"]["bias"]

    logits, values = agent.heads(state, agent.features(state, obs))
    np.testing.assert_allclose(logits, head(state.params["policy"], features), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(values, head(state.params["value"], features)[:, 0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(agent.policy_output(state, obs), logits, rtol=1e-6)
    np.testing.assert_allclose(agent.values(state, obs), values, rtol=1e-6)

    def torso_grad(loss):
        grads = jax.grad(lambda p: loss(state.replace(params=p)))(state.params)
        return max(float(jnp.max(jnp.abs(g))) for g in jax.tree.leaves(grads["torso"]))

    assert torso_grad(lambda s: jnp.sum(agent.values(s, obs))) > 0
    assert torso_grad(lambda s: jnp.sum(agent.policy_output(s, obs)[:, 0])) > 0


def test_shared_torso_needs_an_image_network():
    with pytest.raises(ConfigError, match="agent.shared_torso shares an image torso"):
        make_mlp_ppo_agent(Discrete(2), Box(-np.ones(3, np.float32), np.ones(3, np.float32)), shared_torso=True)

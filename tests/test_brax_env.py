"""Brax adapter: every env's shapes (traced, not compiled), time limits, termination,
action repeat, reward scaling and config validation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("brax")

from evorl.config import ConfigError, EnvConfig, parse_section  # noqa: E402
from evorl.envs import create_env  # noqa: E402
from evorl.envs.brax_env import BRAX_BACKENDS, DEFAULT_BACKEND, brax_env_names, resolve_backend  # noqa: E402

ALL_ENVS = [
    "ant", "halfcheetah", "hopper", "humanoid", "humanoidstandup", "inverted_pendulum",
    "inverted_double_pendulum", "pusher", "reacher", "swimmer", "walker2d",
]


def test_every_brax_env_is_available():
    assert set(ALL_ENVS) <= set(brax_env_names())


def test_default_backends():
    assert resolve_backend("ant", None) == DEFAULT_BACKEND == "mjx"
    assert resolve_backend("swimmer", None) == "generalized"
    with pytest.raises(ValueError, match="swimmer does not support backend 'spring'; supported: generalized"):
        resolve_backend("swimmer", "spring")


# one env in the default set; the others (6-13 s each to build) in the slow set
@pytest.mark.parametrize("env_name", [e if e == "inverted_pendulum" else pytest.param(e, marks=pytest.mark.slow)
                                      for e in ALL_ENVS if e != "swimmer"])
def test_reset_and_step_shapes(env_name):
    """Traced only (no compilation); ``spring`` builds fastest (mjx: tens of seconds per env)."""
    _check_shapes(create_env({"env_type": "brax", "env_name": env_name, "backend": "spring"}, parallel=2))


@pytest.mark.slow  # 7 s to build swimmer
def test_swimmer_fails_at_creation_with_the_reason():
    """brax 0.14's fluid model (swimmer's only backend) calls jnp.clip(a_min=...), removed in
    jax 0.10: create_env says so. When brax fixes it, this test fails: then check swimmer's
    shapes like the other envs."""
    with pytest.raises(RuntimeError, match=r"cannot step 'swimmer' .*brax/fluid.py.*a_min"):
        create_env({"env_type": "brax", "env_name": "swimmer"}, parallel=2)


@pytest.mark.slow
def test_default_backend_shapes():
    env = create_env({"env_type": "brax", "env_name": "inverted_pendulum"}, parallel=2)
    assert env.backend == "mjx"
    _check_shapes(env)


def _check_shapes(env):
    state = jax.eval_shape(env.reset, jax.random.PRNGKey(0))
    (act_dim,) = env.action_space.shape
    assert np.all(env.action_space.low == -1) and np.all(env.action_space.high == 1)
    assert state.obs.shape == (2,) + env.obs_space.shape
    next_state = jax.eval_shape(env.step, state, jax.ShapeDtypeStruct((2, act_dim), jnp.float32))
    assert jax.tree.structure(next_state) == jax.tree.structure(state)
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(next_state)):
        assert (a.shape, a.dtype) == (b.shape, b.dtype)
    assert next_state.reward.shape == next_state.terminated.shape == next_state.truncated.shape == (2,)
    assert env.episode_length == 1000


def _run(env, actions):
    """Steps ``env`` with ``actions`` [T, B, d]; returns the stacked env states."""

    def step(state, action):
        state = env.step(state, action)
        return state, state

    return jax.jit(lambda key: jax.lax.scan(step, env.reset(key), actions)[1])(jax.random.PRNGKey(0))


@pytest.fixture(scope="module")
def pendulum_run():
    """Full push for 60 steps: the pole falls (terminated) before the time limit of 1000."""
    env = create_env({"env_type": "brax", "env_name": "inverted_pendulum", "backend": "spring"}, parallel=2)
    return _run(env, jnp.ones((60, 2, 1)))


@pytest.mark.slow  # steps a Brax env to its episode ends
def test_terminated_is_the_raw_envs_done(pendulum_run):
    terminated = np.asarray(pendulum_run.terminated)
    assert terminated.any(axis=0).all(), "the pole should fall under a constant full push"
    assert not np.asarray(pendulum_run.truncated).any()
    t, b = np.argwhere(terminated)[0]
    assert pendulum_run.episode_length[t, b] == t + 1
    # The reset observation replaces the final one; the final one is kept.
    assert not np.allclose(pendulum_run.obs[t, b], pendulum_run.final_obs[t, b])
    assert pendulum_run.episode_length[t + 1, b] == 1


@pytest.mark.slow  # steps a Brax env to its time limit
def test_time_limit_is_truncation_not_termination():
    env = create_env({"env_type": "brax", "env_name": "inverted_pendulum", "backend": "spring"},
                     episode_length=4, parallel=2)
    states = _run(env, jnp.zeros((9, 2, 1)))
    np.testing.assert_array_equal(states.truncated[:, 0], [0, 0, 0, 1, 0, 0, 0, 1, 0])
    assert not np.asarray(states.terminated).any()
    np.testing.assert_array_equal(states.episode_return[3], [4.0, 4.0])


@pytest.mark.slow  # ~26 s on 2 cores at load 8-10 (2026-12-03)
def test_reward_scale_and_action_repeat_keep_unscaled_returns():
    cfg = {"env_type": "brax", "env_name": "inverted_pendulum", "backend": "spring"}
    env = create_env({**cfg, "reward_scale": 0.1, "action_repeat": 3}, episode_length=100, parallel=1)
    states = _run(env, jnp.zeros((4, 1, 1)))
    np.testing.assert_allclose(states.reward[:, 0], 0.3)  # 3 repeats x reward 1, scaled by 0.1
    np.testing.assert_allclose(states.episode_return[:, 0], [3.0, 6.0, 9.0, 12.0])
    np.testing.assert_array_equal(states.episode_length[:, 0], [1, 2, 3, 4])


@pytest.mark.slow  # ~25 s on 2 cores at load 8-10 (2026-12-03)
def test_action_repeat_stops_at_termination(pendulum_run):
    """With repeat k, the episode ends on agent step ceil(t_end / k) with the reward up to t_end."""
    t_end = int(np.argmax(np.asarray(pendulum_run.terminated[:, 0]))) + 1
    env = create_env({"env_type": "brax", "env_name": "inverted_pendulum", "backend": "spring",
                      "action_repeat": 4}, parallel=2)
    states = _run(env, jnp.ones((20, 2, 1)))
    step = int(np.argmax(np.asarray(states.terminated[:, 0])))
    assert step + 1 == -(-t_end // 4)
    np.testing.assert_allclose(states.episode_return[step, 0], pendulum_run.episode_return[t_end - 1, 0])


def test_env_config_validation():
    ok = parse_section(EnvConfig, {"env_type": "brax", "env_name": "ant", "backend": "mjx"}, "env")
    assert ok.backend == "mjx"
    with pytest.raises(ConfigError, match="backend 'bullet'.*valid: " + ", ".join(BRAX_BACKENDS)):
        parse_section(EnvConfig, {"env_type": "brax", "env_name": "ant", "backend": "bullet"}, "env")
    with pytest.raises(ConfigError, match="env.backend is only valid with env_type 'brax'"):
        parse_section(EnvConfig, {"env_type": "gymnax", "env_name": "CartPole-v1", "backend": "mjx"}, "env")
    with pytest.raises(ConfigError, match="reward_scale must be > 0"):
        parse_section(EnvConfig, {"env_type": "brax", "env_name": "ant", "reward_scale": 0}, "env")
    with pytest.raises(ConfigError, match="Unknown config key 'env.backnd'.*Did you mean 'env.backend'"):
        parse_section(EnvConfig, {"env_type": "brax", "env_name": "ant", "backnd": "mjx"}, "env")
    with pytest.raises(ValueError, match="Unknown brax env_name 'halfcheeta'.*'halfcheetah'"):
        create_env({"env_type": "brax", "env_name": "halfcheeta"})
    with pytest.raises(ValueError, match="only valid with env_type 'brax'"):
        create_env({"env_type": "gymnax", "env_name": "CartPole-v1", "backend": "mjx"})


def test_gymnax_accepts_generic_env_keys():
    env = create_env(EnvConfig(env_name="CartPole-v1", env_type="gymnax", reward_scale=0.5), parallel=2)
    states = _run(env, jnp.zeros((3, 2), jnp.int32))
    np.testing.assert_allclose(states.reward, 0.5)
    np.testing.assert_allclose(states.episode_return[-1], 3.0)


def test_building_an_env_runs_nothing_op_by_op(monkeypatch):
    """brax's ``observation_size`` runs ``reset`` eagerly, one compile per operation (30 s for
    ant on a CPU, minutes on a TPU): the adapter reads the shapes from a trace instead."""
    from brax.envs.base import PipelineEnv

    def eager(self):
        raise AssertionError("observation_size runs reset op by op")

    monkeypatch.setattr(PipelineEnv, "observation_size", property(eager))
    env = create_env({"env_name": "ant", "env_type": "brax"}, parallel=2)
    assert env.obs_space.shape == (27,) and env.action_space.shape == (8,)

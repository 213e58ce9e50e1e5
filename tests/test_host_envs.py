"""Host environments (gymnasium, envpool): the JAX VectorEnv's semantics, Atari preprocessing,
spaces and errors, host_rollout's sampling and the host evaluator."""

import re
import sys
import types

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium import spaces

from evorl.algorithms.ppo import make_mlp_ppo_agent
from evorl.config import ConfigError, parse_section
from evorl.envs import Box, Discrete, EnvConfig, HostVectorEnv, create_env
from evorl.engine.evaluator import Evaluator, HostEvaluator, make_evaluator
from evorl.rl.host_rollout import host_rollout

THETA_LIMIT = 12 * 2 * np.pi / 360  # CartPole fails past 12 degrees


# --- tiny user envs, registered the way a user registers theirs ------------------------
class Corridor(gymnasium.Env):
    """Position on a line; actions {-1, 0, +1} (Discrete(3, start=-1)); reward = the move."""

    observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float64)
    action_space = spaces.Discrete(3, start=-1)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = float(self.np_random.uniform(-1, 1))
        return np.array([self.x, 0.0]), {}

    def step(self, action):
        assert action in (-1, 0, 1), action  # the agent's {0, 1, 2} shifted by start
        self.x += action
        return np.array([self.x, 1.0]), float(action), abs(self.x) > 4, False, {}


class DictObs(Corridor):
    observation_space = spaces.Dict({"x": spaces.Box(-1, 1, (1,))})


class MultiDiscreteActions(Corridor):
    action_space = spaces.MultiDiscrete([2, 3])


gymnasium.register(id="Corridor-v0", entry_point=f"{__name__}:Corridor", max_episode_steps=10)
gymnasium.register(id="DictObs-v0", entry_point=f"{__name__}:DictObs", max_episode_steps=10)
gymnasium.register(id="MultiDiscreteActions-v0", entry_point=f"{__name__}:MultiDiscreteActions", max_episode_steps=10)
gymnasium.register(id="NoLimit-v0", entry_point=f"{__name__}:Corridor")


def scripted(env, action, num_steps, first=None):
    """Steps a host env ``num_steps`` times with one action; returns the states ``[T]``."""
    states = [first] if first is not None else []
    for _ in range(num_steps):
        states.append(env.step(np.full((env.num_envs,) + env.action_space.shape, action)))
    return jax.tree.map(lambda *xs: np.stack(xs), *states)


def gymnax_scripted(env, action, num_steps, key=0):
    state = env.reset(jax.random.PRNGKey(key))
    actions = jnp.full((env.num_envs,), action, jnp.int32)
    states = []
    for _ in range(num_steps):
        state = env.step(state, actions)
        states.append(state)
    return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *states), env.reset(jax.random.PRNGKey(key))


def aligned_cartpole(parallel, episode_length=None, vectorization="none"):
    """gymnax and gymnasium CartPole starting from the same (gymnax's) initial states."""
    jax_env = create_env({"env_name": "CartPole-v1", "env_type": "gymnax"}, episode_length, parallel)
    host_env = create_env({"env_name": "CartPole-v1", "env_type": "gymnasium", "vectorization": vectorization},
                          episode_length, parallel)
    first = host_env.reset(0)
    start = np.asarray(jax_env.reset(jax.random.PRNGKey(0)).obs)  # [B, 4] == CartPole's state
    if vectorization == "none":
        for i, env in enumerate(host_env._envs):
            env.unwrapped.state = start[i].astype(np.float64)
    else:  # gymnasium's CartPoleVectorEnv: state [4, B]
        host_env._vector.vec.state[:] = start.T.astype(np.float64)
    return jax_env, host_env, first.replace(obs=start, final_obs=start)


def check_same_structure(host, reference):
    for name in ("obs", "final_obs", "reward", "terminated", "truncated", "episode_return", "episode_length"):
        a, b = getattr(host, name), getattr(reference, name)
        assert isinstance(a, np.ndarray) and a.shape == b.shape and a.dtype == b.dtype, name
    assert host.backend_state is None and host.key is None


@pytest.mark.parametrize("vectorization", ["none", "vector_entry_point"])
def test_gymnasium_cartpole_failure_matches_gymnax(vectorization):
    jax_env, host_env, _ = aligned_cartpole(parallel=2, vectorization=vectorization)
    ref, _ = gymnax_scripted(jax_env, 1, 14)
    host = scripted(host_env, 1, 14)
    check_same_structure(host, ref)
    assert isinstance(host_env, HostVectorEnv) and host_env.on_host and not jax_env.on_host
    assert host_env.episode_length == jax_env.episode_length == 500
    np.testing.assert_array_equal(host.truncated, np.zeros_like(host.truncated))
    for i in range(2):
        done = int(np.argmax(ref.terminated[:, i]))  # the first episode fails (always push right)
        assert 5 < done < 13
        # identical dynamics up to and including the failing step
        upto = slice(0, done + 1)
        np.testing.assert_array_equal(host.terminated[upto, i], ref.terminated[upto, i])
        np.testing.assert_allclose(host.final_obs[upto, i], ref.final_obs[upto, i], atol=1e-4)
        np.testing.assert_array_equal(host.episode_length[upto, i], ref.episode_length[upto, i])
        np.testing.assert_array_equal(host.episode_return[upto, i], ref.episode_return[upto, i])
        assert host.episode_return[done, i] == host.episode_length[done, i] == done + 1
        # final_obs is the failed state, obs already a fresh episode, statistics restart after it
        assert abs(host.final_obs[done, i, 2]) > THETA_LIMIT
        assert (np.abs(host.obs[done, i]) <= 0.05).all()
        assert host.episode_length[done + 1, i] == 1 and host.episode_return[done + 1, i] == 1.0
        np.testing.assert_array_equal(host.obs[:done, i], host.final_obs[:done, i])


@pytest.mark.parametrize("vectorization", ["none", "vector_entry_point"])
def test_gymnasium_cartpole_time_limit_matches_gymnax(vectorization):
    jax_env, host_env, _ = aligned_cartpole(parallel=2, episode_length=5, vectorization=vectorization)
    ref, _ = gymnax_scripted(jax_env, 1, 12)
    host = scripted(host_env, 1, 12)
    for name in ("terminated", "truncated", "episode_length", "episode_return"):
        np.testing.assert_array_equal(getattr(host, name), getattr(ref, name), err_msg=name)
    assert host.truncated[4].all() and host.truncated[9].all() and not host.terminated.any()
    np.testing.assert_allclose(host.final_obs[:5], ref.final_obs[:5], atol=1e-4)
    assert not np.allclose(host.obs[4], host.final_obs[4])
    # the copies are independent and shorter / longer limits are new vectors
    assert host_env.with_episode_length(7).episode_length == 7 and host_env.episode_length == 5
    assert host_env.with_num_envs(3).reset(0).obs.shape == (3, 4)


def test_seeds_and_reward_scale():
    env = create_env({"env_name": "CartPole-v1", "env_type": "gymnasium", "reward_scale": 0.5}, parallel=3)
    first = env.reset(7)
    single = create_env({"env_name": "CartPole-v1", "env_type": "gymnasium"}, parallel=1)
    np.testing.assert_array_equal(single.reset(9).obs[0], first.obs[2])  # copy i is seeded seed + i
    state = env.step(np.ones(3, int))
    np.testing.assert_array_equal(state.reward, [0.5, 0.5, 0.5])
    np.testing.assert_array_equal(state.episode_return, [1.0, 1.0, 1.0])  # unscaled
    with pytest.raises(ValueError, match=r"actions must have shape \(3,\)"):
        env.step(np.ones((3, 1), int))


def test_action_repeat_counts_agent_steps():
    env = create_env({"env_name": "CartPole-v1", "env_type": "gymnasium", "action_repeat": 3}, episode_length=2)
    env.reset(0)
    states = scripted(env, 0, 2)
    np.testing.assert_array_equal(states.reward[:, 0], [3.0, 3.0])
    np.testing.assert_array_equal(states.truncated[:, 0], [False, True])


def test_envpool_cartpole_semantics_match_gymnasium():
    pytest.importorskip("envpool", reason="envpool is an optional extra")
    runs = {}
    for env_type in ("gymnasium", "envpool"):
        env = create_env({"env_name": "CartPole-v1", "env_type": env_type}, parallel=2)
        runs[env_type] = scripted(env, 1, 25, first=env.reset(3))
        limited = create_env({"env_name": "CartPole-v1", "env_type": env_type}, episode_length=5, parallel=2)
        limited.reset(3)
        runs[env_type + "/5"] = scripted(limited, 1, 12)
        env.close()
    check_same_structure(runs["envpool"], runs["gymnasium"])
    for name in ("terminated", "truncated", "episode_length", "episode_return"):
        np.testing.assert_array_equal(getattr(runs["envpool/5"], name), getattr(runs["gymnasium/5"], name))
    for s in (runs["envpool"], runs["gymnasium"]):  # s[0] is the reset state
        for i in range(2):
            ends = np.flatnonzero(s.done[:, i])
            assert len(ends) >= 2 and s.terminated[ends, i].all() and not s.truncated[:, i].any()
            lengths = np.diff(np.concatenate([[0], ends]))
            np.testing.assert_array_equal(s.episode_length[ends, i], lengths)
            np.testing.assert_array_equal(s.episode_return[ends, i], lengths)
            assert (np.abs(s.final_obs[ends, i, 2]) > THETA_LIMIT).all()  # the failed state
            assert (np.abs(s.obs[ends, i]) <= 0.05).all()  # already the next episode's first obs
            np.testing.assert_array_equal(s.episode_length[ends[ends + 1 < len(s.done)] + 1, i], 1)


def test_mujoco_inverted_pendulum():
    pytest.importorskip("mujoco", reason="MuJoCo envs need mujoco (pip install -e \".[mujoco]\")")
    env = create_env({"env_name": "InvertedPendulum-v5", "env_type": "gymnasium"}, episode_length=3, parallel=2)
    assert isinstance(env.action_space, Box) and env.action_space.shape == (1,)
    assert env.obs_space.shape == (4,)
    assert create_env({"env_name": "InvertedPendulum-v5", "env_type": "gymnasium"}).episode_length == 1000
    states = scripted(env, 0.0, 4, first=env.reset(0))
    assert states.obs.dtype == np.float32 and states.reward.dtype == np.float32
    np.testing.assert_array_equal(states.truncated[:, 0], [False, False, False, True, False])
    assert not states.terminated.any()


# --- Atari -------------------------------------------------------------------------------
def atari(name="ALE/Pong-v5", parallel=1, **keys):
    pytest.importorskip("ale_py", reason="Atari needs ale-py (pip install -e \".[atari]\")")
    pytest.importorskip("cv2", reason="Atari preprocessing needs OpenCV (pip install -e \".[atari]\")")
    return create_env({"env_name": name, "env_type": "gymnasium", **keys}, parallel=parallel)


def test_atari_default_preprocessing():
    env = atari(parallel=2)
    state = env.reset(0)
    assert env.obs_space.shape == (84, 84, 4) and env.action_space == Discrete(6)
    assert state.obs.shape == (2, 84, 84, 4) and state.obs.dtype == np.uint8
    assert env.episode_length == 108_000 // 4
    assert env.with_episode_length(9).episode_length == 9
    wrapper = env.with_num_envs(1)
    wrapper.reset(0)
    preprocessing = wrapper._envs[0].env  # FrameStackObservation(AtariPreprocessing(...))
    assert (preprocessing.noop_max, preprocessing.frame_skip, preprocessing.terminal_on_life_loss) == (30, 4, False)
    assert wrapper._envs[0].unwrapped.ale.getFloat("repeat_action_probability") == pytest.approx(0.25)


def test_atari_keys_change_what_they_should():
    assert atari(frame_stack=1).obs_space.shape == (84, 84, 1)
    assert atari(grayscale=False).obs_space.shape == (84, 84, 12)
    assert atari(screen_size=64).obs_space.shape == (64, 64, 4)
    assert atari(frame_skip=2).episode_length == 108_000 // 2
    # stacking puts the newest frame last: the single-frame env sees the same frames
    stacked, single = atari(noop_max=0), atari(noop_max=0, frame_stack=1)
    stacked.reset(5), single.reset(5)
    for _ in range(3):
        s, o = stacked.step(np.array([2])), single.step(np.array([2]))
    np.testing.assert_array_equal(s.obs[..., -1], o.obs[..., 0])
    assert not np.array_equal(s.obs[..., 0], s.obs[..., -1])
    rgb = atari(grayscale=False, frame_stack=2)
    assert rgb.reset(0).obs.shape == (1, 84, 84, 6)
    env = atari(noop_max=7, repeat_action_probability=0.0, frame_skip=3)
    env.reset(0)
    wrapper = env._envs[0].env
    assert (wrapper.noop_max, wrapper.frame_skip) == (7, 3)
    assert env._envs[0].unwrapped.ale.getFloat("repeat_action_probability") == 0.0


def test_atari_rewards_clipped_for_training_returns_raw():
    clipped, raw = atari("ALE/SpaceInvaders-v5"), atari("ALE/SpaceInvaders-v5", clip_rewards=False)
    clipped.reset(1), raw.reset(1)
    actions = np.random.default_rng(0).integers(0, clipped.action_space.n, size=(150, 1))
    c = jax.tree.map(lambda *xs: np.stack(xs), *[clipped.step(x) for x in actions])
    r = jax.tree.map(lambda *xs: np.stack(xs), *[raw.step(x) for x in actions])
    assert (np.abs(r.reward) > 1).any(), "SpaceInvaders pays 5 to 30 points per alien"
    np.testing.assert_array_equal(c.reward, np.sign(r.reward))
    assert set(np.unique(c.reward)) <= {-1.0, 0.0, 1.0}
    np.testing.assert_array_equal(c.episode_return, r.episode_return)
    np.testing.assert_array_equal(c.episode_return[:, 0], np.cumsum(r.reward[:, 0]))  # no episode ended


@pytest.mark.parametrize("env_type", ["gymnasium", "envpool"])
def test_fire_reset_serves_at_start_and_after_every_lost_life(env_type):
    """A policy that never fires: with fire_reset the env serves for it, so Breakout's five
    balls are lost and the game ends (terminated) in ~120 steps, on both backends; without
    it the first ball is never served and the episode runs into its time limit."""
    if env_type == "envpool":
        pytest.importorskip("envpool", reason="envpool is an optional extra")
        from evorl.envs.envpool_env import EnvpoolEnv as Env
        atari("ALE/Breakout-v5")  # ale-py reads the action set
    else:
        Env = type(atari("ALE/Breakout-v5"))
    ended = {}
    for fire in (True, False):
        env = Env("ALE/Breakout-v5", num_envs=2, fire_reset=fire, repeat_action_probability=0.0, episode_length=400)
        env.reset(0)
        for t in range(400):
            state = env.step(np.zeros(2, np.int32))
            if state.done.any():
                break
        ended[fire] = (t + 1, bool(state.terminated.all()), bool(state.truncated.all()))
        env.close()
    assert ended[False] == (400, False, True)
    steps, terminated, truncated = ended[True]
    assert steps < 200 and terminated and not truncated
    with pytest.raises(ConfigError, match="Freeway-v5' has no FIRE action"):
        Env("ALE/Freeway-v5", num_envs=1, fire_reset=True)


def breakout(env_type, **keys):
    if env_type == "envpool":
        pytest.importorskip("envpool", reason="envpool is an optional extra")
        from evorl.envs.envpool_env import EnvpoolEnv as Env
        atari("ALE/Breakout-v5")  # ale-py reads the action set
    else:
        Env = type(atari("ALE/Breakout-v5"))
    return Env("ALE/Breakout-v5", num_envs=1, fire_reset=True, repeat_action_probability=0.0, **keys)


def episode_ends(env, steps):
    """``(step, terminated, truncated, episode_length)`` of each episode end of a policy that
    never moves (action 0), over ``steps`` agent steps from ``reset(0)``."""
    env.reset(0)
    ends = []
    for t in range(steps):
        state = env.step(np.zeros(1, np.int32))
        if state.done[0]:
            ends.append((t, bool(state.terminated[0]), bool(state.truncated[0]), int(state.episode_length[0])))
    env.close()
    return ends


@pytest.mark.parametrize("env_type", ["gymnasium", "envpool"])
def test_life_loss_ends_the_learners_episode_and_the_game_goes_on(env_type):
    """terminal_on_life_loss: each of Breakout's five lost balls ends an episode (terminated)
    while the game continues, so the five lives together last as long as one whole game
    played without the option; then a new game starts (its first life as long as the first
    game's). The time limit counts whole games. Evaluation plays whole games. Both backends
    agree."""
    whole = episode_ends(breakout(env_type), 300)
    game_steps, terminated, truncated, _ = whole[0]
    assert terminated and not truncated
    lives = episode_ends(breakout(env_type, terminal_on_life_loss=True), 2 * (game_steps + 1))
    assert [(te, tr) for _, te, tr, _ in lives] == [(True, False)] * 10
    assert sum(length for *_, length in lives[:5]) == game_steps + 1  # one game, five lives
    assert lives[4][0] == game_steps and lives[9][0] == 2 * game_steps + 1
    assert lives[5][3] == lives[0][3] < game_steps // 3  # a new game's first life
    limited = episode_ends(breakout(env_type, terminal_on_life_loss=True, episode_length=30), 60)
    first_life = lives[0][3]
    assert limited[:2] == [(first_life - 1, True, False, first_life), (29, False, True, 30 - first_life)]
    assert limited[2][0] == 30 + first_life - 1  # the truncated game restarted from its first life
    whole_again = episode_ends(breakout(env_type, terminal_on_life_loss=True).for_evaluation(), 300)
    assert whole_again[0] == whole[0]


def test_envpool_atari_layout():
    pytest.importorskip("envpool", reason="envpool is an optional extra")
    env = create_env({"env_name": "ALE/Pong-v5", "env_type": "envpool", "frame_stack": 2}, parallel=2)
    state = env.reset(0)
    assert env.obs_space.shape == (84, 84, 2) and state.obs.shape == (2, 84, 84, 2) and state.obs.dtype == np.uint8
    state = env.step(np.zeros(2, int))
    assert state.reward.dtype == np.float32 and env.episode_length == 27_000


# --- spaces, names and config errors -------------------------------------------------------
@pytest.mark.parametrize("name, match", [
    ("DictObs-v0", r"'DictObs-v0' has the observation space Dict\('x'.*must be Box or Discrete"),
    ("MultiDiscreteActions-v0", r"'MultiDiscreteActions-v0' has the action space MultiDiscrete\(\[2 3\]\)"),
])
def test_unsupported_spaces_are_named(name, match):
    with pytest.raises(ConfigError, match=match):
        create_env({"env_name": name, "env_type": "gymnasium"})


def test_unknown_names_suggest_close_matches():
    with pytest.raises(ConfigError, match=r"Unknown gymnasium env_name 'CartPole-v2'. Did you mean 'CartPole-v1'"):
        create_env({"env_name": "CartPole-v2", "env_type": "gymnasium"})
    with pytest.raises(ConfigError, match=r"cannot import module 'no_such_module'"):
        create_env({"env_name": "no_such_module:MyEnv-v0", "env_type": "gymnasium"})
    with pytest.raises(ConfigError, match=r"no time limit of its own.*set env.episode_length"):
        create_env({"env_name": "NoLimit-v0", "env_type": "gymnasium"})
    assert create_env({"env_name": "NoLimit-v0", "env_type": "gymnasium"}, episode_length=4).episode_length == 4


USER_MODULE = """
import gymnasium as gym
import numpy as np

class Corridor(gym.Env):
    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 0.0, False, False, {}

gym.register(id="CwdCorridor-v0", entry_point=Corridor, max_episode_steps=10)
"""


def test_a_module_env_is_imported_from_the_current_folder(tmp_path, monkeypatch):
    """``evorl-train env.env_name=my_envs:Env-v0`` run where my_envs.py lies: a console script
    does not put that folder on sys.path, as ``python -c`` would; evorl looks there too."""
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cwd_envs.py").write_text(USER_MODULE)
    monkeypatch.delitem(sys.modules, "cwd_envs", raising=False)
    try:
        env = create_env({"env_name": "cwd_envs:CwdCorridor-v0", "env_type": "gymnasium"})
        assert env.episode_length == 10 and str(tmp_path) in sys.path
    finally:
        sys.modules.pop("cwd_envs", None)
        gymnasium.registry.pop("CwdCorridor-v0", None)
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    with pytest.raises(ConfigError, match=re.escape(f"in the current folder ({tmp_path}) or a folder on the "
                                                    f"PYTHONPATH (/somewhere/else).")):
        create_env({"env_name": "elsewhere_envs:Other-v0", "env_type": "gymnasium"})


def test_config_keys_by_env_type():
    def env_cfg(**keys):
        return parse_section(EnvConfig, keys, "env")

    assert env_cfg(env_name="ALE/Pong-v5", env_type="envpool", frame_stack=2, kwargs={"x": 1}).frame_stack == 2
    with pytest.raises(ConfigError, match=r"env.frame_stack is only valid with env_type 'gymnasium' or 'envpool', not 'gymnax'"):
        env_cfg(env_name="CartPole-v1", env_type="gymnax", frame_stack=2)
    with pytest.raises(ConfigError, match=r"env.kwargs is only valid with env_type 'gymnasium' or 'envpool'"):
        env_cfg(env_name="CartPole-v1", env_type="brax", kwargs={"x": 1})
    with pytest.raises(ConfigError, match=r"env.clip_rewards is Atari preprocessing.*not 'CartPole-v1'"):
        env_cfg(env_name="CartPole-v1", env_type="gymnasium", clip_rewards=False)
    with pytest.raises(ConfigError, match=r"env.frame_stack must be >= 1, got 0"):
        env_cfg(env_name="ALE/Pong-v5", env_type="gymnasium", frame_stack=0)
    with pytest.raises(ConfigError, match=r"env.action_repeat = 2 does not apply to Atari"):
        atari(action_repeat=2)


def user_env_agent(parallel=3):
    env = create_env(EnvConfig(env_name=f"{__name__}:Corridor-v0", env_type="gymnasium"), parallel=parallel)
    agent = make_mlp_ppo_agent(env.action_space, env.obs_space)
    return env, agent


@pytest.mark.slow
def test_users_env_trains_through_create_env():
    import optax

    env, agent = user_env_agent()
    assert env.action_space == Discrete(3) and env.episode_length == 10
    state = agent.init(jax.random.PRNGKey(0))
    optimizer = optax.adam(3e-3)
    opt_state = optimizer.init(state.params)

    @jax.jit
    def update(state, opt_state, trajectory, key):
        trajectory = agent.compute_targets(state, trajectory)
        batch = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), trajectory)
        grads, metrics = jax.grad(lambda p: agent.loss(state.replace(params=p), batch, key), has_aux=True)(state.params)
        updates, opt_state = optimizer.update(grads, opt_state)
        return state.replace(params=optax.apply_updates(state.params, updates)), opt_state, metrics

    env_state, returns = env.reset(0), []
    for i in range(25):
        env_state, trajectory, stats = host_rollout(env, agent, state, env_state, jax.random.PRNGKey(i), 20)
        state, opt_state, metrics = update(state, opt_state, trajectory, jax.random.PRNGKey(100 + i))
        returns.append(stats.return_sum / max(stats.count, 1))
    assert all(np.isfinite(float(v)) for v in metrics.values())
    assert np.mean(returns[-5:]) > np.mean(returns[:5]) + 1.0  # learns to walk one way


# --- host rollout and evaluation -------------------------------------------------------------
def test_host_rollout_samples_like_rollout():
    env, agent = user_env_agent()
    reference_env = env.with_num_envs(3)
    state = agent.init(jax.random.PRNGKey(1))
    key, env_ids, steps = jax.random.PRNGKey(2), np.array([5, 9, 11]), 14
    _, trajectory, stats = host_rollout(env, agent, state, env.reset(4), key, steps, env_ids)

    # independent reference: one env and one agent call at a time, keys as rollout() draws them
    env_state, step_keys = reference_env.reset(4), jax.random.split(key, steps)
    return_sum = length_sum = 0.0
    for t in range(steps):
        actions, logps = [], []
        for i, env_id in enumerate(env_ids):
            a, extras = agent.compute_actions(state, env_state.obs[i], jax.random.fold_in(step_keys[t], env_id))
            actions.append(int(a)), logps.append(float(extras["logp"]))
        np.testing.assert_array_equal(trajectory.actions[t], actions)
        np.testing.assert_allclose(trajectory.extras["logp"][t], logps, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(trajectory.obs[t], env_state.obs)
        env_state = reference_env.step(np.array(actions))
        np.testing.assert_array_equal(trajectory.next_obs[t], env_state.final_obs)
        np.testing.assert_array_equal(trajectory.rewards[t], env_state.reward)
        np.testing.assert_array_equal(trajectory.terminated[t] | trajectory.truncated[t], env_state.done)
        return_sum += float(np.sum(env_state.done * env_state.episode_return))
        length_sum += float(np.sum(env_state.done * env_state.episode_length))
    done = trajectory.terminated | trajectory.truncated
    assert done.any() and float(stats.count) == done.sum()
    assert float(stats.return_sum) == pytest.approx(return_sum) and float(stats.length_sum) == length_sum
    assert trajectory.obs.shape == (steps, 3, 2) and trajectory.obs.dtype == np.float32
    assert isinstance(trajectory.actions, np.ndarray) and trajectory.extras["logp"].shape == (steps, 3)


@pytest.mark.slow  # ~20 s on 2 cores at load 8-10 (2026-12-03)
def test_host_evaluator_plays_one_episode_per_env():
    env = create_env({"env_name": "CartPole-v1", "env_type": "gymnasium", "reward_scale": 0.1}, parallel=2)
    agent = make_mlp_ppo_agent(env.action_space, env.obs_space)
    state = agent.init(jax.random.PRNGKey(0))
    evaluator = make_evaluator(env, agent, 3)
    assert isinstance(evaluator, HostEvaluator) and evaluator.env.num_envs == 3
    returns, lengths = evaluator.evaluate(state, jax.random.PRNGKey(5))
    assert returns.shape == lengths.shape == (3,) and returns.dtype == np.float32
    np.testing.assert_array_equal(returns, lengths)  # CartPole pays 1 a step, unscaled
    assert ((lengths >= 1) & (lengths <= 500)).all()

    # the same greedy episodes, played by hand
    greedy_env = env.with_num_envs(3)
    seed = int(jax.random.randint(jax.random.PRNGKey(5), (), 0, 2**31 - 1 - 3))
    env_state, expected = greedy_env.reset(seed), np.zeros(3)
    for _ in range(500):
        env_state = greedy_env.step(np.asarray(agent.evaluate_actions(state, env_state.obs)))
        expected = np.where((expected == 0) & env_state.done, env_state.episode_length, expected)
    np.testing.assert_array_equal(lengths, expected)
    jax_env = create_env({"env_name": "CartPole-v1", "env_type": "gymnax"})
    assert type(make_evaluator(jax_env, agent, 2)) is Evaluator


@pytest.mark.slow  # ~19 s on 2 cores at load 8-10 (2026-12-03)
def test_render_host_episode(tmp_path):
    import imageio.v3 as iio

    from evorl.app.rendering import host_frames, render_episode

    env = atari(frame_stack=1)
    agent = make_mlp_ppo_agent(env.action_space, env.obs_space, network="nature_cnn")
    agent_state = agent.init(jax.random.PRNGKey(0))
    frames = host_frames(env, agent, agent_state, seed=0, max_steps=4)
    assert len(frames) == 4 and frames[0].shape == (210, 160, 3) and frames[0].dtype == np.uint8
    state = types.SimpleNamespace(agent_state=agent_state)
    path = render_episode(types.SimpleNamespace(env=env, agent=agent), state, tmp_path / "pong.gif", max_steps=4)
    assert iio.imread(path, index=0).shape == (210, 160, 3)
    corridor = create_env({"env_name": "Corridor-v0", "env_type": "gymnasium"})
    with pytest.raises(ValueError, match=r"'Corridor-v0' cannot render 'rgb_array' frames \(its render modes: none\)"):
        render_episode(types.SimpleNamespace(env=corridor, agent=agent), state, tmp_path / "corridor.gif")


def test_fused_workflow_refuses_host_envs():
    from evorl.workflows import PPOWorkflow

    cfg = {"workflow_cls": "evorl.workflows.PPOWorkflow", "env": {"env_name": "CartPole-v1", "env_type": "gymnasium"},
           "runner": {"mode": "fused"}}
    with pytest.raises(ConfigError, match=r"env_type 'gymnasium' steps its environments on the host.*runner.mode=async"):
        PPOWorkflow.build_from_config(cfg)


@pytest.mark.slow  # 12 s
def test_host_evaluator_samples_when_not_deterministic():
    """``deterministic=False`` on the host: the same episodes, played by hand with
    ``compute_actions`` per env ``i`` with the keys ``fold_in(fold_in(fold_in(key, 1), t), i)``; a fresh agent's
    nearly uniform policy lasts as long as a random one (22.4 steps on average), unlike its
    argmax (38.3 steps here)."""

    def sampled_actions(agent, state, obs, step_key):
        keys = jnp.stack([jax.random.fold_in(step_key, i) for i in range(obs.shape[0])])
        return jax.vmap(agent.compute_actions, in_axes=(None, 0, 0))(state, obs, keys)[0]

    env = create_env({"env_name": "CartPole-v1", "env_type": "gymnasium"})
    agent = make_mlp_ppo_agent(env.action_space, env.obs_space)
    state = agent.init(jax.random.PRNGKey(0))
    key = jax.random.PRNGKey(5)
    returns, lengths = make_evaluator(env, agent, 64, deterministic=False).evaluate(state, key)
    greedy = make_evaluator(env, agent, 64).evaluate(state, key)[1]
    assert 17 < float(np.mean(lengths)) < 28 and float(np.mean(greedy)) > 30, (np.mean(greedy), np.mean(lengths))

    by_hand_env = env.with_num_envs(64)
    seed = int(jax.random.randint(key, (), 0, 2**31 - 1 - 64))
    env_state, expected = by_hand_env.reset(seed), np.zeros(64)
    for t in range(500):
        step_key = jax.random.fold_in(jax.random.fold_in(key, 1), t)
        env_state = by_hand_env.step(np.asarray(sampled_actions(agent, state, env_state.obs, step_key)))
        expected = np.where((expected == 0) & env_state.done, env_state.episode_length, expected)
    np.testing.assert_array_equal(lengths, expected)

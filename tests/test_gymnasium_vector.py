"""gymnasium's vector entry point (evorl/envs/gymnasium_vector.py) against one gymnasium env
per copy: the same trajectories for the same seeds, and which envs take which path."""

import jax
import numpy as np
import pytest

from evorl.algorithms.ppo import make_mlp_ppo_agent
from evorl.config import ConfigError, parse_section
from evorl.envs import EnvConfig, create_env
from evorl.rl.host_rollout import host_rollout

FIELDS = ("obs", "final_obs", "reward", "terminated", "truncated", "episode_return", "episode_length")


def cartpole(vectorization, parallel=5, episode_length=None, **keys):
    env = create_env({"env_name": "CartPole-v1", "env_type": "gymnasium", "vectorization": vectorization, **keys},
                     episode_length, parallel)
    assert env.vectorization == vectorization
    return env


def random_walk(env, seed, steps):
    """The env's states over ``steps`` steps of uniformly random actions, stacked ``[T, B]``."""
    actions = np.random.default_rng(seed).integers(0, 2, size=(steps, env.num_envs))
    states = [env.reset(seed)] + [env.step(a) for a in actions]
    return jax.tree.map(lambda *xs: np.stack(xs), *states)


@pytest.mark.parametrize("episode_length", [None, 12])
def test_vector_entry_point_steps_like_one_env_per_copy(episode_length):
    """Bit-identical states over many episodes: starts (copy i seeded seed + i, later episodes
    from its own stream), terminations, time-limit truncations with the true final obs,
    restarts on the ending step, episode statistics."""
    for seed in (0, 123):
        runs = {v: random_walk(cartpole(v, episode_length=episode_length), seed, 300)
                for v in ("vector_entry_point", "none")}
        for name in FIELDS:
            np.testing.assert_array_equal(getattr(runs["vector_entry_point"], name), getattr(runs["none"], name),
                                          err_msg=f"{name}, seed {seed}")
        run = runs["vector_entry_point"]
        ends = run.terminated | run.truncated
        assert (ends.sum(0) >= 5).all()  # several episodes in every copy
        assert run.terminated.any()
        if episode_length is not None:
            assert run.truncated.any() and run.episode_length.max() == episode_length
            t, i = np.argwhere(run.truncated)[0]
            assert not np.array_equal(run.obs[t, i], run.final_obs[t, i])  # true final obs, then a fresh start
            assert (np.abs(run.obs[t, i]) <= 0.05).all() and run.episode_length[t + 1, i] == 1


def test_host_rollout_trajectories_are_the_same():
    """Through the actors' loop: obs, actions, rewards, terminated, truncated, next_obs and
    episode sums equal over consecutive rollouts with truncations."""
    results = {}
    for vectorization in ("vector_entry_point", "none"):
        env = cartpole(vectorization, parallel=4, episode_length=15)
        agent = make_mlp_ppo_agent(env.action_space, env.obs_space)
        state = agent.init(jax.random.PRNGKey(0))
        env_state, rollouts = env.reset(7), []
        for i in range(4):
            env_state, trajectory, stats = host_rollout(env, agent, state, env_state, jax.random.PRNGKey(i), 16)
            rollouts.append((trajectory, stats))
        results[vectorization] = rollouts
    for (a, a_stats), (b, b_stats) in zip(results["vector_entry_point"], results["none"]):
        for name in ("obs", "actions", "rewards", "terminated", "truncated", "next_obs"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
        np.testing.assert_array_equal(np.asarray(a_stats), np.asarray(b_stats))
    assert any(t.truncated.any() for t, _ in results["none"])


def test_which_path_each_env_takes():
    assert create_env({"env_name": "CartPole-v1", "env_type": "gymnasium"}).vectorization == "vector_entry_point"
    assert create_env({"env_name": "Acrobot-v1", "env_type": "gymnasium"}).vectorization == "none"
    # a vector env steps every copy or none: action_repeat > 1 steps copies one by one
    assert cartpole("none", action_repeat=2).vectorization == "none"
    assert create_env({"env_name": "CartPole-v1", "env_type": "gymnasium", "action_repeat": 2}).vectorization == "none"
    # frames are drawn by per-copy envs
    assert cartpole("vector_entry_point").with_render_mode("rgb_array").vectorization == "none"
    # a kwarg of the env that the vector class takes keeps the vector path, with the same rewards
    runs = [random_walk(cartpole(v, kwargs={"sutton_barto_reward": True}), 3, 40) for v in ("vector_entry_point", "none")]
    np.testing.assert_array_equal(runs[0].reward, runs[1].reward)
    assert runs[0].reward.min() == -1.0


def test_vectorization_errors_name_the_value_and_what_is_valid():
    with pytest.raises(ConfigError, match=r"'Acrobot-v1': its spec declares no vector_entry_point"):
        create_env({"env_name": "Acrobot-v1", "env_type": "gymnasium", "vectorization": "vector_entry_point"})
    with pytest.raises(ConfigError, match=r"action_repeat = 2"):
        cartpole("vector_entry_point", action_repeat=2)
    with pytest.raises(ConfigError, match=r"Unknown env.vectorization 'fast'; valid: auto, vector_entry_point, none"):
        parse_section(EnvConfig, {"env_name": "CartPole-v1", "env_type": "gymnasium", "vectorization": "fast"}, "env")
    with pytest.raises(ConfigError, match=r"env.vectorization is only valid with env_type 'gymnasium'"):
        parse_section(EnvConfig, {"env_name": "CartPole-v1", "env_type": "gymnax", "vectorization": "none"}, "env")

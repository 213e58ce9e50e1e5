"""Jumanji adapter: every registered env either maps onto our spaces (traced shapes) or is a
ConfigError naming its spec; observation fields; joint actions; termination (discount 0)
vs Jumanji's time limit (truncation)."""

import jax.numpy as jnp
import numpy as np
import pytest

jumanji = pytest.importorskip("jumanji", reason="jumanji not installed (pip install -e '.[jumanji]')")

from env_suite_checks import check_bookkeeping, check_traced_shapes, random_actions, run  # noqa: E402
from evorl.config import ConfigError  # noqa: E402
from evorl.envs import Box, Discrete, create_env  # noqa: E402
from evorl.envs.jumanji_env import UNREACHABLE_TIME_LIMIT, jumanji_env_names  # noqa: E402

#: env -> (observation shape with every field, action space)
MAPPED = {
    "BinPack-v2": ((1180,), Discrete(800)),  # 40 spaces x 20 items
    "CVRP-v1": ((147,), Discrete(21)),
    "FlatPack-v0": ((8446,), Discrete(8100)),  # 25 blocks x 4 rotations x 9 x 9 positions
    "Game2048-v1": ((20,), Discrete(4)),
    "GraphColoring-v1": ((441,), Discrete(20)),
    "Knapsack-v1": ((200,), Discrete(50)),
    "Maze-v0": ((109,), Discrete(4)),
    "Minesweeper-v0": ((202,), Discrete(100)),  # 10 x 10 cells
    "PacMan-v1": ((1529,), Discrete(5)),
    "RubiksCube-partly-scrambled-v0": ((55,), Discrete(18)),  # 6 faces x 1 depth x 3 turns
    "RubiksCube-v0": ((55,), Discrete(18)),
    "SlidingTilePuzzle-v0": ((32,), Discrete(4)),
    "Snake-v1": ((725,), Discrete(4)),  # grid 12 x 12 x 5, step_count, action_mask 4
    "Sudoku-v0": ((810,), Discrete(729)),
    "Sudoku-very-easy-v0": ((810,), Discrete(729)),
    "TSP-v1": ((81,), Discrete(20)),
    "Tetris-v0": ((157,), Discrete(40)),  # 4 rotations x 10 columns
}
#: env -> what the error names
REFUSED = {
    "Cleaner-v0": "multi-agent", "Connector-v3": "multi-agent", "LevelBasedForaging-v0": "multi-agent",
    "MMST-v0": "multi-agent", "RobotWarehouse-v0": "multi-agent", "SearchAndRescue-v0": "multi-agent",
    "JobShop-v0": "MultiDiscreteArray.*21 x 21", "MultiCVRP-v0": "BoundedArray.*int16.*maps onto no evorl space",
}
#: downloads its levels from the internet on construction
NEEDS_DOWNLOAD = {"Sokoban-v0"}
SNAKE_UP = 0


def jumanji_env(name, parallel=2, **cfg):
    return create_env({"env_type": "jumanji", "env_name": name, **cfg}, parallel=parallel)


def test_every_registered_env_is_classified():
    assert set(jumanji_env_names()) == set(MAPPED) | set(REFUSED) | NEEDS_DOWNLOAD


# jumanji's BinPack scatters float32 values into an int32 array (jumanji/tree_utils.py): JAX's
# FutureWarning about jumanji's code, not ours
@pytest.mark.filterwarnings("ignore:scatter inputs have incompatible types:FutureWarning")
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "BinPack-v2" else n
                                  for n in sorted(MAPPED)])  # BinPack: seconds to compile
def test_every_mapped_env_resets_and_steps(name):
    env = jumanji_env(name)
    assert (env.obs_space.shape, env.action_space) == MAPPED[name]
    check_traced_shapes(env)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_envs_whose_spaces_do_not_map_name_the_spec(name):
    with pytest.raises(ConfigError, match=rf"jumanji '{name}' .*{REFUSED[name]}"):
        jumanji_env(name)


def test_obs_fields_choose_flatten_and_bound():
    grid = jumanji_env("Snake-v1", obs_fields=["grid"])
    assert grid.obs_space.shape == (12, 12, 5)  # one field keeps its shape
    assert grid.obs_space.low.min() == 0 and grid.obs_space.high.max() == 1
    mask_and_count = jumanji_env("Snake-v1", obs_fields=["action_mask", "step_count"])
    # step_count is a DiscreteArray(time_limit): Jumanji's limit, out of reach here
    np.testing.assert_array_equal(mask_and_count.obs_space.high, np.float32([1, 1, 1, 1, UNREACHABLE_TIME_LIMIT - 1]))
    maze = jumanji_env("Maze-v0", obs_fields=["agent_position.row", "walls"])  # nested, dotted
    assert maze.obs_space.shape == (101,)
    with pytest.raises(ConfigError, match=r"no observation field 'walls'.*its fields: grid, step_count, action_mask"):
        jumanji_env("Snake-v1", obs_fields=["walls"])


def test_a_joint_action_is_the_row_major_index():
    tetris = jumanji_env("Tetris-v0")  # MultiDiscrete (rotation 4, column 10)
    np.testing.assert_array_equal(tetris._backend_action(jnp.int32(13)), [1, 3])
    np.testing.assert_array_equal(tetris._backend_action(jnp.int32(39)), [3, 9])
    assert jumanji_env("Snake-v1")._backend_action(jnp.int32(3)) == 3


def test_hitting_the_wall_terminates_and_keeps_the_final_obs():
    """A snake that always goes up hits the wall of the 12 x 12 grid within 12 steps."""
    env = jumanji_env("Snake-v1")
    states = run(env, jnp.full((14, 2), SNAKE_UP))
    terminated = np.asarray(states.terminated)
    assert terminated[:12].any(axis=0).all() and not np.asarray(states.truncated).any()
    t = int(np.argmax(terminated[:, 0]))
    assert states.episode_length[t, 0] == t + 1 and states.episode_length[t + 1, 0] == 1
    assert not np.array_equal(states.obs[t, 0], states.final_obs[t, 0])
    check_bookkeeping(states, env.episode_length)


@pytest.mark.slow
def test_the_time_limit_is_truncation_not_jumanjis_termination():
    """A fully scrambled cube is not solved by 20 random turns: the limit of 3 agent steps
    (action_repeat 2) truncates. RubiksCube's own time limit ends with discount 0 like a solved
    cube: it is moved out of reach (its default, 200, is ours)."""
    env = jumanji_env("RubiksCube-v0", episode_length=3, action_repeat=2)
    assert env._env.time_limit > 10**9 and jumanji_env("RubiksCube-v0").episode_length == 200
    states = run(env, random_actions(env, 10))
    np.testing.assert_array_equal(states.truncated, np.array([[0, 0, 1] * 3 + [0]] * 2).T)
    assert not np.asarray(states.terminated).any()
    check_bookkeeping(states, 3)


def test_envs_without_a_time_limit_get_the_default():
    assert jumanji_env("Game2048-v1").episode_length == 1000
    assert isinstance(jumanji_env("Game2048-v1").obs_space, Box)

"""Jumanji environments (``pip install -e ".[jumanji]"``) behind the
:class:`~evorl.envs.vec_env.VectorEnv` interface.

How Jumanji's specs map onto our spaces:

* actions: ``DiscreteArray(n)`` -> ``Discrete(n)``; a single-agent ``MultiDiscreteArray``
  with ``n_1 x ... x n_k <= MAX_JOINT_ACTIONS`` -> ``Discrete(n_1 ... n_k)``, action ``a``
  taken as its row-major index (Tetris: rotation x column = 40; Minesweeper: row x column =
  100); a float ``BoundedArray`` -> ``Box``. Multi-agent environments (Cleaner, Connector,
  LevelBasedForaging, MMST, RobotWarehouse, SearchAndRescue) and other action specs
  (JobShop's 21^10 joint actions, MultiCVRP's integer array) are a ConfigError naming the spec.
* observations: a named tuple of arrays; the agent sees the fields ``env.obs_fields`` names
  (default: every field, flattened and concatenated; one field keeps its shape, e.g.
  ``obs_fields: [grid]`` gives Snake's ``[12, 12, 5]`` image), float32, bounds from the specs
  (see :mod:`evorl.envs.obs_fields`). ``action_mask`` is an ordinary field: policies do not mask
  their actions, and environments answer an invalid action their own way (Snake and Tetris
  end the episode, Game2048 leaves the board unchanged).

Termination: a ``LAST`` step with discount 0. Jumanji's own time limits (``time_limit``:
Snake 4000, Maze 100, RubiksCube 200, ...) also end episodes with discount 0 in most envs,
indistinguishable from a real end: the time limit is :class:`VectorEnv`'s here
(``episode_length``, the env's ``time_limit`` by default, reported as ``truncated``) and the
env is rebuilt with its own limit out of reach (its ``step_count`` observation counts on).
Environments without a time limit (Game2048, Knapsack, TSP, ...) get ``DEFAULT_EPISODE_LENGTH``.
"""

from __future__ import annotations

import inspect

import jax.numpy as jnp
import numpy as np

from evorl.config import ConfigError
from evorl.config.env import checked_env_name, import_env_package
from evorl.envs.obs_fields import chosen_fields, fields_space, observe_fields
from evorl.envs.spaces import Box, Discrete
from evorl.envs.vec_env import VectorEnv

#: The most joint actions a MultiDiscreteArray may have to map onto one Discrete.
MAX_JOINT_ACTIONS = 10_000
#: Jumanji's own time limit while :class:`VectorEnv` owns it: never reached.
UNREACHABLE_TIME_LIMIT = np.iinfo(np.int32).max - 1
#: Time limit (steps) of environments that have none of their own (Game2048, Knapsack, TSP...).
DEFAULT_EPISODE_LENGTH = 1000


def jumanji_env_names() -> list[str]:
    return sorted(import_env_package("jumanji").registered_environments())


def _spec_at(spec, path: str):
    for part in filter(None, path.split(".")):
        spec = getattr(spec, part)
    return spec


def spec_bounds(spec, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """float32 ``(low, high)`` of one array spec: a DiscreteArray's ``[0, n - 1]``, a
    BoundedArray's own bounds, unbounded otherwise."""
    specs = import_env_package("jumanji").specs
    low: float | np.ndarray
    high: float | np.ndarray
    if isinstance(spec, specs.DiscreteArray):
        low, high = 0, int(spec.num_values) - 1
    elif isinstance(spec, specs.BoundedArray):
        low, high = np.asarray(spec.minimum, np.float32), np.asarray(spec.maximum, np.float32)
    else:
        low, high = -np.inf, np.inf
    return (np.broadcast_to(np.float32(low), shape).copy(), np.broadcast_to(np.float32(high), shape).copy())


def action_space(env, env_name: str) -> Discrete | Box:
    """Our space for a single-agent Jumanji ``action_spec`` (see the module docstring)."""
    specs = import_env_package("jumanji").specs
    spec = env.action_spec
    num_agents = getattr(env, "num_agents", None)
    if num_agents is not None:
        raise ConfigError(f"jumanji {env_name!r} is a multi-agent environment ({num_agents} agents, action spec "
                          f"{spec!r}): only single-agent environments map onto evorl's spaces.")
    if isinstance(spec, specs.MultiDiscreteArray):
        sizes = np.asarray(spec.num_values).ravel()
        if int(np.prod(sizes, dtype=np.int64)) <= MAX_JOINT_ACTIONS:
            return Discrete(int(np.prod(sizes)))
        raise ConfigError(f"jumanji {env_name!r} has the action spec {spec!r}: {' x '.join(map(str, sizes))} joint "
                          f"actions, more than the {MAX_JOINT_ACTIONS} a Discrete space may take here.")
    if isinstance(spec, specs.DiscreteArray):
        return Discrete(int(spec.num_values))
    if isinstance(spec, specs.BoundedArray) and jnp.issubdtype(spec.dtype, jnp.floating):
        return Box(*spec_bounds(spec, tuple(spec.shape)))
    raise ConfigError(f"jumanji {env_name!r} has the action spec {spec!r}, which maps onto no evorl space "
                      "(Discrete, a MultiDiscrete of few joint actions, or a float Box).")


def make_jumanji_env(env_name: str, episode_length: int | None):
    """``(env, episode_length)``: the env, rebuilt with its own time limit out of reach if it
    has one, and our time limit (by default its own, else ``DEFAULT_EPISODE_LENGTH``)."""
    jumanji = import_env_package("jumanji")
    env = jumanji.make(env_name)
    own_limit = getattr(env, "time_limit", None)
    default_length = DEFAULT_EPISODE_LENGTH if own_limit is None else int(own_limit)
    episode_length = default_length if episode_length is None else int(episode_length)
    if own_limit is not None:
        if "time_limit" not in inspect.signature(type(env).__init__).parameters:
            raise ConfigError(f"jumanji {env_name!r} has a time limit ({own_limit} steps) that cannot be "
                              "rebuilt out of reach: its episodes' ends would be indistinguishable.")
        env = jumanji.make(env_name, time_limit=UNREACHABLE_TIME_LIMIT)
    return env, episode_length


class JumanjiEnv(VectorEnv):
    """A single-agent Jumanji environment; ``obs_fields`` chooses what the agent sees."""

    def __init__(self, env_name: str, num_envs: int, episode_length: int | None = None,
                 reward_scale: float = 1.0, action_repeat: int = 1, obs_fields: tuple[str, ...] | None = None):
        self.env_name = checked_env_name("jumanji", env_name, jumanji_env_names())
        self._env, episode_length = make_jumanji_env(self.env_name, episode_length)
        super().__init__(num_envs, episode_length, reward_scale, action_repeat)
        self.action_space = action_space(self._env, self.env_name)
        obs_spec = self._env.observation_spec
        example_obs = obs_spec.generate_value()
        self._obs_fields = chosen_fields(example_obs, obs_fields, None, f"jumanji {self.env_name!r}")
        self.obs_space = fields_space(example_obs, self._obs_fields,
                                      lambda path, shape: spec_bounds(_spec_at(obs_spec, path), shape))
        spec = self._env.action_spec
        #: the MultiDiscreteArray's sizes a joint Discrete index numbers; None: no MultiDiscrete
        self._joint_sizes = (tuple(int(n) for n in np.asarray(spec.num_values).ravel())
                             if isinstance(spec, import_env_package("jumanji").specs.MultiDiscreteArray) else None)

    def _backend_action(self, action):
        """A joint Discrete index as the MultiDiscrete action it numbers (row-major)."""
        if self._joint_sizes is None:
            return action
        spec = self._env.action_spec
        return jnp.stack(jnp.unravel_index(action, self._joint_sizes)).astype(spec.dtype).reshape(spec.shape)

    def _reset_one(self, key):
        state, timestep = self._env.reset(key)
        return observe_fields(timestep.observation, self._obs_fields), state

    def _step_one(self, key, backend_state, action):
        state, timestep = self._env.step(backend_state, self._backend_action(action))
        terminated = timestep.last() & (timestep.discount == 0)
        return observe_fields(timestep.observation, self._obs_fields), state, timestep.reward, terminated

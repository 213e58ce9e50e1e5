"""XLand-MiniGrid environments (``pip install -e ".[xminigrid]"``) behind the
:class:`~evorl.envs.vec_env.VectorEnv` interface.

The MiniGrid ports (``MiniGrid-Empty-8x8``, ``MiniGrid-DoorKey-5x5``, ``MiniGrid-FourRooms``,
``MiniGrid-MemoryS8``, ...) and the XLand grids (``XLand-MiniGrid-R1-9x9``, ...; these run
with their default, empty ruleset: the meta-RL benchmarks' rulesets are a download of
``xminigrid.load_benchmark`` and are not wired in). Six actions (forward, turn left / right,
pick up, put down, toggle). The agent sees its egocentric view ``[V, V, 2]`` (tile id, color
id; V = 7 for MiniGrid, 5 for XLand), as float32 in ``[0, 12]``.

The reward is MiniGrid's: ``1 - 0.9 t / max_steps`` on reaching the goal at step ``t``, 0
otherwise. ``terminated`` is a ``LAST`` step with discount 0 (the goal); xminigrid's own time
limit (``max_steps``, ending with discount 1) is set to ``episode_length x action_repeat``
(by default its own value, e.g. 256 for Empty-8x8), so it coincides with :class:`VectorEnv`'s,
reported as ``truncated``, and the reward's ``max_steps`` is that limit.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from evorl.config.env import checked_env_name, import_env_package
from evorl.envs.spaces import Box, Discrete
from evorl.envs.vec_env import VectorEnv


def xminigrid_env_names() -> list[str]:
    return list(import_env_package("xminigrid").registered_environments())


class XMinigridEnv(VectorEnv):
    """An XLand-MiniGrid environment with its egocentric symbolic view."""

    def __init__(self, env_name: str, num_envs: int, episode_length: int | None = None,
                 reward_scale: float = 1.0, action_repeat: int = 1):
        xminigrid = import_env_package("xminigrid")
        from xminigrid.core.constants import NUM_COLORS, NUM_TILES

        self.env_name = checked_env_name("xminigrid", env_name, xminigrid_env_names())
        self._env, params = xminigrid.make(self.env_name)
        super().__init__(num_envs, int(params.max_steps) if episode_length is None else int(episode_length),
                         reward_scale, action_repeat)
        self._params = params.replace(max_steps=self.episode_length * self.action_repeat)
        shape = tuple(self._env.observation_shape(self._params))
        self.obs_space = Box(np.zeros(shape, np.float32), np.full(shape, max(NUM_TILES, NUM_COLORS) - 1, np.float32))
        self.action_space = Discrete(int(self._env.num_actions(self._params)))

    def _reset_one(self, key):
        timestep = self._env.reset(self._params, key)
        return jnp.asarray(timestep.observation, jnp.float32), timestep

    def _step_one(self, key, backend_state, action):
        timestep = self._env.step(self._params, backend_state, action)
        terminated = timestep.last() & (timestep.discount == 0)
        return jnp.asarray(timestep.observation, jnp.float32), timestep, timestep.reward, terminated

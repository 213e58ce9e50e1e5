"""Craftax environments (``pip install -e ".[craftax]"``) behind the
:class:`~evorl.envs.vec_env.VectorEnv` interface.

``Craftax-Classic-Symbolic-v1`` (obs ``[1345]``, 17 actions, a JAX Crafter),
``Craftax-Symbolic-v1`` (obs ``[8268]``, 43 actions) and their ``-Pixels-`` variants
(``[63, 63, 3]`` / ``[130, 110, 3]``), all float32 in ``[0, 1]``. The reward is Crafter's:
+1 for each achievement unlocked the first time in an episode, plus 0.1 per health point
gained or lost; the score of the Crafter paper is the geometric mean of the achievement
success rates, not this return.

Craftax's own ``done`` joins death (health 0, lava) and its time limit
(``max_timesteps``: 10 000 steps in Classic, 100 000 in the full game). The time limit is
:class:`VectorEnv`'s here (``episode_length``, those values by default, reported as
``truncated``): craftax's own is moved out of reach, so ``terminated`` is death alone.
"""

from __future__ import annotations

import numpy as np

from evorl.config.env import checked_env_name, import_env_package
from evorl.envs.spaces import Box, Discrete
from evorl.envs.vec_env import VectorEnv

CRAFTAX_ENVS = ("Craftax-Classic-Symbolic-v1", "Craftax-Symbolic-v1", "Craftax-Classic-Pixels-v1",
                "Craftax-Pixels-v1")
#: craftax's own time limit while :class:`VectorEnv` owns it: never reached.
UNREACHABLE_TIMESTEP = np.iinfo(np.int32).max


def craftax_env_names() -> list[str]:
    return list(CRAFTAX_ENVS)


class CraftaxEnv(VectorEnv):
    """A Craftax environment without craftax's auto-reset (:class:`VectorEnv` resets)."""

    #: A reset generates a world: 11x the cost of a step (64 envs: 82 ms vs 7.4 ms, measured
    #: on a 2-core CPU). Episodes last ~100s of steps, so a batch of B/16 fresh worlds per step
    #: (4 of 64) almost always suffices; more ending at once fall back to all B.
    sparse_reset_fraction = 1 / 16

    def __init__(self, env_name: str, num_envs: int, episode_length: int | None = None,
                 reward_scale: float = 1.0, action_repeat: int = 1):
        craftax_env = import_env_package("craftax")
        self.env_name = checked_env_name("craftax", env_name, CRAFTAX_ENVS)
        self._env = craftax_env.make_craftax_env_from_name(self.env_name, auto_reset=False)
        params = self._env.default_params
        super().__init__(num_envs, int(params.max_timesteps) if episode_length is None else int(episode_length),
                         reward_scale, action_repeat)
        self._params = params.replace(max_timesteps=UNREACHABLE_TIMESTEP)

        space = self._env.observation_space(self._params)
        shape = tuple(space.shape)
        self.obs_space = Box(np.broadcast_to(np.float32(space.low), shape), np.broadcast_to(np.float32(space.high), shape))
        self.action_space = Discrete(int(self._env.action_space(self._params).n))

    def _reset_one(self, key):
        obs, state = self._env.reset_env(key, self._params)
        return obs, state

    def _step_one(self, key, backend_state, action):
        obs, state, reward, done, _ = self._env.step_env(key, backend_state, action, self._params)
        return obs, state, reward, done

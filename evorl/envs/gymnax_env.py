"""gymnax environments behind the :class:`~evorl.envs.vec_env.VectorEnv` interface."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from evorl.config import ConfigError
from evorl.config.errors import did_you_mean
from evorl.config.env import sticky_probability
from evorl.deferred_imports import import_gymnax
from evorl.envs.minatar_obs import without_bool_scatters
from evorl.envs.spaces import Box, Discrete
from evorl.envs.vec_env import VectorEnv

# Names the seed and other libraries use for gymnax environments.
GYMNAX_ALIASES = {
    "Breakout": "Breakout-MinAtar",
    "Asterix": "Asterix-MinAtar",
    "Freeway": "Freeway-MinAtar",
    "Seaquest": "Seaquest-MinAtar",
    "SpaceInvaders": "SpaceInvaders-MinAtar",
}


def gymnax_env_names() -> list[str]:
    return list(import_gymnax().registered_envs)


def resolve_gymnax_name(env_name: str) -> str:
    valid = gymnax_env_names()
    name = GYMNAX_ALIASES.get(env_name, env_name)
    if name not in valid:
        hint = did_you_mean(env_name, valid + list(GYMNAX_ALIASES))
        raise ConfigError(
            f"Unknown gymnax env_name {env_name!r}.{hint} Valid names: {', '.join(valid)}"
            f" (aliases: {', '.join(GYMNAX_ALIASES)})."
        )
    return name


def _convert_space(space, what: str):
    from gymnax.environments import spaces as gspaces  # gymnax is imported: the env was made

    if isinstance(space, gspaces.Discrete):
        return Discrete(int(space.n))
    if isinstance(space, gspaces.Box):
        shape = tuple(space.shape)
        low = np.broadcast_to(np.asarray(space.low, np.float32), shape)
        high = np.broadcast_to(np.asarray(space.high, np.float32), shape)
        return Box(low, high)
    raise ValueError(f"gymnax {what} space {space!r} is not supported (Box and Discrete are).")


@struct.dataclass
class StickyState:
    """A gymnax game's state with sticky actions: the game's own state and the action the game
    executed at the previous step (the zero action at the start of an episode)."""

    game: Any
    last_action: jax.Array  # [*action_shape]


class GymnaxEnv(VectorEnv):
    """A gymnax environment; observations are float32, a ``Discrete`` observation one-hot.

    ``repeat_action_probability`` p (sticky actions, Machado et al. 2018; MinAtar's own
    environments use p = 0.1, which gymnax leaves out): at each step the game executes the
    action it executed at the previous step with probability p, else the agent's action. The
    agent's action is what the rollout records. With p > 0 the backend state is a
    :class:`StickyState` (:meth:`game_states` gives the game's); with p = 0 (the default) the
    env is gymnax's own, step for step."""

    typed_keys = True  # gymnax calls jax.random on the key it is given

    def __init__(self, env_name: str, num_envs: int, episode_length: int | None = None,
                 reward_scale: float = 1.0, action_repeat: int = 1,
                 repeat_action_probability: float | None = None, **env_kwargs):
        self.repeat_action_probability = sticky_probability(repeat_action_probability)
        name = resolve_gymnax_name(env_name)
        self.env_name = name
        env, params = import_gymnax().make(name, **env_kwargs)
        self._env = without_bool_scatters(env)  # a TPU miscomputes gymnax's (see minatar_obs)
        default_length = int(params.max_steps_in_episode)
        episode_length = default_length if episode_length is None else int(episode_length)
        super().__init__(num_envs, episode_length, reward_scale, action_repeat)
        # keep the params' own type (some envs declare a float limit and compare it with floats)
        limit_type = float if isinstance(params.max_steps_in_episode, float) else int
        self._params = params.replace(max_steps_in_episode=limit_type(self.episode_length))

        raw_obs_space = _convert_space(self._env.observation_space(self._params), "observation")
        self._one_hot_obs = isinstance(raw_obs_space, Discrete)
        if self._one_hot_obs:
            n = raw_obs_space.n
            self.obs_space = Box(np.zeros(n, np.float32), np.ones(n, np.float32))
        else:
            self.obs_space = raw_obs_space
        self.action_space = _convert_space(self._env.action_space(self._params), "action")

    def _observe(self, obs):
        if self._one_hot_obs:
            return jax.nn.one_hot(obs, self.obs_space.shape[0], dtype=jnp.float32)
        return jnp.asarray(obs, jnp.float32).reshape(self.obs_space.shape)

    def game_states(self, backend_state: Any) -> Any:
        """The gymnax game's states in ``backend_state`` (any leading axes)."""
        return backend_state.game if self.repeat_action_probability > 0 else backend_state

    def _reset_one(self, key):
        obs, state = self._env.reset_env(key, self._params)
        if self.repeat_action_probability > 0:
            dtype = jnp.int32 if isinstance(self.action_space, Discrete) else jnp.float32
            state = StickyState(state, jnp.zeros(self.action_space.shape, dtype))
        return self._observe(obs), state

    def _step_one(self, key, backend_state, action):
        if self.repeat_action_probability > 0:
            sticky_key, key = jax.random.split(key)
            sticky = jax.random.uniform(sticky_key) < self.repeat_action_probability
            action = jnp.where(sticky, backend_state.last_action, action).astype(backend_state.last_action.dtype)
            obs, game, reward, terminated, _ = self._env.step_env(key, backend_state.game, action, self._params)
            return self._observe(obs), StickyState(game, action), reward, terminated
        obs, state, reward, terminated, _ = self._env.step_env(
            key, backend_state, action, self._params
        )
        return self._observe(obs), state, reward, terminated

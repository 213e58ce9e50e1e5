"""JaxMARL's multi-agent environments (MPE, MABrax, ...) behind the multi-agent protocol
(:class:`~evorl.envs.multi_agent.MultiAgentVectorEnv`).

Each copy is JaxMARL's ``step_env`` / ``reset`` (no JaxMARL auto-reset): the agents'
dictionaries become arrays stacked on the agent axis in ``env.agents`` order, and an episode
ends ``terminated`` when JaxMARL's ``dones["__all__"]`` says so. An env whose only end is its
step limit (MPE's ``max_steps``) is built with that limit out of reach and reports the limit
as ``truncated`` instead, at the same step as JaxMARL ends the episode (MPE: ``max_steps + 1``
steps, as ``done`` is checked before the step counter is incremented), so that return
estimators bootstrap from the final observation instead of treating it as terminal.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from evorl.config.env import checked_env_name, import_env_package
from evorl.envs.multi_agent import MultiAgentVectorEnv, homogeneous
from evorl.envs.spaces import Box, Discrete

#: The step limit a JaxMARL env is built with when evorl applies the time limit itself.
UNREACHED_STEPS = 2**30


def jaxmarl_env_names() -> list[str]:
    return list(import_env_package("jaxmarl").registered_envs)


def _convert_space(space, what: str):
    kind = type(space).__name__
    if kind == "Discrete":
        return Discrete(int(space.n))
    if kind == "Box":
        shape = tuple(space.shape)
        return Box(np.broadcast_to(np.asarray(space.low, np.float32), shape),
                   np.broadcast_to(np.asarray(space.high, np.float32), shape))
    raise ValueError(f"JaxMARL {what} space {space!r} is not supported (Box and Discrete are).")


def _make_or_none(jaxmarl, env_name: str, env_kwargs: dict):
    """``jaxmarl.make(env_name, **env_kwargs)``, or None where the env refuses a keyword."""
    try:
        return jaxmarl.make(env_name, **env_kwargs)
    except TypeError:
        return None


class JaxMARLEnv(MultiAgentVectorEnv):
    """A JaxMARL environment (``jaxmarl.make(env_name, **env_kwargs)``); observations float32
    ``[n_agents, obs_dim]``. ``episode_length`` None: the env's own (MPE: ``max_steps + 1``)."""

    typed_keys = True  # JaxMARL calls jax.random on the key it is given

    def __init__(self, env_name: str, num_envs: int, episode_length: int | None = None,
                 reward_scale: float = 1.0, action_repeat: int = 1, **env_kwargs):
        jaxmarl = import_env_package("jaxmarl")
        self.env_name = checked_env_name("jaxmarl", env_name, list(jaxmarl.registered_envs))
        env = jaxmarl.make(self.env_name, **env_kwargs)
        own_limit = getattr(env, "max_steps", None)
        default_length = UNREACHED_STEPS if own_limit is None else int(own_limit) + 1
        if own_limit is not None and "max_steps" not in env_kwargs:
            unlimited = _make_or_none(jaxmarl, self.env_name, {**env_kwargs, "max_steps": UNREACHED_STEPS})
            if getattr(unlimited, "max_steps", None) == UNREACHED_STEPS:
                env = unlimited
        self._env = env
        self.agents = list(env.agents)
        super().__init__(num_envs, default_length if episode_length is None else episode_length,
                         reward_scale, action_repeat)
        obs_space = homogeneous(self.env_name, self.agents, [
            _convert_space(env.observation_space(a), "observation") for a in self.agents], "observation")
        action_space = homogeneous(self.env_name, self.agents, [
            _convert_space(env.action_space(a), "action") for a in self.agents], "action")
        self._set_agent_spaces(len(self.agents), obs_space, action_space)

    def _stack(self, per_agent: dict) -> jnp.ndarray:
        return jnp.stack([jnp.asarray(per_agent[a], jnp.float32) for a in self.agents])

    def _reset_one(self, key):
        obs, state = self._env.reset(key)
        return self._stack(obs), state

    def _step_one(self, key, backend_state, action):
        actions = {a: action[i] for i, a in enumerate(self.agents)}
        obs, state, rewards, dones, _ = self._env.step_env(key, backend_state, actions)
        return self._stack(obs), state, self._stack(rewards), dones["__all__"]

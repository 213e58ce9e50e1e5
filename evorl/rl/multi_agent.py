"""What the multi-agent agents (IPPO / MAPPO, MATD3 / MADDPG) share: networks applied over the
agents' axis of ``[..., n_agents, F]`` inputs, with one set of parameters for all agents or one
per agent (a leading agent axis on the parameters), the agents' one-hot ids appended to what
the networks read, and the global state a centralised critic reads for each agent."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evorl.envs.multi_agent import MultiAgentVectorEnv
from evorl.envs.spaces import Box


def unbounded_box(size: int) -> Box:
    """``Box [size]`` without bounds: what a network of the agents reads (an observation with
    ids appended, the global state) declared to the network builders."""
    return Box(np.full((size,), -np.inf, np.float32), np.full((size,), np.inf, np.float32))


def with_agent_ids(x: jax.Array, num_agents: int) -> jax.Array:
    """``x [..., n_agents, F]`` with each agent's one-hot id appended: ``[..., n_agents, F + n_agents]``."""
    ids = jnp.broadcast_to(jnp.eye(num_agents, dtype=x.dtype), x.shape[:-1] + (num_agents,))
    return jnp.concatenate([x, ids], axis=-1)


def global_state_per_agent(obs: jax.Array) -> jax.Array:
    """What a centralised critic reads for each agent: the global state of ``obs [..., n_agents,
    obs_dim]`` (:meth:`~evorl.envs.multi_agent.MultiAgentVectorEnv.global_state`) repeated on the
    agents' axis, ``[..., n_agents, n_agents * obs_dim]``."""
    state = MultiAgentVectorEnv.global_state(obs)  # [..., n_agents * obs_dim]
    return jnp.broadcast_to(state[..., None, :], obs.shape[:-1] + state.shape[-1:])


def init_per_agent(init: Callable[[jax.Array], Any], key: jax.Array, num_agents: int) -> Any:
    """One set of parameters per agent, each from its own key: leaves ``[n_agents, ...]``."""
    return jax.vmap(init)(jax.random.split(key, num_agents))


def apply_over_agents(apply: Callable[..., jax.Array], params: Any, *inputs: jax.Array, share_parameters: bool,
                      agent_axis: int) -> jax.Array:
    """``apply(params, *inputs)`` on inputs ``[..., n_agents, F]``, the agents' axis of the output
    at ``agent_axis``: one set of parameters for all agents (``apply`` broadcasts over the
    agents' axis), or agent ``i``'s parameters ``params[i]`` on ``inputs[..., i, :]``."""
    if share_parameters:
        return apply(params, *inputs)
    out = jax.vmap(apply)(params, *(jnp.moveaxis(x, -2, 0) for x in inputs))  # [n_agents, ...]
    return jnp.moveaxis(out, 0, agent_axis)

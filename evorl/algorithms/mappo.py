"""IPPO and MAPPO: PPO for the agents of a multi-agent env (de Witt et al., 2020; Yu et al.,
2022), on the one on-policy engine with PPO's loss.

The agents' axis rides along the batch: observations ``[..., n_agents, obs_dim]``, actions,
log-probabilities, values and advantages ``[..., n_agents]``; GAE runs per agent (the agents
folded into the environments, all sharing the env's ``terminated`` / ``truncated``), and
:class:`~evorl.algorithms.ppo.PPOAgent`'s loss averages over the ``[N, n_agents]`` minibatch as
it averages over ``[N]``, so IPPO with shared parameters is PPO on the agent-folded batch.

* ``share_parameters``: one actor and one critic for all agents (optionally told which agent
  they act for by a one-hot ``agent_ids`` appended to their input), or one per agent
  (parameters with a leading agent axis, applied with ``vmap``; the loss is then the mean
  over agents of each agent's PPO loss, each agent's parameters getting ``1/n_agents`` of its
  own loss's gradient).
* ``centralised_critic`` (MAPPO): the critic reads the global state, all agents'
  observations concatenated (:meth:`~evorl.envs.multi_agent.MultiAgentVectorEnv.global_state`,
  JaxMARL's MAPPO ``world_state`` for MPE), the actors their own observations. IPPO's critic
  reads the agent's own observation.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from evorl.algorithms.ppo import PPOAgent, PPOHParams
from evorl.config.agents import check_ippo_options, check_mappo_critic, check_multi_agent_obs
from evorl.engine.on_policy_workflow import OnPolicyWorkflow
from evorl.envs.spaces import Box, Space
from evorl.rl.actor_critic import NetworkFactory, build_actor_critic, make_actor_critic_networks
from evorl.rl.agent import hparams_as_arrays
from evorl.rl.algorithm import ON_POLICY, Algorithm
from evorl.rl.multi_agent import (
    apply_over_agents, global_state_per_agent, init_per_agent, unbounded_box, with_agent_ids,
)
from evorl.rl.gae import compute_gae


@dataclass(frozen=True, eq=False)
class MultiAgentPPOAgent(PPOAgent):
    """PPO's agent over an agent axis (see the module docstring). ``obs_space`` is the env's
    stacked ``Box [n_agents, obs_dim]``, ``action_space`` one agent's."""

    #: The agents of the env (declared by the factory from the stacked observation space).
    num_agents: int = 1
    #: One actor and one critic for all agents; false: one per agent (a leading agent axis on the parameters).
    share_parameters: bool = True
    #: Append each agent's one-hot id to what its actor and critic read.
    agent_ids: bool = False
    #: The critic reads the global state, all agents' observations concatenated (MAPPO).
    centralised_critic: bool = False

    # --- inputs -------------------------------------------------------------------
    def _with_ids(self, x: jax.Array) -> jax.Array:
        """``x [..., n_agents, F]`` with each agent's one-hot id appended: ``[..., n_agents, F + n_agents]``."""
        return with_agent_ids(x, self.num_agents) if self.agent_ids else x

    def actor_inputs(self, obs: jax.Array) -> jax.Array:
        """``[..., n_agents, F_actor]``: each agent's observation (and id)."""
        return self._with_ids(obs)

    def critic_inputs(self, obs: jax.Array) -> jax.Array:
        """``[..., n_agents, F_critic]``: MAPPO's the global state for every agent (and its
        id), IPPO's the agent's own observation (and id)."""
        if not self.centralised_critic:
            return self._with_ids(obs)
        return self._with_ids(global_state_per_agent(obs))  # [..., n_agents, n_agents * obs_dim (+ n_agents)]

    def _apply(self, network, params, x: jax.Array, agent_axis: int) -> jax.Array:
        """``network`` on ``x [..., n_agents, F]``, the agent axis of the output at ``agent_axis``:
        one set of parameters for all, or agent ``i``'s parameters (``params[i]``) on ``x[..., i, :]``."""
        return apply_over_agents(network.apply, params, x, share_parameters=self.share_parameters,
                                 agent_axis=agent_axis)

    # --- networks -----------------------------------------------------------------
    def policy_output(self, agent_state, obs):
        return self._apply(self.policy_network, agent_state.params["policy"], self.actor_inputs(obs), -2)

    def values(self, agent_state, obs):
        return self._apply(self.value_network, agent_state.params["value"], self.critic_inputs(obs), -1)

    def unroll(self, agent_state, trajectory):
        return (self.policy_output(agent_state, trajectory.obs), self.values(agent_state, trajectory.obs),
                self.values(agent_state, trajectory.next_obs))

    def init(self, key):
        if self.share_parameters:
            return super().init(key)
        params = init_per_agent(lambda k: PPOAgent.init(self, k).params, key, self.num_agents)
        return super().init(key).replace(params=params, hparams=hparams_as_arrays(self.default_hparams()))

    # --- learning -----------------------------------------------------------------
    def compute_targets(self, agent_state, trajectory):
        """GAE per agent ``[T, B, n_agents]``, the agents folded into the environments."""
        hp = agent_state.hparams
        _, values, next_values = self.unroll(agent_state, trajectory)  # [T, B, n_agents] each
        shape = trajectory.rewards.shape  # [T, B, n_agents]
        fold = lambda x: x.reshape(shape[0], -1)  # noqa: E731  [T, B * n_agents]
        shared = lambda d: fold(jnp.broadcast_to(d[..., None], shape))  # noqa: E731  the env's done, per agent
        advantages, returns = compute_gae(fold(trajectory.rewards), fold(values), fold(next_values),
                                          shared(trajectory.terminated), shared(trajectory.truncated),
                                          hp.gamma, hp.gae_lambda)
        extras = {**trajectory.extras, "advantages": advantages.reshape(shape), "returns": returns.reshape(shape),
                  "values": values}
        return trajectory.replace(extras=extras)


def make_mlp_ippo_agent(
    action_space: Space,
    obs_space: Box | None = None,
    share_parameters: bool = True,
    agent_ids: bool = False,
    centralised_critic: bool = False,
    normalize_gae: bool = True,
    clip_epsilon: float = 0.2,
    value_clip_epsilon: float | None = None,
    vf_coef: float = 0.5,
    ent_coef: float = 0.01,
    kl_coef: float = 0.0,
    target_kl: float | None = None,
    gamma: float = 0.99,
    gae_lambda: float = 0.95,
    network_factory: NetworkFactory | None = None,
    **network_options,
) -> MultiAgentPPOAgent:
    """An IPPO agent (:class:`MultiAgentPPOAgent`) for the agents of a multi-agent env:
    ``action_space`` one agent's, ``obs_space`` the env's stacked ``Box [n_agents, obs_dim]``.
    ``share_parameters``, ``agent_ids``, ``centralised_critic`` (MAPPO): see the module
    docstring; the PPO keys and ``network_options`` as :func:`~evorl.algorithms.ppo.make_mlp_ppo_agent`'s."""
    check_multi_agent_obs(obs_space, None if obs_space is None else obs_space.shape, "make_mlp_ippo_agent")
    check_ippo_options(network_options)
    num_agents, obs_dim = obs_space.shape
    ids = num_agents if agent_ids else 0
    actor_space = unbounded_box(obs_dim + ids)
    critic_space = unbounded_box(num_agents * obs_dim + ids) if centralised_critic else actor_space
    factory = network_factory or make_actor_critic_networks

    def networks(action_space, _, options):
        return factory(action_space, actor_space, options)[0], factory(action_space, critic_space, options)[1]

    hparams = PPOHParams(gamma=gamma, gae_lambda=gae_lambda, clip_epsilon=clip_epsilon,
                         value_clip_epsilon=value_clip_epsilon, vf_coef=vf_coef, ent_coef=ent_coef,
                         kl_coef=kl_coef, target_kl=target_kl).validated()
    return build_actor_critic(MultiAgentPPOAgent, "make_mlp_ippo_agent", action_space, obs_space, networks,
                              network_options, hparams, normalize_gae=normalize_gae,
                              stops_early=target_kl is not None, num_agents=num_agents,
                              share_parameters=share_parameters, agent_ids=agent_ids,
                              centralised_critic=centralised_critic)


def make_mlp_mappo_agent(action_space: Space, obs_space: Box | None = None, **options) -> MultiAgentPPOAgent:
    """A MAPPO agent: :func:`make_mlp_ippo_agent` with ``centralised_critic=True``."""
    return make_mlp_ippo_agent(action_space, obs_space, **{"centralised_critic": True, **options})


IPPO = Algorithm("IPPO", make_mlp_ippo_agent, PPOHParams, ON_POLICY)


def _mappo_agent_validate(self, where: str) -> None:
    """MAPPO's critic is centralised: without it the run is IPPO's, and would be labelled MAPPO."""
    base = getattr(IPPO.agent_config_cls, "validate", None)
    if base is not None:
        base(self, where)
    check_mappo_critic(self.centralised_critic, where)


#: IPPO's agent with ``agent.centralised_critic`` true (and refused false).
MAPPO = dataclasses.replace(IPPO, label="MAPPO", agent_section=dataclasses.make_dataclass(
    "MAPPOAgentConfig", [("centralised_critic", bool, dataclasses.field(default=True))],
    bases=(IPPO.agent_config_cls,), frozen=True, namespace={"validate": _mappo_agent_validate}))


class IPPOWorkflow(OnPolicyWorkflow):
    """IPPO (de Witt et al., 2020) on a multi-agent env (``env_type: jaxmarl``): each agent's
    actor and critic read its own observation."""

    algorithm = IPPO
    multi_agent = True


class MAPPOWorkflow(IPPOWorkflow):
    """MAPPO (Yu et al., 2022): IPPO whose critic reads the global state (``agent.centralised_critic``
    true)."""

    algorithm = MAPPO


#: The ``agent:`` config sections of IPPO and MAPPO (derived from ``make_mlp_ippo_agent``).
IPPOAgentConfig = IPPO.agent_config_cls
MAPPOAgentConfig = MAPPO.agent_config_cls

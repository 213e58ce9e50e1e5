r"""MATD3 (Ackermann et al., 2019) and MADDPG (Lowe et al., 2017): TD3 and DDPG for the agents
of a multi-agent env with continuous actions, on the one off-policy engine with TD3's loss.

Decentralised actors, centralised critics. Agent :math:`i` acts with :math:`\mu_i(o_i)` from
its own observation; its critics :math:`Q_{i,k}(s, a_1, \dots, a_n)` read the global state
:math:`s` (all agents' observations concatenated,
:meth:`~evorl.envs.multi_agent.MultiAgentVectorEnv.global_state`) and every agent's action.
The replay buffer stores the joint transition (observations ``[n_agents, obs_dim]``, actions
``[n_agents, d]``, each agent's n-step reward sum ``[n_agents]`` and the discount the agents
share, truncation bootstrapped as for one agent: :func:`evorl.rl.replay.n_step_transitions`).
Each gradient step fits every agent's critics to TD3's target with its own reward,

.. math::
    y_i = R_i + D \min_k \bar Q_{i,k}\big(s', \tilde a'_1, \dots, \tilde a'_n\big), \qquad
    \tilde a'_j = \mathrm{clip}\big(\bar\mu_j(o'_j) + \mathrm{clip}(\epsilon_j, -c, c), -1, 1\big),

and every ``policy_delay`` steps moves agent :math:`i`'s actor up its own first critic with
the other agents' actions from the buffer (MADDPG's decentralised policy gradient):

.. math::
    \max_\phi \; \frac{1}{n} \sum_i Q_{i,1}\big(s, a_1, \dots, \mu_{\phi,i}(o_i), \dots, a_n\big).

The losses are :class:`~evorl.algorithms.td3.TD3Agent`'s; this agent supplies the actions and
critics over the agents' axis (``actor_actions`` ``[..., n_agents, d]``, ``q_values``
``[C, ..., n_agents]``) and the policy gradient's joint actions (``policy_q``).

* ``share_parameters``: one actor and one critic ensemble for all agents (each told which
  agent it serves by a one-hot id when ``agent_ids``; without ids every agent's critic reads
  the same input and estimates the agents' mean value), or one per agent (a leading agent
  axis on the parameters, as IPPO's).
* MADDPG is the same agent with one critic, no target smoothing and no delay (DDPG's).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from evorl.algorithms.td3 import DDPG, TD3, DDPGHParams, TD3Agent, TD3HParams
from evorl.config import parse_section
from evorl.config.agents import (
    check_matd3_action_space, check_matd3_normalize_obs, check_multi_agent_obs, check_policy_delay,
)
from evorl.engine.off_policy_workflow import OffPolicyWorkflow
from evorl.envs.spaces import Box, Space
from evorl.rl.continuous_control import (
    ContinuousNetworkFactory, ContinuousNetworkOptions, ContinuousQAgent, check_options, make_deterministic_actor,
    make_q_ensemble,
)
from evorl.rl.multi_agent import (
    apply_over_agents, global_state_per_agent, init_per_agent, unbounded_box, with_agent_ids,
)
from evorl.rl.q_targets import Transition


@dataclass(frozen=True, eq=False)
class MATD3Agent(TD3Agent):
    """TD3's agent over an agent axis (see the module docstring). ``obs_space`` is the env's
    stacked ``Box [n_agents, obs_dim]``, ``action_space`` one agent's."""

    #: The agents of the env (declared by the factory from the stacked observation space).
    num_agents: int = 1
    #: One actor and one critic ensemble for all agents; false: one per agent.
    share_parameters: bool = True
    #: Append each agent's one-hot id to what its actor and critics read.
    agent_ids: bool = False

    @property
    def action_shape(self) -> tuple[int, ...]:
        return (self.num_agents, self.action_dim)

    def _with_ids(self, x: jax.Array) -> jax.Array:
        return with_agent_ids(x, self.num_agents) if self.agent_ids else x

    def _over_agents(self, network, params, *inputs: jax.Array, agent_axis: int) -> jax.Array:
        return apply_over_agents(network.apply, params, *inputs, share_parameters=self.share_parameters,
                                 agent_axis=agent_axis)

    def actor_actions(self, agent_state, actor_params, obs):
        """Each agent's greedy action ``[..., n_agents, d]`` from its observation ``obs [..., n_agents, obs_dim]``."""
        return self._over_agents(self.actor, actor_params, self._with_ids(obs), agent_axis=-2)

    def critic_inputs(self, obs: jax.Array) -> jax.Array:
        """What agent ``i``'s critics read beside the actions: ``[..., n_agents, n_agents * obs_dim
        (+ n_agents)]``, the global state for every agent (and its id)."""
        return self._with_ids(global_state_per_agent(obs))

    def centralised_q(self, critic_params, obs: jax.Array, joint_actions: jax.Array) -> jax.Array:
        """The critics ``[C, ..., n_agents]``: agent ``i``'s on the global state of ``obs [..., n_agents,
        obs_dim]`` and the joint action it is given, ``joint_actions[..., i, :]`` (``[..., n_agents,
        n_agents * d]``, agent 0's action first)."""
        return self._over_agents(self.critic, critic_params, self.critic_inputs(obs), joint_actions, agent_axis=-1)

    def q_values(self, agent_state, critic_params, obs, action):
        """Every agent's critics ``[C, ..., n_agents]`` on the global state and the joint action
        ``action [..., n_agents, d]``."""
        joint = action.reshape(action.shape[:-2] + (-1,))  # [..., n_agents * d]
        joint = jnp.broadcast_to(joint[..., None, :], action.shape[:-2] + (self.num_agents, joint.shape[-1]))
        return self.centralised_q(critic_params, obs, joint)

    def policy_q(self, agent_state, batch: Transition, actions: jax.Array) -> jax.Array:
        """``[N, n_agents]``: agent ``i``'s first critic with its own action ``actions[:, i]`` and the
        other agents' from the buffer (``batch.action``)."""
        own = jnp.eye(self.num_agents, dtype=bool)[:, :, None]  # [n_agents (critic), n_agents (action), 1]
        joint = jnp.where(own, actions[..., None, :, :], batch.action[..., None, :, :])  # [N, n_agents, n_agents, d]
        joint = joint.reshape(joint.shape[:-2] + (-1,))  # [N, n_agents, n_agents * d]
        return self.centralised_q(agent_state.params["critic"], batch.obs, joint)[0]

    def init(self, key):
        if self.share_parameters:
            return super().init(key)
        params = init_per_agent(lambda k: ContinuousQAgent.init(self, k).params, key, self.num_agents)
        return super().init(key).replace(params=params)


def build_matd3_agent(action_space: Space, obs_space: Box | None, hparams: TD3HParams, num_critics: int,
                      policy_delay: int, share_parameters: bool, agent_ids: bool,
                      network_factory: ContinuousNetworkFactory | None, network_options: dict,
                      factory: str) -> MATD3Agent:
    """The agent of :func:`make_mlp_matd3_agent` / :func:`make_mlp_maddpg_agent`: one agent's
    actor on its observation (and id), the critics on the global state (and id) and the joint
    action, each refused input a one-line ConfigError."""
    check_multi_agent_obs(obs_space, None if obs_space is None else obs_space.shape, factory)
    check_matd3_action_space(isinstance(action_space, Box), action_space, factory)
    options = parse_section(ContinuousNetworkOptions, network_options, "agent")
    check_matd3_normalize_obs(options.normalize_obs, factory)
    num_agents, obs_dim = obs_space.shape
    ids = num_agents if agent_ids else 0
    actor_space, critic_space = unbounded_box(obs_dim + ids), unbounded_box(num_agents * obs_dim + ids)
    action_dim = check_options(action_space, actor_space, options, factory)
    joint_action_space = Box(np.tile(action_space.low.reshape(-1), num_agents),
                             np.tile(action_space.high.reshape(-1), num_agents))
    check_policy_delay(policy_delay)
    if network_factory is None:
        actor = make_deterministic_actor(actor_space, action_dim, options.actor_hidden_layer_sizes, options.activation)
        critic = make_q_ensemble(critic_space, num_agents * action_dim, options.critic_hidden_layer_sizes,
                                 options.activation, num_critics)
    else:
        actor = network_factory(action_space, actor_space, options)[0]
        critic = network_factory(joint_action_space, critic_space, options)[1]
    return MATD3Agent(action_space=action_space, obs_space=obs_space, actor=actor, critic=critic,
                      hparams_defaults=hparams.validated(), policy_delay=policy_delay, num_agents=num_agents,
                      share_parameters=share_parameters, agent_ids=agent_ids)


def make_mlp_matd3_agent(action_space: Space, obs_space: Box | None = None, share_parameters: bool = True,
                         agent_ids: bool = False, exploration_noise: float = 0.1, target_noise: float = 0.2,
                         target_noise_clip: float = 0.5, policy_delay: int = 2, gamma: float = 0.99,
                         tau: float = 0.005, network_factory: ContinuousNetworkFactory | None = None,
                         **network_options) -> MATD3Agent:
    """A MATD3 agent (:class:`MATD3Agent`) for the agents of a multi-agent env: ``action_space``
    one agent's ``Box``, ``obs_space`` the env's stacked ``Box [n_agents, obs_dim]``; twin
    centralised critics per agent, TD3's smoothing and delay. ``share_parameters``,
    ``agent_ids``: see the module docstring; the TD3 keys and ``network_options``
    (:class:`~evorl.rl.continuous_control.ContinuousNetworkOptions`) as
    :func:`~evorl.algorithms.td3.make_mlp_td3_agent`'s.
    A ``network_factory`` is called twice: for one agent's actor, and for the critics on
    the critic's input and the joint action space."""
    hparams = TD3HParams(gamma, exploration_noise, target_noise, target_noise_clip, tau)
    return build_matd3_agent(action_space, obs_space, hparams, 2, policy_delay, share_parameters, agent_ids,
                             network_factory, network_options, "make_mlp_matd3_agent")


def make_mlp_maddpg_agent(action_space: Space, obs_space: Box | None = None, share_parameters: bool = True,
                          agent_ids: bool = False, exploration_noise: float = 0.1, gamma: float = 0.99,
                          tau: float = 0.005, network_factory: ContinuousNetworkFactory | None = None,
                          **network_options) -> MATD3Agent:
    """A MADDPG agent: :func:`make_mlp_matd3_agent` with one critic per agent, no target
    smoothing and the actors updated every gradient step."""
    hparams = DDPGHParams(gamma, exploration_noise, tau=tau)
    return build_matd3_agent(action_space, obs_space, hparams, 1, 1, share_parameters, agent_ids, network_factory,
                             network_options, "make_mlp_maddpg_agent")


#: TD3 and DDPG for each agent of a multi-agent env.
MATD3 = dataclasses.replace(TD3, label="MATD3", agent_factory=make_mlp_matd3_agent)
MADDPG = dataclasses.replace(DDPG, label="MADDPG", agent_factory=make_mlp_maddpg_agent)


class MATD3Workflow(OffPolicyWorkflow):
    """MATD3 (Ackermann et al., 2019): TD3 for each agent of a multi-agent env with continuous
    actions (``env_type: jaxmarl``), twin centralised critics, smoothing and delayed actor updates."""

    algorithm = MATD3
    multi_agent = True
    single_agent_alternative = "TD3Workflow"


class MADDPGWorkflow(OffPolicyWorkflow):
    """MADDPG (Lowe et al., 2017): DDPG for each agent of a multi-agent env with continuous
    actions (``env_type: jaxmarl``), one centralised critic per agent, no smoothing or delay."""

    algorithm = MADDPG
    multi_agent = True
    single_agent_alternative = "DDPGWorkflow"


__all__ = ["MADDPG", "MADDPGWorkflow", "MATD3", "MATD3Agent", "MATD3Workflow", "build_matd3_agent",
           "make_mlp_maddpg_agent", "make_mlp_matd3_agent"]

"""Deep Q-Networks (Mnih et al., 2015) with double Q-learning (van Hasselt et al., 2016),
n-step targets and a target network, trained by :class:`~evorl.engine.off_policy_workflow.OffPolicyWorkflow`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from evorl import hardware
from evorl.config import parse_section
from evorl.config.agents import check_dqn_action_space, check_obs_space_given, check_q_network_options
from evorl.config.hparams import check_dqn
from evorl.engine.off_policy_workflow import OffPolicyWorkflow
from evorl.envs.spaces import Box, Discrete, Space
from evorl.networks import IMAGE_NETWORKS, MLP, NETWORKS, Network, conv_channels_for, get_activation
from evorl.rl.agent import Agent, AgentState, hparams_as_arrays
from evorl.rl.algorithm import OFF_POLICY, Algorithm
from evorl.rl.off_policy import UpdateGroup
from evorl.rl.q_targets import Transition, double_q_targets


@struct.dataclass
class DQNHParams:
    """DQN's hyperparameters, float32 data in the compiled program: a population may give
    each agent its own value of any field (``agent.<field>``; ``gamma`` is ``training.gamma``)."""

    #: The discount :math:`\gamma` (``training.gamma``).
    gamma: float
    #: Exploration rate at env step 0 (after the warm-up).
    epsilon_start: float
    #: Exploration rate from ``epsilon_decay_steps`` env steps on.
    epsilon_end: float
    #: Env steps (per agent) over which epsilon decays linearly from start to end.
    epsilon_decay_steps: float
    #: Huber loss with this threshold (null: half the squared TD error).
    huber_delta: float | None
    #: Polyak coefficient of a target update (``training.tau``; 1: a copy).
    tau: float = 1.0

    def validated(self) -> "DQNHParams":
        check_dqn(self)
        return self


def epsilon_schedule(hp: DQNHParams, env_steps: jax.Array) -> jax.Array:
    """Linear from ``epsilon_start`` at step 0 to ``epsilon_end`` at ``epsilon_decay_steps``, then flat."""
    frac = jnp.clip(env_steps.astype(jnp.float32) / hp.epsilon_decay_steps, 0.0, 1.0)
    return hp.epsilon_start + frac * (hp.epsilon_end - hp.epsilon_start)


@dataclass(frozen=True)
class QNetworkOptions:
    """The network keywords of ``make_mlp_dqn_agent`` (``agent:`` keys)."""

    #: Hidden layer widths of the Q-network (after the torso, for a CNN).
    q_hidden_layer_sizes: tuple[int, ...] = (64, 64)
    #: Hidden layer activation (``relu``, ``tanh``, ...).
    activation: str = "relu"
    #: The torso: ``mlp``, or for image observations ``cnn`` (MinAtar) or ``nature_cnn`` (Atari).
    network: str = "mlp"
    #: Normalise observations by their running mean and std (updated every iteration from the
    #: rollout; the buffer keeps raw observations).
    normalize_obs: bool = False


def make_q_network(action_space: Discrete, obs_space: Box, options: QNetworkOptions) -> Network:
    """``Q(s, .)``: ``apply(params, obs [..., *obs_shape]) -> [..., num_actions]``."""
    module = MLP(tuple(options.q_hidden_layer_sizes), action_space.n, options.activation, head_scale=1.0,
                 obs_ndim=len(obs_space.shape), conv_channels=conv_channels_for(options.network, obs_space),
                 nature_cnn=options.network == "nature_cnn")
    dummy = jnp.zeros((1,) + obs_space.shape, jnp.float32)
    return Network(init=lambda key: module.init(key, dummy), apply=module.apply)


@dataclass(frozen=True)
class EpsilonGreedy:
    """The behaviour policy: a uniformly random action with probability ``epsilon`` (a traced
    scalar), else the greedy one. The rollout acts with it as with an agent."""

    agent: "DQNAgent"
    epsilon: jax.Array
    recurrent = False

    @property
    def metrics(self) -> dict:
        return {"epsilon": self.epsilon}

    def initial_policy_state(self, num_envs: int) -> None:
        return None

    def policy_step(self, agent_state, policy_state, obs, keys, greedy=False):
        greedy_actions = self.agent.evaluate_actions(agent_state, obs)  # [B]
        if greedy:
            return greedy_actions, {}, policy_state
        explore_keys, action_keys = jnp.moveaxis(jax.vmap(jax.random.split)(keys), 1, 0)  # [B] each
        explore = jax.vmap(jax.random.uniform)(explore_keys) < self.epsilon
        random_actions = jax.vmap(lambda k: jax.random.randint(k, (), 0, self.agent.action_space.n))(action_keys)
        return jnp.where(explore, random_actions, greedy_actions), {}, policy_state

    def to_env_action(self, actions):
        return actions


@dataclass(frozen=True, eq=False)
class DQNAgent(Agent):
    r"""A Q-network over a discrete action space, trained on replayed (n-step) transitions with

    .. math::
        L = \mathbb{E}\big[\ell(Q(s, a) - y)\big], \qquad
        y = R + D\, \bar Q(s', \arg\max_{a'} Q(s', a'))

    (``double_q``; else :math:`y = R + D \max_{a'} \bar Q(s', a')`), :math:`\bar Q` the target
    network, :math:`R, D` the transition's discounted reward sum and bootstrap discount
    (:func:`evorl.rl.replay.n_step_transitions`), :math:`\ell` Huber with ``huber_delta`` or
    :math:`\tfrac12 x^2`. It acts epsilon-greedily (:meth:`behaviour`) and evaluates greedily.
    """

    action_space: Discrete
    obs_space: Box
    q_network: Network
    #: Double DQN: the online network picks the next action, the target network values it.
    double_q: bool = True
    normalize_obs: bool = False
    hparams_defaults: Any = None

    def init(self, key: jax.Array) -> AgentState:
        return AgentState(params={"q": self.q_network.init(key)}, obs_stats=self.init_obs_statistics(),
                          hparams=hparams_as_arrays(self.hparams_defaults))

    #: The parameters with a target network (the bootstrap values' network).
    target_keys = ("q",)

    @property
    def update_groups(self) -> tuple[UpdateGroup, ...]:
        """One gradient step updates the Q-network by :meth:`loss`."""
        return (UpdateGroup("q", self.loss),)

    def default_hparams(self):
        return self.hparams_defaults

    def q_values(self, agent_state: AgentState, params: Any, obs: jax.Array) -> jax.Array:
        """``Q(obs, .)`` ``[..., num_actions]`` with the parameters ``params`` (online or target),
        observations normalised by ``agent_state``'s statistics (when it keeps them)."""
        return self.q_network.apply(params["q"], self.normalized_obs(agent_state, obs))

    def evaluate_actions(self, agent_state, obs):
        return jnp.argmax(self.q_values(agent_state, agent_state.params, obs), axis=-1).astype(jnp.int32)

    def compute_actions(self, agent_state, obs, key):
        """Epsilon-greedy at the end of the schedule (``epsilon_end``), for one observation."""
        actions, extras, _ = EpsilonGreedy(self, agent_state.hparams.epsilon_end).policy_step(
            agent_state, None, obs[None], key[None])
        return actions[0], extras

    def behaviour(self, agent_state: AgentState, env_steps: jax.Array, random_actions: jax.Array) -> EpsilonGreedy:
        """How the agent acts in training after ``env_steps`` env steps: epsilon-greedy on the
        schedule (:func:`epsilon_schedule`), uniformly at random while ``random_actions``."""
        epsilon = jnp.where(random_actions, 1.0, epsilon_schedule(agent_state.hparams, env_steps))
        return EpsilonGreedy(self, epsilon)

    def loss(self, agent_state: AgentState, target_params: Any, batch: Transition, key: jax.Array):
        hp = agent_state.hparams
        q = self.q_values(agent_state, agent_state.params, batch.obs)  # [N, A]
        q_taken = hardware.take_along_last(q, batch.action)  # [N]
        q_target_next = self.q_values(agent_state, target_params, batch.next_obs)  # [N, A]
        if self.double_q:
            targets = double_q_targets(self.q_values(agent_state, agent_state.params, batch.next_obs), q_target_next,
                                       batch.reward, batch.discount)
        else:
            targets = batch.reward + batch.discount * jnp.max(q_target_next, axis=-1)
        td_error = q_taken - jax.lax.stop_gradient(targets)  # [N]
        if hp.huber_delta is None:
            loss = 0.5 * jnp.mean(jnp.square(td_error))
        else:
            abs_error = jnp.abs(td_error)
            quadratic = jnp.minimum(abs_error, hp.huber_delta)
            loss = jnp.mean(0.5 * jnp.square(quadratic) + hp.huber_delta * (abs_error - quadratic))
        metrics = {"loss": loss, "q_mean": jnp.mean(q_taken), "td_abs": jnp.mean(jnp.abs(td_error))}
        return loss, jax.lax.stop_gradient(metrics)


def make_mlp_dqn_agent(
    action_space: Space,
    obs_space: Box | None = None,
    double_q: bool = True,
    epsilon_start: float = 1.0,
    epsilon_end: float = 0.05,
    epsilon_decay_steps: float = 10_000.0,
    huber_delta: float | None = None,
    gamma: float = 0.99,
    tau: float = 1.0,
    network_factory: Any = None,
    **network_options,
) -> DQNAgent:
    """A DQN agent (see :class:`DQNAgent`) with the Q-network of ``network_factory(action_space,
    obs_space, options)`` (default :func:`make_q_network`), configured by ``network_options``,
    the keys of :class:`QNetworkOptions` (``q_hidden_layer_sizes``, ``activation``, ``network``)."""
    check_obs_space_given(obs_space, "make_mlp_dqn_agent")
    check_dqn_action_space(isinstance(action_space, Discrete), action_space)
    options = parse_section(QNetworkOptions, network_options, "agent")
    check_q_network_options(options, obs_space.shape, NETWORKS, IMAGE_NETWORKS)
    get_activation(options.activation)
    hparams = DQNHParams(gamma=gamma, epsilon_start=epsilon_start, epsilon_end=epsilon_end,
                         epsilon_decay_steps=epsilon_decay_steps, huber_delta=huber_delta, tau=tau).validated()
    q_network = (network_factory or make_q_network)(action_space, obs_space, options)
    return DQNAgent(action_space=action_space, obs_space=obs_space, q_network=q_network, double_q=double_q,
                    normalize_obs=options.normalize_obs, hparams_defaults=hparams)


DQN = Algorithm("DQN", make_mlp_dqn_agent, DQNHParams, OFF_POLICY, training_hparams=("gamma", "tau"),
                agent_options_cls=QNetworkOptions)


class DQNWorkflow(OffPolicyWorkflow):
    algorithm = DQN


#: The ``agent:`` config section of DQN (derived from ``make_mlp_dqn_agent``).
DQNAgentConfig = DQN.agent_config_cls

__all__ = ["DQN", "DQNAgent", "DQNHParams", "DQNWorkflow", "EpsilonGreedy", "double_q_targets", "epsilon_schedule",
           "make_mlp_dqn_agent", "make_q_network"]

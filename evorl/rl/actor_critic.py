"""The actor-critic agent of the on-policy algorithms (PPO, A2C, IMPALA, REINFORCE, MAPPO):
a policy network and a state-value network, how they are built from the ``agent:`` keys every
actor-critic factory shares (:class:`ActorCriticOptions`, :func:`build_actor_critic`), how
the agent acts, and the GAE targets its losses read (:meth:`ActorCriticAgent.compute_targets`).
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from evorl.envs.spaces import Box, Space
from evorl.networks import Network
from evorl.networks.distributions import make_distribution
from evorl.rl.agent import Agent, AgentState, hparams_as_arrays
from evorl.rl.gae import compute_gae
from evorl.rl.rollout import Trajectory, reset_policy_state


@dataclass(frozen=True)
class ActorCriticOptions:
    """The network keywords every actor-critic factory takes (``agent:`` keys they share).

    ``network``: the torso, "mlp", or for image observations "cnn" (MinAtar) or "nature_cnn"
    (Atari) (see :mod:`evorl.networks`).
    ``policy_distribution`` / ``state_dependent_std`` / ``init_log_std``: the Gaussian of
    ``Box`` action spaces (see :mod:`evorl.networks.distributions`); ``Discrete`` action spaces use
    the categorical. ``normalize_obs``: running mean/std normalisation of observations.
    """

    #: Hidden layer widths of the policy network (after the torso, for a CNN).
    actor_hidden_layer_sizes: tuple[int, ...] = (64, 64)
    #: Hidden layer widths of the value network.
    critic_hidden_layer_sizes: tuple[int, ...] = (64, 64)
    #: Hidden layer activation (``tanh``, ``relu``, ...).
    activation: str = "tanh"
    #: The torso: ``mlp``, or for image observations ``cnn`` (MinAtar) or ``nature_cnn`` (Atari).
    network: str = "mlp"
    #: ``Box`` actions: ``clipped_gaussian`` (sampled, then clipped to the bounds) or
    #: ``tanh_gaussian`` (squashed into them).
    policy_distribution: str = "clipped_gaussian"
    #: ``Box`` actions: the Gaussian's log std is an output of the policy network, not a parameter.
    state_dependent_std: bool = False
    #: ``Box`` actions: the initial log std of the Gaussian.
    init_log_std: float = 0.0
    #: Normalise observations by their running mean and std (updated every iteration).
    normalize_obs: bool = False
    #: Image torsos (``cnn``, ``nature_cnn``): one torso that the policy and the value heads
    #: share (trained by both losses, computed once per observation), instead of one each.
    shared_torso: bool = False
    #: A recurrent core between a shared torso and the heads: ``none``, ``gru`` or ``lstm``.
    #: The torso is the image torso, or for ``mlp`` one ``core_size`` layer; the heads are the
    #: ``*_hidden_layer_sizes`` MLPs reading the core's output. Minibatches are whole sequences.
    core: str = "none"
    #: Units of the recurrent core (and of the ``mlp`` torso's layer before it).
    core_size: int = 128


#: ``network_factory(action_space, obs_space, options) -> (policy_network, value_network)``,
#: or ``(policy_network, value_network, torso_network)`` for heads that share a torso (they
#: then read the torso's features, not the observation), or ``(policy_network, value_network,
#: torso_network, core)`` with a :class:`~evorl.networks.RecurrentCore` between the torso and
#: the heads (they read its output); the policy network's output parametrises
#: ``make_distribution(action_space, ...)``.
NetworkFactory = Callable[[Space, Box, ActorCriticOptions], tuple[Network, ...]]


def make_actor_critic_networks(action_space: Space, obs_space: Box,
                               options: ActorCriticOptions) -> tuple[Network, ...]:
    """The default :data:`NetworkFactory`: separate policy and value networks
    (:func:`~evorl.networks.make_policy_network`, :func:`~evorl.networks.make_v_network`);
    with ``shared_torso``, MLP heads over one image torso (:func:`~evorl.networks.make_torso_network`);
    with a ``core``, MLP heads over a recurrent core (:func:`~evorl.networks.make_core`) over one torso."""
    from evorl.networks import make_core, make_policy_network, make_torso_network, make_v_network

    o = options
    if o.core != "none":
        torso, features = make_torso_network(obs_space, o.network, o.activation, dense_size=o.core_size)
        core = make_core(o.core, features.shape[0], o.core_size)
        outputs = Box(low=np.full((o.core_size,), -1.0, np.float32), high=np.full((o.core_size,), 1.0, np.float32))
        policy = make_policy_network(action_space, outputs, o.actor_hidden_layer_sizes, o.activation,
                                     o.init_log_std, o.state_dependent_std)
        return policy, make_v_network(outputs, o.critic_hidden_layer_sizes, o.activation), torso, core
    if o.shared_torso:
        torso, features = make_torso_network(obs_space, o.network, o.activation)
        policy = make_policy_network(action_space, features, o.actor_hidden_layer_sizes, o.activation,
                                     o.init_log_std, o.state_dependent_std)
        return policy, make_v_network(features, o.critic_hidden_layer_sizes, o.activation), torso
    policy = make_policy_network(action_space, obs_space, o.actor_hidden_layer_sizes, o.activation,
                                 o.init_log_std, o.state_dependent_std, o.network)
    value = make_v_network(obs_space, o.critic_hidden_layer_sizes, o.activation, o.network)
    return policy, value


def check_network_options(action_space: Space, obs_space: Box, options: ActorCriticOptions) -> None:
    """Config errors for the network / policy keywords, naming the keys."""
    from evorl.config.agents import check_actor_critic_options
    from evorl.networks.distributions import GAUSSIANS
    from evorl.networks import CORES, IMAGE_NETWORKS, NETWORKS

    obs_shape = None if obs_space is None else obs_space.shape
    check_actor_critic_options(options, obs_shape, isinstance(action_space, Box), action_space, NETWORKS,
                               IMAGE_NETWORKS, CORES, tuple(GAUSSIANS))


def build_actor_critic(agent_cls: type, factory: str, action_space: Space, obs_space: Box | None,
                       network_factory: NetworkFactory | None, network_options: dict, hparams: Any,
                       **agent_fields) -> "ActorCriticAgent":
    """An :class:`ActorCriticAgent` subclass built the way every actor-critic factory builds
    it: network keywords validated (:class:`ActorCriticOptions`), networks from
    ``network_factory`` (default :func:`make_actor_critic_networks`), ``hparams`` as defaults."""
    from evorl.config import parse_section
    from evorl.config.agents import check_obs_space_given

    check_obs_space_given(obs_space, factory)
    options = parse_section(ActorCriticOptions, network_options, factory)
    check_network_options(action_space, obs_space, options)
    policy_network, value_network, *shared = (network_factory or make_actor_critic_networks)(
        action_space, obs_space, options)
    torso, core = (shared + [None, None])[:2]
    return agent_cls(
        action_space=action_space, obs_space=obs_space, policy_network=policy_network,
        value_network=value_network, torso_network=torso, core_network=core, normalize_obs=options.normalize_obs,
        policy_distribution=options.policy_distribution, hparams_defaults=hparams, **agent_fields,
    )


@dataclass(frozen=True, eq=False)
class ActorCriticAgent(Agent):
    r"""A policy network, a state-value network and optional observation normalisation.

    ``compute_targets`` computes GAE (:func:`evorl.rl.gae.compute_gae`) with
    the agent's ``gamma`` and ``gae_lambda`` hyperparameters; subclasses add the loss.

    With a ``core_network`` (a :class:`~evorl.networks.RecurrentCore`) the heads read the
    core's output :math:`y_t`, where :math:`(h_{t+1}, y_t) = \mathrm{core}(h_t, \mathrm{torso}(o_t))`
    and :math:`h_t` is reset to the initial state where an episode starts; the losses
    recompute every :math:`y_t` by unrolling the core over the stored sequence (:meth:`unroll`).
    """

    action_space: Space
    obs_space: Box
    policy_network: Network
    value_network: Network
    normalize_obs: bool = False
    #: A torso both networks read (``params["torso"]``; they then take its features), or None.
    torso_network: Network | None = None
    #: Device axis for batch statistics inside the loss (set by the workflow), or None.
    axis_name: str | None = None
    #: A recurrent core between the (shared) torso and the heads (``params["core"]``), or None.
    core_network: Any = None
    #: Gaussian for ``Box`` actions: "clipped_gaussian" or "tanh_gaussian" (see distributions).
    policy_distribution: str = "clipped_gaussian"
    #: The loss hyperparameters ``init`` puts into ``AgentState.hparams`` (the algorithm's
    #: hyperparameter dataclass).
    hparams_defaults: Any = None

    def __post_init__(self):
        object.__setattr__(self, "distribution", make_distribution(self.action_space, self.policy_distribution))

    def default_hparams(self) -> Any:
        return self.hparams_defaults

    @property
    def recurrent(self) -> bool:
        return self.core_network is not None

    @property
    def sequence_minibatches(self) -> bool:
        """A recurrent core learns from whole sequences (it unrolls along time)."""
        return self.recurrent

    def initial_policy_state(self, num_envs):
        return None if self.core_network is None else self.core_network.initial_state((num_envs,))

    def init(self, key: jax.Array) -> AgentState:
        policy_key, value_key = jax.random.split(key)
        params = {
            "policy": self.policy_network.init(policy_key),
            "value": self.value_network.init(value_key),
        }
        if self.torso_network is not None:
            params["torso"] = self.torso_network.init(jax.random.fold_in(key, 2))
        if self.core_network is not None:
            params["core"] = self.core_network.init(jax.random.fold_in(key, 3))
        return AgentState(params=params, obs_stats=self.init_obs_statistics(),
                          hparams=hparams_as_arrays(self.default_hparams()))

    # --- networks -------------------------------------------------------------------
    def features(self, agent_state: AgentState, obs: jax.Array) -> jax.Array:
        """What the policy and value networks read: the normalised observations, through the
        shared torso where there is one."""
        x = self.normalized_obs(agent_state, obs)
        return x if self.torso_network is None else self.torso_network.apply(agent_state.params["torso"], x)

    def policy_output(self, agent_state: AgentState, obs: jax.Array) -> jax.Array:
        """Distribution parameters ``[..., num_params]`` for raw observations ``obs``."""
        return self.policy_network.apply(agent_state.params["policy"], self.features(agent_state, obs))

    def values(self, agent_state: AgentState, obs: jax.Array) -> jax.Array:
        """``V(obs)`` ``[...]`` for raw observations ``obs``."""
        return self.value_network.apply(agent_state.params["value"], self.features(agent_state, obs))

    def heads(self, agent_state: AgentState, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(distribution parameters [..., num_params], values [...])`` of the heads on what they
        read ``x [..., F]`` (features, or the core's output)."""
        return (self.policy_network.apply(agent_state.params["policy"], x),
                self.value_network.apply(agent_state.params["value"], x))

    def unroll(self, agent_state: AgentState, trajectory: Trajectory) -> tuple[jax.Array, jax.Array, jax.Array]:
        r"""What the losses read: ``(distribution parameters [..., num_params], V(s_t) [...],
        V(s'_t) [...])`` for the observations and the true next observations of ``trajectory``
        (the torso, if shared, computed once per observation). Feed-forward: any batch shape
        (``[T, B]`` or shuffled ``[N]``). Recurrent: whole sequences ``[T, b]``, the core
        unrolled from the stored state (:meth:`unroll_core`); :math:`V(s'_t)` reads
        :math:`\mathrm{core}(h_{t+1}, \mathrm{torso}(s'_t))` with the state before any reset, so
        a truncated episode bootstraps from the memory it ended with."""
        if self.core_network is None:
            dist_params, values = self.heads(agent_state, self.features(agent_state, trajectory.obs))
            return dist_params, values, self.values(agent_state, trajectory.next_obs)
        _, states_after, outputs = self.unroll_core(agent_state, trajectory)  # outputs [T, b, H]
        next_features = self.features(agent_state, trajectory.next_obs)  # [T, b, F]
        _, next_outputs = self.core_network.apply(agent_state.params["core"], states_after, next_features)
        dist_params, values = self.heads(agent_state, outputs)
        return dist_params, values, self.value_network.apply(agent_state.params["value"], next_outputs)

    def unroll_core(self, agent_state: AgentState, trajectory: Trajectory) -> tuple[Any, Any, jax.Array]:
        """The recurrent core over the sequences ``trajectory [T, b]`` from the state the rollout
        stored for step 0 (``extras["policy_state"][0]``), reset to the initial state after
        every step that ended an episode. Returns ``(states acted with [T, b, ...], states
        after each step (before any reset) [T, b, ...], outputs [T, b, H])``; the first equals
        the rollout's ``extras["policy_state"]`` (tested)."""
        core = self.core_network
        features = self.features(agent_state, trajectory.obs)  # [T, b, F]
        done = trajectory.terminated | trajectory.truncated  # [T, b]
        starts = jnp.concatenate([jnp.zeros_like(done[:1]), done[:-1]])  # [T, b]: step t starts an episode
        first = jax.tree.map(lambda h: h[0], trajectory.extras["policy_state"])  # [b, ...]
        initial = core.initial_state()

        def step(state, inputs):
            x_t, start_t = inputs
            state = reset_policy_state(state, start_t, initial)
            after, y_t = core.apply(agent_state.params["core"], state, x_t)
            return after, (state, after, y_t)

        _, (states, states_after, outputs) = lax.scan(step, first, (features, starts))
        return states, states_after, outputs

    # --- acting ---------------------------------------------------------------------
    def sample_actions(self, dist_params: jax.Array, key: jax.Array) -> tuple[jax.Array, dict]:
        """Actions sampled from the policy's distribution ``dist_params`` and the extras the
        trajectory keeps (the log-probability ``logp``)."""
        actions = self.distribution.sample(dist_params, key)
        return actions, {"logp": self.distribution.log_prob(dist_params, actions)}

    def compute_actions(self, agent_state, obs, key):
        self._feed_forward_only("compute_actions")
        return self.sample_actions(self.policy_output(agent_state, obs), key)

    def evaluate_actions(self, agent_state, obs):
        self._feed_forward_only("evaluate_actions")
        return self.distribution.mode(self.policy_output(agent_state, obs))

    def policy_step(self, agent_state, policy_state, obs, keys, greedy=False):
        if self.core_network is None:
            return super().policy_step(agent_state, policy_state, obs, keys, greedy)
        next_state, outputs = self.core_network.apply(agent_state.params["core"], policy_state,
                                                      self.features(agent_state, obs))  # [B, H]
        dist_params = self.policy_network.apply(agent_state.params["policy"], outputs)  # [B, num_params]
        if greedy:
            return self.distribution.mode(dist_params), {}, next_state
        actions, extras = jax.vmap(self.sample_actions)(dist_params, keys)
        return actions, {**extras, "policy_state": policy_state}, next_state

    def _feed_forward_only(self, method: str) -> None:
        if self.core_network is not None:
            raise TypeError(f"{type(self).__name__}.{method} acts without memory; this agent has a recurrent core "
                            f"(agent.core={self.core_network.kind}): act with policy_step, which carries its state.")

    def to_env_action(self, actions):
        return self.distribution.to_env_action(actions)

    # --- learning -------------------------------------------------------------------
    def compute_targets(self, agent_state, trajectory):
        hp = agent_state.hparams
        _, values, next_values = self.unroll(agent_state, trajectory)  # [T, B] each
        advantages, returns = compute_gae(
            trajectory.rewards, values, next_values,
            trajectory.terminated, trajectory.truncated, hp.gamma, hp.gae_lambda,
        )
        extras = {**trajectory.extras, "advantages": advantages, "returns": returns, "values": values}
        return trajectory.replace(extras=extras)

"""Evolution strategies over policy parameters: one generation as a pure function.

The policy is the RL agents' actor network (:func:`~evorl.networks.make_policy_network`),
acting greedily; its parameters are flattened (``jax.flatten_util.ravel_pytree``) into the
``D``-vector the strategy searches over, a population optimiser of :mod:`evorl.rl.optimisers`
(:func:`make_search`: an evosax strategy, sep-CEM or canonical ES behind one ask/tell
interface). One generation (:func:`make_generation`), read top to bottom:

1. ``ask`` the strategy for ``P`` candidates ``x_i [P, D]``; with ``mirrored`` sampling the
   second half mirrors the first through the mean: ``x_{i + P/2} = 2 m - x_i``, i.e. pairs
   ``m +- sigma eps_i``;
2. play ``episodes_per_member`` greedy episodes with each candidate (the whole population
   vmapped; with a device axis each device plays its ``P / D`` members), all normalising
   observations with the same shared statistics;
3. gather every member's fitness, the mean episode return ``R_i``;
4. shape it (:func:`centered_rank`, ours; sep-CEM and canonical ES rank it themselves) and
   ``tell`` the strategy, which moves the mean;
5. merge all members' observations into the shared observation statistics.

The evosax strategies minimise, so they are told ``-R_i`` and our shaping is applied
with the sign each strategy's update expects (:data:`STRATEGIES`); sep-CEM and canonical ES
rank the returns with their own log-rank weights of the elites. The search runs in the
optimiser's state; the agent state holds its mean as network parameters, so greedy
evaluation, checkpoints, ``evorl-eval`` and ``evorl.load_policy`` see an ordinary agent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.flatten_util import ravel_pytree

from evorl.config.es import (  # noqa: F401  (the section is importable from here too)
    FITNESS_SHAPINGS, OPTIMIZERS, STRATEGIES, ESConfig, StrategySpec, check_objectives, import_evosax_algorithms,
)
from evorl.engine.evaluator import greedy_episodes
from evorl.envs import VectorEnv
from evorl.envs.spaces import Box, Space
from evorl.rl import metrics as M
from evorl.rl.actor_critic import ActorCriticAgent, NetworkFactory, check_network_options
from evorl.rl.agent import AgentState
from evorl.rl.algorithm import Algorithm, Family
from evorl.rl.collectives import all_gather, axis_index, psum
from evorl.rl import optimisers
from evorl.rl.evolution import centered_rank, mirror  # noqa: F401  (importable from here too)
from evorl.rl.on_policy import episode_metrics
from evorl.rl.rollout import EpisodeStats
from evorl.rl.running_statistics import merge_moments, moments_from_shifted_sums
from evorl.rl.state_roles import role_field


# --------------------------------------------------------------------------------------
# The strategies
# --------------------------------------------------------------------------------------
def make_search(es: ESConfig, num_dims: int) -> optimisers.AskTell:
    """The strategy of ``es`` over ``num_dims`` parameters as an :class:`~evorl.rl.optimisers.AskTell`."""
    if es.strategy == "SepCEM":
        return optimisers.cem(es.population_size, es.elites, es.sigma ** 2, es.eps_init, es.eps_end, es.tau_eps,
                              es.var_scale, es.mirrored)
    if es.strategy == "VanillaES":
        return optimisers.vanilla_es(es.population_size, es.elites, es.sigma, es.mirrored)
    strategy, params = make_strategy(es, num_dims)
    return optimisers.evosax_strategy(es.strategy, strategy, params, es.mirrored,
                                      learning_rate_in_state=es.spec.optimizer, fixed_std=es.spec.fixed_std)


def make_strategy(es: ESConfig, num_dims: int):
    """The evosax strategy of ``es`` over ``num_dims`` parameters, and its params (sigma set);
    the mean's optimiser holds its learning rate in its state (``optax.inject_hyperparams``)."""
    algorithms = import_evosax_algorithms()
    import optax

    spec = es.spec
    cls = getattr(algorithms, spec.evosax_name)
    kwargs: dict[str, Any] = {}
    if spec.optimizer:  # the learning rate a leaf of the optimiser's state (make_search)
        kwargs["optimizer"] = optax.inject_hyperparams(getattr(optax, es.optimizer))(learning_rate=es.learning_rate)
    if spec.evosax_name in ("Open_ES", "ARS"):
        kwargs["std_schedule"] = optax.constant_schedule(es.sigma)
    if spec.evosax_name == "Open_ES":
        kwargs["use_antithetic_sampling"] = False  # mirrored sampling is ours (mirror)
    if es.fitness_shaping == "centered_rank":
        sign = spec.shaped_sign
        kwargs["fitness_shaping_fn"] = lambda population, fitness, state, params: sign * centered_rank(fitness)
    elif es.fitness_shaping == "raw":
        sign = spec.shaped_sign
        kwargs["fitness_shaping_fn"] = lambda population, fitness, state, params: sign * fitness
    strategy = cls(population_size=es.population_size, solution=jnp.zeros((num_dims,), jnp.float32), **kwargs)
    params = strategy.default_params
    if hasattr(params, "std_init"):
        params = params.replace(std_init=jnp.asarray(es.sigma, jnp.float32))
    return strategy, params


# --------------------------------------------------------------------------------------
# The policy
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ESPolicyOptions:
    """The ``agent:`` keys of ES: the RL agents' policy network keys (no critic)."""

    actor_hidden_layer_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    network: str = "mlp"
    policy_distribution: str = "clipped_gaussian"


@dataclass(frozen=True, eq=False)
class ESAgent(ActorCriticAgent):
    """The actor of :class:`~evorl.rl.actor_critic.ActorCriticAgent` alone: ``params = {"policy": ...}``,
    greedy actions; ES optimises it without gradients, so it has no loss."""

    def init(self, key: jax.Array) -> AgentState:
        return AgentState(params={"policy": self.policy_network.init(key)}, obs_stats=self.init_obs_statistics(),
                          hparams=None)


def make_mlp_es_agent(action_space: Space, obs_space: Box, network_factory: NetworkFactory | None = None,
                      normalize_obs: bool = False, **policy_options) -> ESAgent:
    """An :class:`ESAgent` with the policy network of the RL agents (``network_factory``'s
    policy network, default :func:`~evorl.rl.actor_critic.make_actor_critic_networks`)."""
    from evorl.rl.actor_critic import ActorCriticOptions, make_actor_critic_networks

    options = ActorCriticOptions(**policy_options, critic_hidden_layer_sizes=(1,), normalize_obs=normalize_obs)
    check_network_options(action_space, obs_space, options)
    policy_network, _ = (network_factory or make_actor_critic_networks)(action_space, obs_space, options)
    return ESAgent(action_space=action_space, obs_space=obs_space, policy_network=policy_network,
                   value_network=None, normalize_obs=normalize_obs,
                   policy_distribution=options.policy_distribution)


# --------------------------------------------------------------------------------------
# One generation
# --------------------------------------------------------------------------------------
@struct.dataclass
class ESState:
    key: jax.Array
    #: The mean as the policy's parameters, and the shared observation statistics.
    agent_state: AgentState = role_field("pbt_copy")
    #: The strategy's state (:func:`make_search`): mean [D], its search distribution, its optimiser.
    search: Any = role_field("pbt_copy")
    iteration: jax.Array  # [] int32, completed generations
    #: Sums over the generations' episodes since the last PBT step (its ``fitness: train``);
    #: None without PBT (see :mod:`evorl.engine.pbt`).
    fitness_episodes: Any = role_field("pbt_keep", default=None)
    #: ``pbt.strategy: cso``: the velocity ``[H]`` of the evolving hyperparameters; None otherwise.
    pbt_velocity: Any = None


def init_es_state(agent: ESAgent, search: optimisers.AskTell, key: jax.Array,
                  hyperparameters: dict[str, Any] | None = None) -> ESState:
    """The initial state; ``hyperparameters``: values of the search's state hyperparameters
    (``{"learning_rate": [], "sigma": []}``: one run of a population's), else the config's."""
    key, agent_key, search_key = jax.random.split(key, 3)
    agent_state = agent.init(agent_key)
    flat, _ = ravel_pytree(agent_state.params)
    searched = optimisers.with_hyperparameters(search, search.init(search_key, flat), hyperparameters or {})
    return ESState(key=key, agent_state=agent_state, search=searched, iteration=jnp.zeros((), jnp.int32))


def make_generation(env: VectorEnv, agent: ESAgent, search: optimisers.AskTell, es: ESConfig,
                    axis_name: str | None = None, num_devices: int = 1) -> Callable[[ESState], tuple[ESState, dict]]:
    """One generation (see the module docstring). ``env`` holds ``episodes_per_member``
    environments; with ``axis_name`` each of the ``num_devices`` devices plays
    ``population_size / num_devices`` members and the results equal one device's."""
    pop = es.population_size
    local = pop // num_devices
    check_objectives(es.objectives, env.reward_terms, "es.objectives")
    term_index = np.asarray([env.reward_terms.index(name) for name in es.objectives], np.int32)
    weights = np.asarray(es.objective_weights, np.float32)

    def generation(state: ESState) -> tuple[ESState, dict]:
        key, ask_key, env_key, tell_key = jax.random.split(state.key, 4)
        agent_state = state.agent_state
        _, unravel = ravel_pytree(agent_state.params)
        population, asked = search.ask(ask_key, state.search)  # [P, D]
        members = jax.lax.dynamic_slice_in_dim(population, axis_index(axis_name) * local, local)  # [P/D, D]
        stats = agent_state.obs_stats
        shift = None if stats is None else stats.mean

        def play(x):  # every member on the same environment seeds (common random numbers)
            member = agent_state.replace(params=unravel(x))
            if not es.objectives:
                return greedy_episodes(env, agent, member, env_key, shift, axis_name)
            returns, lengths, sums, terms = greedy_episodes(env, agent, member, env_key, shift, axis_name,
                                                            with_terms=True)  # terms [E, T]
            return terms[:, term_index] @ weights, lengths, sums  # the weighted sums as returns

        returns, lengths, sums = jax.vmap(play)(members)  # [P/D, E]
        fitness = all_gather(jnp.mean(returns, axis=1), axis_name)  # [P] mean return per member
        searched = search.tell(tell_key, asked, population, fitness)
        agent_state = agent_state.replace(params=unravel(search.mean(searched)))
        if stats is not None:
            count, sum_d, sum_d2 = (psum(jnp.sum(x, axis=0), axis_name) for x in (sums.count, sums.sum_d, sums.sum_d2))
            agent_state = agent_state.replace(obs_stats=merge_moments(stats, *moments_from_shifted_sums(
                count, sum_d, sum_d2, shift)))
        episodes = EpisodeStats(jnp.sum(returns), jnp.sum(lengths), jnp.asarray(returns.size, jnp.float32))
        metrics = episode_metrics(episodes, axis_name)
        metrics.update(
            best_member_return=M.Metric(jnp.max(fitness), "max"),
            fitness_std=jnp.std(fitness),
            **search.metrics(searched),
        )
        state = state.replace(key=key, agent_state=agent_state, search=searched, iteration=state.iteration + 1)
        return state, metrics

    return generation


#: ES: an agent without a loss (no hyperparameters, no training key among them), its ``agent:``
#: keys the policy's, and its generation and state; ``ESWorkflow`` calls
#: ``make_generation(env, agent, search, es, axis_name, num_devices)`` and ``init_es_state``.
ES = Algorithm("ES", make_mlp_es_agent, None, Family(ESState, init_es_state, make_generation), training_hparams=(),
               agent_section=ESPolicyOptions)

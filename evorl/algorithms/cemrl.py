r"""CEM-RL (Pourchot & Sigaud, 2019): a separable cross-entropy method over the actor's
parameters, half of each generation improved by a shared TD3 critic; one generation is one
pure function, run by :class:`~evorl.algorithms.cemrl.CEMRLWorkflow` (``cfg`` below is its
``cemrl:`` section, :class:`~evorl.algorithms.cemrl.CEMRLConfig`).

**sep-CEM.** The search distribution over the flattened actor parameters ``x [D]`` is
:math:`\mathcal N(\mu, \mathrm{diag}(v))` (:class:`CEMState`). A generation samples
:math:`x_i = \mu + \sqrt{v} \odot n_i`, :math:`n_i \sim \mathcal N(0, I)`, ``i < N``; with the
``K_e`` best (elites, by fitness, best first) :math:`z_1, \dots, z_{K_e}` and the log-rank
weights :math:`\lambda_j = \log(1 + K_e) - \log j` normalised to sum to 1:

.. math::
    \mu' = \sum_j \lambda_j z_j, \qquad
    v' = c \sum_j \lambda_j (z_j - \mu)^2 + \epsilon_t, \qquad
    \epsilon_{t+1} = \tau_\epsilon \epsilon_t + (1 - \tau_\epsilon) \epsilon_{end}

(the squares around the *old* mean :math:`\mu`, the paper's eq. 2 restricted to the diagonal,
scaled by :math:`c` = ``var_scale``: by default :math:`1 / K_e` as the authors' code and every
sep-CEM we read; :math:`c = 1`, the paper's equation as printed, gives the learning actors'
starting points :math:`\sqrt{K_e}` times the spread, and on Pendulum the mean of their
elites then swung between good and poor policies from one generation to the next). The
initial variance is ``sigma_init`` in every coordinate (the paper's
:math:`\Sigma = \sigma_{init} I`).

**One generation** (:func:`make_generation`), read top to bottom:

1. sample ``N`` actors from the distribution ``[N, D]``;
2. once the buffer holds ``learning_starts`` transitions: the first ``K = num_learning``
   actors (the paper's ``N/2``) learn for ``num_updates`` gradient steps. Each step samples
   one batch per learning actor; the shared critic descends the mean over the ``K`` actors of
   TD3's critic loss (:meth:`~evorl.algorithms.td3.TD3Agent.critic_loss`: actor ``k``'s batch,
   its target actor, a copy of the actor at the generation's start, and the shared target
   critic, which lives across generations), then every ``policy_delay`` steps each
   learning actor ascends its :math:`Q_1` (:meth:`~evorl.algorithms.td3.TD3Agent.actor_loss`,
   vmapped, a fresh Adam state per actor and generation, as the authors' code) and the targets
   move by Polyak (``tau``). The schedule is fixed: ``num_updates`` critic steps per
   generation, the paper's "as many steps as the previous generation's env steps" when
   ``num_updates = N x episode_length``, which one compiled program can hold;
3. all ``N`` actors play ``episodes_per_actor`` episodes each, vmapped: a fixed rollout of
   ``episode_length`` steps per environment (an episode that ends early is followed by the
   next one, whose steps are stored too); every transition goes into the shared buffer;
4. the fitness of actor ``i`` is the mean return of its episodes that ended; the CEM update
   moves the distribution (kept as it was while the actions are uniformly random, during the
   first ``warmup_steps`` env steps).

The evaluated and checkpointed agent is TD3's, its ``actor`` the distribution's mean.
sep-CEM is the default population optimiser (``cemrl.optimiser: cem``); any other of
:mod:`evorl.rl.optimisers` (``ga``, or an evosax strategy such as ``openes``) takes its place
in steps 1 and 4: ``ask`` samples the ``N`` actors, ``tell`` is told the actors as they played
(the first ``K`` after their gradient steps), and its ``mean`` is the evaluated actor.

**The workflow.** ``CEMRLWorkflow``: CEM-RL (Pourchot & Sigaud, 2019) on the shared host loop
(``workflow_cls: evorl.workflows.CEMRLWorkflow`` with a ``cemrl:`` section, see
:class:`CEMRLConfig`).

One generation (:func:`~evorl.algorithms.cemrl.make_generation`: sample ``N`` actors, the
first ``N/2`` improved by the shared TD3 critic, all ``N`` actors' episodes vmapped into the
shared buffer, the sep-CEM update) is one iteration of the execution layer, so chunks of
``training.eval_interval`` generations compile into one program, and
:class:`~evorl.engine.host_loop.ChunkedWorkflow` runs it unchanged: health checks, greedy
evaluation of the distribution's mean actor, recorders, checkpoints (the buffer, the CEM
distribution, the critic and its Adam state are in the state, so a resumed run continues
exactly) and ``evorl.load_policy`` (the mean actor, as TD3's agent).

The logged ``step`` counts each generation's env steps, ``population_size x
episodes_per_actor x env.episode_length`` (every actor's rollout has that fixed length).
The agent is TD3's (``agent:`` takes :func:`~evorl.algorithms.td3.make_mlp_td3_agent`'s
keys); ``agent.exploration_noise`` is the noise on the population's actions during their
episodes (the paper's actors act without noise: set it to 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from jax import lax
from jax.flatten_util import ravel_pytree

from evorl.algorithms.population_rl import (
    SEARCH_TAG, TELL_TAG, PopulationRLTrainingConfig, PopulationRLWorkflow, empty_transitions,
    initial_population, make_play, make_rl_phase, mean_returns, population_algorithm, population_metrics,
    when_learning,
)
from evorl.algorithms.td3 import TD3Agent
from evorl.config.population import CEMRLConfig
from evorl.engine.rl_base import ExperimentConfig
from evorl.envs import VectorEnv
from evorl.rl import replay
from evorl.rl.agent import AgentState
from evorl.rl.evolution import CEMState, cem_init, cem_sample, cem_update, log_rank_weights, ranked  # noqa: F401
from evorl.rl.optimisers import AskTell
from evorl.rl.state_roles import role_field


# --------------------------------------------------------------------------------------
# State
# --------------------------------------------------------------------------------------
@struct.dataclass
class CEMRLState:
    key: jax.Array
    #: TD3's agent state: ``params["actor"]`` the CEM mean's actor, ``params["critic"]`` the shared critic.
    agent_state: AgentState
    #: The population optimiser's state (``cemrl.optimiser``; sep-CEM's :class:`CEMState`: mean [D], var [D], eps []).
    search: Any
    target_critic: Any
    critic_opt_state: Any
    buffer: replay.ReplayBuffer = role_field("buffer")  # the shared buffer, leaves [capacity, ...]
    iteration: jax.Array  # [] int32, completed generations


def init_cemrl_state(env: VectorEnv, agent: TD3Agent, critic_optimizer, search: AskTell, cfg: Any, hparams: Any,
                     key: jax.Array) -> CEMRLState:
    """Fresh state: TD3's initial actor as the search's mean (an optimiser that keeps a
    population starts from ``N`` actors initialised as TD3's is), an empty buffer."""
    key, agent_key = jax.random.split(key)
    agent_state = agent.init(agent_key).replace(hparams=hparams)
    flat, _ = ravel_pytree(agent_state.params["actor"])
    population = None
    if search.keeps_population:
        key, population_key = jax.random.split(key)
        population = initial_population(agent, population_key, cfg.population_size)
    example = empty_transitions(env, agent.action_dim)
    return CEMRLState(key=key, agent_state=agent_state, search=search.init(jax.random.fold_in(key, SEARCH_TAG), flat, population),
                      target_critic=agent_state.params["critic"],
                      critic_opt_state=critic_optimizer.init(agent_state.params["critic"]),
                      buffer=replay.init(example, cfg.buffer_size), iteration=jnp.zeros((), jnp.int32))


# --------------------------------------------------------------------------------------
# One generation
# --------------------------------------------------------------------------------------
def make_learn(agent: TD3Agent, optimizer, cfg: Any):
    """``learn(state, population [N, D], unravel, key) -> (critic, target_critic,
    critic_opt_state, population [N, D], metrics)``: step 2 of a generation, the first
    ``num_learning`` rows of ``population`` replaced by the trained actors (the rest as they
    were); before the buffer holds ``learning_starts`` transitions nothing moves (``lax.cond``)."""
    learners = cfg.learners
    rl_phase = make_rl_phase(agent, optimizer, cfg)

    def learn(state: CEMRLState, population: jax.Array, unravel, key):
        """Step 2: the critic and the learning actors (the first ``learners`` of ``population``)."""
        actors = jax.vmap(unravel)(population[:learners])  # leaves [K, ...]
        # each learning actor: its own target (a copy of itself) and a fresh Adam, as the authors' code
        critic, target_critic, critic_opt_state, actors, _, _, metrics = when_learning(
            rl_phase, state.buffer.size, cfg.learning_starts, state.agent_state, state.target_critic,
            state.critic_opt_state, actors, actors, optimizer.init(actors), state.buffer, key)
        trained = jax.vmap(lambda a: ravel_pytree(a)[0])(actors)  # [K, D]
        return critic, target_critic, critic_opt_state, population.at[:learners].set(trained), metrics

    return learn


def make_generation(env: VectorEnv, agent: TD3Agent, optimizer, search: AskTell, cfg: Any):
    """``generation(state) -> (state, metrics)``, one generation (module docstring) with the
    population optimiser ``search``; ``env`` holds ``episodes_per_actor`` environments, each
    actor plays them for ``episode_length`` steps."""
    num, learners = cfg.population_size, cfg.learners
    steps_per_generation = num * env.num_envs * env.episode_length
    learn = make_learn(agent, optimizer, cfg)
    play = make_play(env, agent)

    def generation(state: CEMRLState) -> tuple[CEMRLState, dict]:
        key, sample_key, learn_key, play_key = jax.random.split(state.key, 4)
        _, unravel = ravel_pytree(state.agent_state.params["actor"])
        population, asked = search.ask(sample_key, state.search)  # [N, D]
        critic, target_critic, critic_opt_state, metrics = (state.agent_state.params["critic"], state.target_critic,
                                                            state.critic_opt_state, {})
        if learners > 0:
            critic, target_critic, critic_opt_state, population, metrics = learn(state, population, unravel, learn_key)
        agent_state = state.agent_state.replace(params={**state.agent_state.params, "critic": critic})
        random_actions = state.iteration * steps_per_generation < cfg.warmup_steps
        noise = jnp.full((num,), agent_state.hparams.exploration_noise)  # [N]
        transitions, stats = play(agent_state, population, unravel, noise, random_actions, play_key)  # [N x T x E], [N]
        buffer = replay.add(state.buffer, transitions)
        fitness = mean_returns(stats)  # [N]
        told = search.tell(jax.random.fold_in(sample_key, TELL_TAG), asked, population, fitness)
        searched = jax.tree.map(lambda old, new: jnp.where(random_actions, old, new), state.search, told)
        agent_state = agent_state.replace(params={"actor": unravel(search.mean(searched)), "critic": critic})
        elites = lax.top_k(ranked(fitness), cfg.num_elites)[1]  # [K_e]
        metrics.update(population_metrics(stats, fitness, buffer))
        metrics.update(elites_from_rl=jnp.sum(elites < learners).astype(jnp.float32), **search.metrics(searched))
        state = state.replace(key=key, agent_state=agent_state, search=searched, target_critic=target_critic,
                              critic_opt_state=critic_opt_state, buffer=buffer, iteration=state.iteration + 1)
        return state, metrics

    return generation


#: The ``training:`` keys of CEM-RL: one iteration is one generation.
CEMRLTrainingConfig = PopulationRLTrainingConfig


@dataclass(frozen=True)
class CEMRLExperimentConfig(ExperimentConfig):
    cemrl: CEMRLConfig = CEMRLConfig()


CEMRL = population_algorithm("CEM-RL", CEMRLState, init_cemrl_state, make_generation)


class CEMRLWorkflow(PopulationRLWorkflow):
    """CEM-RL (see the module docstring): one agent, a population of actors inside it."""

    algorithm = CEMRL
    experiment_config_cls = CEMRLExperimentConfig


__all__ = [
    "CEMRL", "CEMRLConfig", "CEMRLExperimentConfig", "CEMRLState", "CEMRLTrainingConfig", "CEMRLWorkflow", "CEMState",
    "cem_init", "cem_sample", "cem_update", "init_cemrl_state", "log_rank_weights", "make_generation",
    "make_learn", "make_rl_phase",
]

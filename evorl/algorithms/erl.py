r"""ERL (Khadka & Tumer, 2018, "Evolution-guided policy gradient in reinforcement learning"): a
genetic population of actors and one TD3 learner sharing a replay buffer, the learner copied
into the population every ``sync_period`` generations; one generation is one pure function,
run by :class:`~evorl.algorithms.erl.ERLWorkflow` (``cfg`` below is its ``erl:`` section,
:class:`~evorl.algorithms.erl.ERLConfig`).

**The genetic algorithm** (:func:`ga_step`) over the flattened actors ``x_i [D]``, ``i < N``,
with fitness :math:`f_i` (a non-finite fitness ranks last):

1. *elitism*: the ``E = num_elites`` fittest actors are kept as they are, best first;
2. *selection*: ``N - E`` parents by tournaments (:func:`tournament_select`): each draws
   ``tournament_size`` actors uniformly with replacement and keeps the fittest;
3. *crossover*: consecutive parents ``(2j, 2j + 1)`` cross with probability
   ``crossover_prob``: each neuron (a layer's column of incoming weights and its bias,
   :func:`neuron_segments`) comes from one parent or the other with probability 1/2, the two
   children taking complementary choices (:func:`crossover`; the authors swap rows of each
   weight matrix between the parents);
4. *mutation*: each child mutates with probability ``mutation_prob`` (:func:`mutate`): a
   fraction ``mutation_frac`` of its weights :math:`w` is perturbed, each of those by
   :math:`w \leftarrow w + \mathcal N(0, (s\,|w|)^2)` with ``s = mutation_strength``, or
   ``s = super_mutation_strength`` with probability ``super_mutation_prob``, or reset to
   :math:`\mathcal N(0, 1)` with probability ``reset_prob`` (the authors' operators; their code
   mutates a fixed count of weights per matrix, here each weight is chosen independently), and
   clipped to :math:`\pm` ``weight_clip``.

**One generation** (:func:`make_generation`), read top to bottom:

1. the ``N`` actors (acting without noise) and the learner (with TD3's exploration noise
   ``agent.exploration_noise``) play ``episodes_per_actor`` episodes each, all vmapped; every
   transition goes into the shared buffer, and actor ``i``'s fitness is its mean return
   (:mod:`~evorl.algorithms.population_rl`);
2. once the buffer holds ``learning_starts`` transitions the learner takes ``num_updates``
   TD3 steps (:func:`~evorl.algorithms.population_rl.make_rl_phase` with one actor, its target
   and Adam state living across generations);
3. the genetic algorithm makes the next population (kept as it was while the actions are
   uniformly random, during the first ``warmup_steps`` env steps);
4. every ``sync_period`` generations (once learning started) the trained learner replaces the
   last child of the new population (a child, never an elite: the weakest in the authors'
   code); ``from_learner`` follows which actors descend from an injected learner (a child
   inherits its first parent's).

The genetic algorithm is the default population optimiser (``erl.optimiser: ga``); another
of :mod:`evorl.rl.optimisers` (``cem``, ``vanilla_es``, or an evosax strategy such as
``openes``) samples the ``N`` actors anew each generation, and the learner due for injection
replaces the last sample of the next generation instead of a child (``erl.injection:
sample``; with canonical ES that is EvoRL's ERL-ES, the learner recombined into the mean
when it ranks among the elites).

**ERL-EDA** (``erl.injection: mean``, EvoRL's ``ERLEDAWorkflow``): the learner due for
injection moves the search distribution's mean instead, after the optimiser's update,

.. math::
    m \leftarrow m + \beta (\theta_{RL} - m)

with :math:`\beta` = ``injection_step`` (1: the next generation is sampled around the learner,
and the distribution's own update carries over only in its other state, e.g. OpenES's Adam
moments); ``population_from_learner`` is then 1 for a generation sampled after an injection.

The evaluated and checkpointed agent is TD3's, its ``critic`` the learner's and its ``actor``
(``deploy``) the trained learner's (as EvoRL evaluates ERL), or the generation's champion, the
fittest of the ``N`` actors and the learner as they played (one noisy episode each by default:
a lucky episode can crown a poor actor, so greedy evaluations of the champion swing more).

**The workflow.** ``ERLWorkflow``: ERL (Khadka & Tumer, 2018) on the shared host loop
(``workflow_cls: evorl.workflows.ERLWorkflow`` with an ``erl:`` section, see :class:`ERLConfig`;
the generation is :func:`~evorl.algorithms.erl.make_generation`, the host side
:class:`~evorl.algorithms.population_rl.PopulationRLWorkflow`).

The learner is TD3's (``agent:`` takes :func:`~evorl.algorithms.td3.make_mlp_td3_agent`'s keys;
the paper's DDPG update is ``policy_delay: 1, target_noise: 0`` with twin critics); it explores
with ``agent.exploration_noise`` while the population acts without noise. A generation plays
``population_size + 1`` actors' episodes. The evaluated agent and ``evorl.load_policy`` act
with the trained learner (``erl.deploy: learner``) or the last generation's champion
(``erl.deploy: champion``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from jax.flatten_util import ravel_pytree

from evorl.algorithms.population_rl import (
    ASK_TAG, SEARCH_TAG, PopulationRLWorkflow, empty_transitions, initial_population, make_play,
    make_rl_phase, mean_returns, population_algorithm, population_metrics, when_learning,
)
from evorl.algorithms.td3 import TD3Agent
from evorl.config.population import ERLConfig
from evorl.engine.rl_base import ExperimentConfig
from evorl.envs import VectorEnv
from evorl.rl import replay
from evorl.rl.agent import AgentState
from evorl.rl.evolution import (  # noqa: F401  (the genetic operators, importable from here too)
    crossover, ga_step, mutate, neuron_segments, ranked, tournament_select,
)
from evorl.rl.optimisers import AskTell
from evorl.rl.state_roles import role_field


# --------------------------------------------------------------------------------------
# State
# --------------------------------------------------------------------------------------
@struct.dataclass
class ERLState:
    key: jax.Array
    #: TD3's agent state: ``params["actor"]`` the last generation's champion, ``params["critic"]`` the learner's.
    agent_state: AgentState
    #: The population optimiser's state (``erl.optimiser``; the GA's :class:`~evorl.rl.optimisers.GAState`:
    #: its actors ``[N, D]``, flat, and their parents).
    search: Any
    from_learner: jax.Array  # [N] bool, the actor descends from an injected learner
    learner_actor: Any  # the learner's actor (a pytree)
    target_actor: Any
    actor_opt_state: Any
    target_critic: Any
    critic_opt_state: Any
    buffer: replay.ReplayBuffer = role_field("buffer")  # the shared buffer, leaves [capacity, ...]
    iteration: jax.Array  # [] int32, completed generations


def init_erl_state(env: VectorEnv, agent: TD3Agent, optimizer, search: AskTell, cfg: Any, hparams: Any,
                   key: jax.Array) -> ERLState:
    """Fresh state: ``N`` actors (an optimiser that keeps a population; else the search's mean)
    and the learner initialised as TD3's actor is, an empty buffer."""
    key, agent_key, population_key = jax.random.split(key, 3)
    agent_state = agent.init(agent_key).replace(hparams=hparams)
    actor, critic = agent_state.params["actor"], agent_state.params["critic"]
    population = initial_population(agent, population_key, cfg.population_size) if search.keeps_population else None
    return ERLState(key=key, agent_state=agent_state,
                    search=search.init(jax.random.fold_in(key, SEARCH_TAG), ravel_pytree(actor)[0], population),
                    from_learner=jnp.zeros((cfg.population_size,), bool), learner_actor=actor, target_actor=actor,
                    actor_opt_state=optimizer.init(actor), target_critic=critic,
                    critic_opt_state=optimizer.init(critic),
                    buffer=replay.init(empty_transitions(env, agent.action_dim), cfg.buffer_size),
                    iteration=jnp.zeros((), jnp.int32))


# --------------------------------------------------------------------------------------
# One generation
# --------------------------------------------------------------------------------------
def _select(pred: jax.Array, a: Any, b: Any) -> Any:
    """``a`` where ``pred``, else ``b``, leaf by leaf."""
    return jax.tree.map(lambda x, y: jnp.where(pred, x, y), a, b)


def _ask(search: AskTell, cfg: Any, state: ERLState, learner: jax.Array, search_key: jax.Array):
    """The generation's ``N`` actors ``[N, D]`` and the search's ``asked``; an optimiser that
    keeps no population (``injection: sample``) has the learner due replace its last sample."""
    population, asked = search.ask(jax.random.fold_in(search_key, ASK_TAG), state.search)  # [N, D]
    if not search.keeps_population and cfg.injection == "sample":  # the learner due joins as the last sample
        due = ((state.iteration % cfg.sync_period == 0) & (state.iteration > 0)
               & (state.buffer.size >= max(cfg.learning_starts, 1)))
        due = due & jnp.all(jnp.isfinite(learner))  # a diverged learner joins no generation
        population = jnp.where(due, population.at[-1].set(learner), population)
    return population, asked


def _tell_and_inject(search: AskTell, cfg: Any, state: ERLState, asked: Any, population: jax.Array,
                     fitness: jax.Array, trained: Any, learning: jax.Array, random_actions: jax.Array,
                     search_key: jax.Array):
    """The search told the generation's ``fitness`` (unchanged while actions are random), and
    the ``trained`` learner injected every ``sync_period`` generations once learning has started:
    in place of the last child (a kept population), among the next samples, or as the
    distribution's new mean (ERL-EDA). Returns ``(searched, from_learner [N], inject)``."""
    num = cfg.population_size
    searched = _select(random_actions, state.search, search.tell(search_key, asked, population, fitness))
    inject = ((state.iteration + 1) % cfg.sync_period == 0) & (learning > 0) \
        & jnp.all(jnp.isfinite(ravel_pytree(trained)[0]))  # a diverged learner is not injected
    if search.keeps_population:  # the learner replaces the last child (kept until selection drops it)
        from_learner = jnp.where(random_actions, state.from_learner, state.from_learner[search.parents(searched)])
        searched = _select(inject, search.inject(searched, num - 1, ravel_pytree(trained)[0]), searched)
        from_learner = jnp.where(inject, from_learner.at[-1].set(True), from_learner)
    elif cfg.injection == "sample":  # it joins the next generation's samples
        from_learner = jnp.zeros((num,), bool).at[-1].set(inject)
    else:  # ERL-EDA: it moves the distribution's mean, around which the next generation is sampled
        searched = _select(inject, search.recentre(searched, ravel_pytree(trained)[0], cfg.injection_step),
                          searched)
        from_learner = jnp.full((num,), inject)
    return searched, from_learner, inject


def make_generation(env: VectorEnv, agent: TD3Agent, optimizer, search: AskTell, cfg: Any):
    """``generation(state) -> (state, metrics)``, one generation (module docstring) with the
    population optimiser ``search``; ``env`` holds ``episodes_per_actor`` environments."""
    num = cfg.population_size
    steps_per_generation = (num + 1) * env.num_envs * env.episode_length
    rl_phase = make_rl_phase(agent, optimizer, cfg)
    play = make_play(env, agent)
    batched = lambda tree: jax.tree.map(lambda x: x[None], tree)  # noqa: E731  leaves [1, ...]
    single = lambda tree: jax.tree.map(lambda x: x[0], tree)  # noqa: E731

    def generation(state: ERLState) -> tuple[ERLState, dict]:
        key, play_key, learn_key, search_key = jax.random.split(state.key, 4)
        learner, unravel = ravel_pytree(state.learner_actor)
        population, asked = _ask(search, cfg, state, learner, search_key)  # [N, D]
        actors = jnp.concatenate([population, learner[None]])  # [N + 1, D], the learner last
        noise = jnp.zeros((num + 1,)).at[num].set(state.agent_state.hparams.exploration_noise)  # [N + 1]
        random_actions = state.iteration * steps_per_generation < cfg.warmup_steps
        transitions, stats = play(state.agent_state, actors, unravel, noise, random_actions, play_key)
        buffer = replay.add(state.buffer, transitions)  # [(N + 1) x T x E] transitions
        returns = mean_returns(stats)  # [N + 1]
        fitness, learner_return = returns[:num], returns[num]

        critic, target_critic, critic_opt_state, trained, target_actor, actor_opt_state, metrics = when_learning(
            rl_phase, buffer.size, cfg.learning_starts, state.agent_state, state.target_critic,
            state.critic_opt_state, batched(state.learner_actor), batched(state.target_actor),
            batched(state.actor_opt_state), buffer, learn_key)
        trained, target_actor, actor_opt_state = single(trained), single(target_actor), single(actor_opt_state)

        searched, from_learner, inject = _tell_and_inject(search, cfg, state, asked, population, fitness, trained,
                                                          metrics["learning"], random_actions, search_key)
        if cfg.deploy == "champion":  # the fittest of the N actors and the learner, as they played
            deployed = unravel(actors[jnp.argmax(ranked(returns))])
        else:
            deployed = trained
        agent_state = state.agent_state.replace(params={"actor": deployed, "critic": critic})
        metrics.update(population_metrics(stats, fitness, buffer))
        metrics.update(
            learner_return=learner_return,
            learner_rank=1.0 + jnp.sum(ranked(fitness) > learner_return).astype(jnp.float32),
            learner_injected=inject.astype(jnp.float32),
            population_from_learner=jnp.mean(from_learner.astype(jnp.float32)),
            **search.metrics(searched),
        )
        state = state.replace(key=key, agent_state=agent_state, search=searched, from_learner=from_learner,
                              learner_actor=trained, target_actor=target_actor, actor_opt_state=actor_opt_state,
                              target_critic=target_critic, critic_opt_state=critic_opt_state, buffer=buffer,
                              iteration=state.iteration + 1)
        return state, metrics

    return generation


@dataclass(frozen=True)
class ERLExperimentConfig(ExperimentConfig):
    erl: ERLConfig = ERLConfig()


ERL = population_algorithm("ERL", ERLState, init_erl_state, make_generation)


class ERLWorkflow(PopulationRLWorkflow):
    """ERL (see the module docstring): one agent, a genetic population and a TD3 learner inside it."""

    algorithm = ERL
    experiment_config_cls = ERLExperimentConfig


__all__ = [
    "ERL", "ERLConfig", "ERLExperimentConfig", "ERLState", "ERLWorkflow", "crossover", "ga_step", "init_erl_state",
    "make_generation", "mutate", "neuron_segments", "tournament_select",
]

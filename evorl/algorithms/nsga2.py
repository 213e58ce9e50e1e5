"""NSGA-II over policy parameters, objectives the returns of an env's reward terms: one
generation as a pure function.

The members are flat policy parameters ``x_i [D]`` of the ES policy (:class:`~evorl.algorithms.es.ESAgent`,
greedy), each scored by a vector of returns ``F_i [K]``: one per ``nsga2.objectives`` entry,
the episode sum of that reward term (``env.reward_terms``, e.g. brax halfcheetah's
``reward_run`` and ``reward_ctrl``), all maximised, and the number ``n_i`` of episodes that
score rests on (the ``nsga2:`` section is :class:`~evorl.config.nsga2.NSGA2Config`, checked
there). One generation (:func:`make_generation`), read top to bottom (the operators
are :mod:`evorl.rl.multi_objective`):

1. rank the population ``[N]`` into fronts and compute crowding distances;
2. pick ``N`` parents by binary tournament on (rank, crowding distance);
3. make ``N`` children: consecutive pairs crossed neuron-wise with probability
   ``crossover_prob``, then Gaussian mutation ``x + sigma eps`` of every coordinate;
4. play ``E = episodes_per_member`` greedy episodes with each child and, unless
   ``rescore_survivors`` is ``never``, with each member of the population too, all on the same
   environment seeds (vmapped; with a device axis each device plays its share); a child's
   objectives are its mean term returns ``f_i``, ``n_i = E``;
5. re-score the population (below);
6. keep ``N`` of population + children by (rank, crowding distance);
7. log the hypervolume of the new population above ``nsga2.reference_point``, the front's
   size, each objective's best and the mean ``n_i`` of the front; the agent state's parameters
   become the front member with the largest sum of objectives, so greedy evaluation,
   checkpoints, ``evorl-eval`` and ``evorl.load_policy`` see an ordinary agent.

Re-scoring survivors (``rescore_survivors``). An episode's term returns are a noisy
measurement ``f = mu_i + e`` of a member's expected returns ``mu_i`` (brax draws each
episode's start state). Elitist selection keeps the members whose measurement came out high,
so a survivor's stored score is biased upwards by its luck ``e``; scored once, a lucky member
keeps that score for as long as it survives, dominates the children that are truly better
than it but measured without its luck, and the front stops moving. Each generation therefore
plays every member of the population again on the generation's ``E`` fresh episodes, with
mean ``f_i``, and

* ``mean`` (the default): the running mean over every episode the member has played,
  ``F_i <- (n_i F_i + E f_i) / (n_i + E)``, ``n_i <- n_i + E``. ``F_i`` is the mean of ``n_i``
  episodes, its standard error ``sigma / sqrt(n_i)``; the luck ``e`` of the episodes that got the
  member selected counts ``E / n_i`` of it, so after ``k`` re-scorings a lucky first score
  keeps ``1 / (k + 1)`` of its excess, and a long-lived member's score approaches ``mu_i``;
* ``latest``: re-scored outright, ``F_i <- f_i``, ``n_i = E``: no member keeps an old lucky
  score, but every score keeps the noise of ``E`` episodes;
* ``never``: scored once as a child and kept (the textbook NSGA-II, for noise-free objectives).

The population and the children share the generation's episode seeds (common random
numbers), so the survivors' fresh scores and the children's are measured on the same start
states. Re-scoring doubles a generation's episodes (``2 N E`` rather than ``N E``); it spends
them on the members selection kept, in proportion to how long each survives, where scoring
every child over more episodes (EvoRL's NSGA-II plays 16 per child) spends them on children
most of which are discarded at once. With ``never``, the first generation's children are the
initial members themselves, so they get scored; otherwise the initial members are scored
with the first generation's children.

Gaussian mutation rather than SBX and polynomial mutation: those act per coordinate within
box bounds, which a network's weights do not have; isotropic Gaussian perturbation is the
mutation of the neuroevolution methods (OpenAI-ES, the deep GA) this library's ES uses too.
"""

from __future__ import annotations

from collections.abc import Callable
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.flatten_util import ravel_pytree

from evorl.algorithms.es import ESAgent
from evorl.config.nsga2 import NSGA2Config
from evorl.engine.evaluator import greedy_episodes
from evorl.envs import VectorEnv
from evorl.rl import metrics as M
from evorl.rl.agent import AgentState
from evorl.rl.collectives import all_gather, axis_index
from evorl.rl.evolution import neuron_segments
from evorl.rl.multi_objective import (
    binary_tournament, crowding_distance, environmental_selection, gaussian_offspring, hypervolume_2d,
    non_dominated_ranks, sanitize,
)
from evorl.rl.on_policy import episode_metrics
from evorl.rl.rollout import EpisodeStats


@struct.dataclass
class NSGA2State:
    key: jax.Array
    #: The front member with the largest sum of objectives as the policy's parameters.
    agent_state: AgentState
    population: jax.Array  # [N, D] flat policy parameters
    objectives: jax.Array  # [N, K] mean term returns (-inf before they are scored)
    episodes: jax.Array  # [N] int32, episodes each member's objectives are the mean of (0: unscored)
    iteration: jax.Array  # [] int32, completed generations


def init_nsga2_state(agent: ESAgent, nsga2: NSGA2Config, key: jax.Array) -> NSGA2State:
    """``N`` members, each the policy network's initialisation with its own key, unscored."""
    key, agent_key, *member_keys = jax.random.split(key, 2 + nsga2.population_size)
    agent_state = agent.init(agent_key)
    population = jnp.stack([ravel_pytree(agent.init(k).params)[0] for k in member_keys])  # [N, D]
    objectives = jnp.full((nsga2.population_size, len(nsga2.objectives)), -jnp.inf, jnp.float32)
    return NSGA2State(key=key, agent_state=agent_state, population=population, objectives=objectives,
                      episodes=jnp.zeros((nsga2.population_size,), jnp.int32), iteration=jnp.zeros((), jnp.int32))


def rescore(mode: str, objectives: jax.Array, episodes: jax.Array, fresh: jax.Array,
            fresh_episodes: int) -> tuple[jax.Array, jax.Array]:
    """The population's objectives ``[N, K]`` and episode counts ``[N]`` after it played
    ``fresh_episodes`` more episodes with mean term returns ``fresh [N, K]`` (module docstring):
    ``mean``: ``F <- (n F + E f) / (n + E)``, ``n <- n + E`` (an unscored member, ``n = 0``,
    takes ``f``); ``latest``: ``F <- f``, ``n <- E``; ``never``: unchanged."""
    if mode == "never":
        return objectives, episodes
    if mode == "latest":
        return fresh, jnp.full_like(episodes, fresh_episodes)
    n = episodes[:, None].astype(objectives.dtype)  # [N, 1]
    running = (n * jnp.where(episodes[:, None] > 0, objectives, 0.0) + fresh_episodes * fresh) / (n + fresh_episodes)
    return running, episodes + fresh_episodes


def front_mask(objectives: jax.Array) -> jax.Array:
    """``[N]`` bool: the finite members of rank 0."""
    return (non_dominated_ranks(objectives) == 0) & jnp.all(jnp.isfinite(objectives), axis=1)


def generation_metrics(returns: jax.Array, lengths: jax.Array, objectives: jax.Array, front: jax.Array,
                       member_episodes: jax.Array, scored: jax.Array, reference: np.ndarray,
                       objective_names: tuple[str, ...], axis_name: str | None = None) -> dict:
    """A generation's metrics: its episodes', the front's hypervolume above ``reference``, size
    and episodes per member, the children with a non-finite objective (``scored [N, K]``) and
    each objective's best on the front."""
    episodes = EpisodeStats(jnp.sum(returns), jnp.sum(lengths), jnp.asarray(returns.size, jnp.float32))
    metrics = episode_metrics(episodes, axis_name)
    on_front = jnp.maximum(jnp.sum(front), 1)
    metrics.update(hypervolume=hypervolume_2d(objectives, jnp.asarray(reference)),
                   front_size=jnp.sum(front).astype(jnp.float32),
                   # how many episodes the front's scores rest on: grows while re-scored members survive
                   front_episodes=jnp.sum(jnp.where(front, member_episodes, 0)).astype(jnp.float32) / on_front,
                   # a child with a non-finite objective (a diverged policy) ranks last: counted, and warned of
                   nonfinite_children=M.Metric(
                       jnp.sum(~jnp.all(jnp.isfinite(scored), axis=1)).astype(jnp.float32), "max"))
    for k, name in enumerate(objective_names):
        metrics[f"best_{name}"] = M.Metric(jnp.max(jnp.where(front, objectives[:, k], -jnp.inf)), "max")
    return metrics


def make_generation(env: VectorEnv, agent: ESAgent, nsga2: NSGA2Config, axis_name: str | None = None,
                    num_devices: int = 1) -> Callable[[NSGA2State], tuple[NSGA2State, dict]]:
    """One generation (see the module docstring). ``env`` holds ``episodes_per_member``
    environments; with ``axis_name`` each of the ``num_devices`` devices plays its share of the
    members and the results equal one device's."""
    num, episodes_each = nsga2.population_size, nsga2.episodes_per_member
    rescoring = nsga2.rescore_survivors != "never"
    local = (2 * num if rescoring else num) // num_devices
    term_index = np.asarray([env.reward_terms.index(name) for name in nsga2.objectives])
    reference = np.asarray(nsga2.reference_point, np.float32)

    def generation(state: NSGA2State) -> tuple[NSGA2State, dict]:
        key, select_key, vary_key, env_key = jax.random.split(state.key, 4)
        agent_state = state.agent_state
        _, unravel = ravel_pytree(agent_state.params)
        segments = neuron_segments(agent_state.params) if nsga2.crossover_prob > 0 else None
        ranks = non_dominated_ranks(state.objectives)
        parents = binary_tournament(select_key, ranks, crowding_distance(state.objectives, ranks), num)  # [N]
        children = gaussian_offspring(vary_key, state.population[parents], nsga2.sigma, nsga2.crossover_prob,
                                      segments)  # [N, D]
        if rescoring:
            players = jnp.concatenate([state.population, children])  # [2N, D]
        else:
            players = children = jnp.where(state.iteration == 0, state.population, children)  # [N, D]
        members = jax.lax.dynamic_slice_in_dim(players, axis_index(axis_name) * local, local)  # [local, D]

        def play(x):  # every member on the same environment seeds (common random numbers)
            returns, lengths, _, terms = greedy_episodes(env, agent, agent_state.replace(params=unravel(x)), env_key,
                                                         axis_name=axis_name, with_terms=True)
            return returns, lengths, terms

        returns, lengths, terms = jax.vmap(play)(members)  # [local, E], [local, E], [local, E, T]
        measured = all_gather(jnp.mean(terms[..., term_index], axis=1), axis_name)  # [2N or N, K]
        scored = measured[-num:]  # [N, K] the children's
        survivors, survivor_episodes = rescore(nsga2.rescore_survivors, state.objectives, state.episodes,
                                               measured[:num], episodes_each)
        pool, pool_objectives = (jnp.concatenate([state.population, children]),
                                 sanitize(jnp.concatenate([survivors, scored])))  # [2N, D], [2N, K]
        pool_episodes = jnp.concatenate([survivor_episodes, jnp.full((num,), episodes_each, jnp.int32)])  # [2N]
        keep = environmental_selection(pool_objectives, num)  # [N]
        population, objectives, member_episodes = pool[keep], pool_objectives[keep], pool_episodes[keep]
        front = front_mask(objectives)  # [N]
        best = jnp.argmax(jnp.where(front, jnp.sum(objectives, axis=1), -jnp.inf))
        agent_state = agent_state.replace(params=unravel(population[best]))

        metrics = generation_metrics(returns, lengths, objectives, front, member_episodes, scored, reference,
                                     nsga2.objectives, axis_name)
        state = state.replace(key=key, agent_state=agent_state, population=population, objectives=objectives,
                              episodes=member_episodes, iteration=state.iteration + 1)
        return state, metrics

    return generation

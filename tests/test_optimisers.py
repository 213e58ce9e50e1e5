"""The population optimisers' ask/tell interface (evorl.rl.optimisers): the one ranking rule
(NaN, +inf and -inf rank last) by hand; each optimiser's ask shape and its tell moving the
search towards the fitter members; sep-CEM on a hand-computed case and the GA equal to its
operators; CEM-RL with OpenES in place of CEM, ERL with OpenES in place of its GA, and a
bad optimiser name."""

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from evorl.algorithms.es import ESConfig, make_strategy
from evorl.config import ConfigError
from evorl.rl import optimisers
from evorl.rl.optimisers import ga_step, ranked, ranking
from evorl.workflows import CEMRLWorkflow, ERLWorkflow
from test_cemrl import TINY as CEMRL_TINY


def test_non_finite_fitness_ranks_last_by_hand():
    """[2, nan, inf, -1, -inf, 5]: the finite values by value, then the three non-finite ones
    (a diverged member is never best), tied among themselves by index."""
    fitness = jnp.asarray([2.0, jnp.nan, jnp.inf, -1.0, -jnp.inf, 5.0])
    np.testing.assert_array_equal(ranking(fitness), [1, 2, 4, 3, 0, 5])  # worst to best
    np.testing.assert_array_equal(jax.lax.top_k(ranked(fitness), 3)[1], [5, 0, 3])  # best first
    np.testing.assert_array_equal(ranked(fitness), [2.0, -np.inf, -np.inf, -1.0, -np.inf, 5.0])


def test_pbt_ranks_plus_inf_last():
    from evorl.rl.evolution import ranking as pbt_ranking  # the ranking of exploit_explore (evorl.engine.pbt)

    np.testing.assert_array_equal(pbt_ranking(jnp.asarray([0.0, jnp.inf, 1.0])), [1, 0, 2])


def cem_optimiser(num=4):
    return optimisers.cem(num, num_elites=2, sigma_init=0.25, eps_init=0.01, eps_end=0.0, tau_eps=0.5)


def test_cem_on_a_hand_computed_case():
    """2 elites of 4 members in 2-D: weights log(3/1), log(3/2) normalised; the variance around
    the old mean (0, 0) plus eps = 0.01; eps halves towards 0."""
    opt = cem_optimiser()
    state = opt.init(jax.random.PRNGKey(0), jnp.zeros(2))
    population = jnp.asarray([[1.0, 0.0], [0.0, 2.0], [-1.0, -1.0], [3.0, 3.0]])
    fitness = jnp.asarray([3.0, 4.0, jnp.nan, -jnp.inf])  # elites: member 1, then member 0
    state = opt.tell(None, state, population, fitness)
    w = np.log([3.0, 1.5]) / np.log(4.5)
    np.testing.assert_allclose(state.mean, w[0] * np.array([0.0, 2.0]) + w[1] * np.array([1.0, 0.0]), rtol=1e-6)
    np.testing.assert_allclose(state.var, w[0] * np.array([0.0, 4.0]) + w[1] * np.array([1.0, 0.0]) + 0.01, rtol=1e-6)
    assert float(state.eps) == pytest.approx(0.005)
    assert opt.mean(state) is state.mean and set(opt.metrics(state)) == {"cem_std", "cem_eps"}


def evosax_optimiser(num=8, dims=3):
    es = ESConfig(strategy="OpenES", population_size=num, sigma=0.1, learning_rate=0.05, optimizer="sgd")
    strategy, params = make_strategy(es, dims)
    return optimisers.evosax_strategy("openes", strategy, params, mirrored=True)


def genetic_optimiser(num=6, dims=5):
    cfg = ESLike(num_elites=1, tournament_size=2, crossover_prob=0.5, mutation_prob=0.9, mutation_frac=0.5,
                 mutation_strength=0.1, super_mutation_prob=0.05, super_mutation_strength=10.0, reset_prob=0.05,
                 weight_clip=1e6)
    return optimisers.genetic(num, np.arange(dims) % 2, cfg), cfg


class ESLike:
    def __init__(self, **kw):
        self.__dict__.update(kw)


@pytest.mark.parametrize("make", ["cem", "openes"])
def test_ask_shape_and_tell_moves_the_mean_towards_the_fitter(make):
    """Fitness = the first coordinate: the mean's first coordinate rises over 5 generations."""
    num, dims = 8, 3
    opt = cem_optimiser(num) if make == "cem" else evosax_optimiser(num, dims)
    state = opt.init(jax.random.PRNGKey(0), jnp.zeros(dims))
    assert not opt.keeps_population and opt.population_size == num
    for t in range(5):
        population, state = opt.ask(jax.random.PRNGKey(t), state)
        assert population.shape == (num, dims)
        state = opt.tell(jax.random.PRNGKey(100 + t), state, population, population[:, 0])
    assert float(opt.mean(state)[0]) > 0.0


def test_genetic_keeps_its_population_and_equals_its_operators():
    """ask returns the kept members; tell is ga_step with the same key (the elite, the fittest,
    first; parents recorded); inject puts an actor in place of a member."""
    opt, cfg = genetic_optimiser()
    population = jax.random.normal(jax.random.PRNGKey(0), (6, 5))
    state = opt.init(None, None, population)
    asked, state = opt.ask(None, state)
    np.testing.assert_array_equal(asked, population)
    fitness = jnp.asarray([0.0, 1.0, jnp.inf, 3.0, jnp.nan, -2.0])
    told = opt.tell(jax.random.PRNGKey(1), state, asked, fitness)
    expected, parents = ga_step(jax.random.PRNGKey(1), population, fitness, np.arange(5) % 2, cfg)
    np.testing.assert_array_equal(told.population, expected)
    np.testing.assert_array_equal(opt.parents(told), parents)
    np.testing.assert_array_equal(told.population[0], population[3])  # the elite: +inf ranks last
    assert opt.keeps_population
    np.testing.assert_array_equal(opt.inject(told, 5, jnp.ones(5)).population[5], np.ones(5))


def run(workflow_cls, cfg, generations=3):
    workflow = workflow_cls.build_from_config(cfg, recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    state, metrics = workflow.run_iterations(state, generations)
    return workflow, state, metrics


@pytest.mark.slow  # a CEM-RL run (population of TD3 actors)
def test_cemrl_runs_with_openes_in_place_of_cem():
    """cemrl.optimiser: openes: 3 generations (the critic learning from the second), a finite
    mean actor different from sep-CEM's, OpenES's sigma logged."""
    cfg = copy.deepcopy(CEMRL_TINY)
    cfg["cemrl"].update(optimiser="openes", es_sigma=0.05)
    workflow, state, metrics = run(CEMRLWorkflow, cfg)
    assert workflow.search.name == "openes" and metrics["train/learning"] > 0
    assert metrics["train/sigma"] == pytest.approx(0.05) and "train/cem_std" not in metrics
    _, cem_state, _ = run(CEMRLWorkflow, copy.deepcopy(CEMRL_TINY))
    actor = ravel_pytree(state.agent_state.params["actor"])[0]
    cem_actor = ravel_pytree(cem_state.agent_state.params["actor"])[0]
    assert np.all(np.isfinite(actor)) and not np.array_equal(actor, cem_actor)
    np.testing.assert_array_equal(actor, state.search.mean)


@pytest.mark.slow  # an ERL run
def test_erl_runs_with_openes_in_place_of_its_genetic_algorithm():
    """erl.optimiser: openes with sync_period 1: the learner, trained from generation 1, joins
    generation 2's samples (the last one) and is marked as the population's descendant."""
    from test_erl import TINY

    cfg = copy.deepcopy(TINY)
    cfg["erl"].update(optimiser="openes", sync_period=1, num_elites=1)
    workflow, state, metrics = run(ERLWorkflow, cfg, generations=2)
    assert metrics["train/learning"] > 0 and metrics["train/learner_injected"] > 0
    assert state.from_learner.tolist() == [False, False, False, True]
    assert np.all(np.isfinite(state.search.mean))


@pytest.mark.parametrize("section", ["cemrl", "erl"])
def test_a_bad_optimiser_name_is_refused_in_one_line(section):
    from test_erl import TINY

    cfg = copy.deepcopy(CEMRL_TINY if section == "cemrl" else TINY)
    cfg[section]["optimiser"] = "cmaes"
    workflow_cls = CEMRLWorkflow if section == "cemrl" else ERLWorkflow
    with pytest.raises(ConfigError, match=rf"Unknown {section}.optimiser 'cmaes'; valid: cem, ga, vanilla_es, openes, "
                                          r"snes, cma_es, ars\.") as error:
        workflow_cls.build_from_config(cfg, recorders=[])
    assert "\n" not in str(error.value)

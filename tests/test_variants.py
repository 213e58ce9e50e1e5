"""The evolution-guided and ES variants through the one ask/tell interface (issue 55): canonical
ES's update and sep-CEM's as ES strategies against NumPy updates written out here; the mean
moved towards an actor (ERL-EDA's injection); ERL with canonical ES (ERL-ES) and with its
learner put into the mean (ERL-EDA); and the bad inputs each refuses in one line."""

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

pytest.importorskip("evosax", reason="the ES strategies need evosax (pip install -e \".[es]\")")

from test_erl import TINY as ERL_TINY  # noqa: E402
from test_es import TINY_ES, replay_generation  # noqa: E402

from evorl.algorithms.es import ESConfig, make_search  # noqa: E402
from evorl.config import ConfigError  # noqa: E402
from evorl.engine.execution import to_host  # noqa: E402
from evorl.rl import optimisers  # noqa: E402
from evorl.rl.evolution import log_rank_weights  # noqa: E402
from evorl.workflows import CEMRLWorkflow, ERLWorkflow, ESWorkflow  # noqa: E402


def numpy_log_weights(num_elites, shift):
    w = np.log(num_elites + shift) - np.log(np.arange(1, num_elites + 1))
    return w / w.sum()


def numpy_elites(population, fitness, num_elites):
    """The fittest rows, best first; a non-finite fitness below every finite one (stable order)."""
    f = np.where(np.isfinite(fitness), fitness, -np.inf)
    return population[np.argsort(-f, kind="stable")[:num_elites]]


def test_log_rank_weights_with_canonical_es_shift_by_hand():
    """K_e = 2, shift 1/2: log(2.5/1), log(2.5/2) normalised; shift 1 stays sep-CEM's."""
    w = np.log([2.5, 1.25])
    np.testing.assert_allclose(log_rank_weights(2, 0.5), w / w.sum(), rtol=1e-6)
    np.testing.assert_allclose(log_rank_weights(2), np.log([3.0, 1.5]) / np.log(4.5), rtol=1e-6)


def test_vanilla_es_tell_on_a_hand_computed_case():
    """3 elites of 5 members in 2-D around m = (1, 1): m' = m + sum_j w_j (z_j - m), w_j from
    log(3.5) - log j; a NaN member ranks last however large its coordinates."""
    opt = optimisers.vanilla_es(5, num_elites=3, sigma=0.1)
    state = opt.init(None, jnp.ones(2))
    population = jnp.asarray([[0.0, 0.0], [2.0, 1.0], [9.0, 9.0], [1.0, 3.0], [-1.0, 0.5]])
    fitness = jnp.asarray([1.0, 5.0, jnp.nan, 3.0, -2.0])  # elites: 1, 3, 0
    state = opt.tell(None, state, population, fitness)
    w = np.log([3.5, 1.75, 3.5 / 3]) / np.sum(np.log([3.5, 1.75, 3.5 / 3]))
    expected = np.ones(2) + w[0] * np.array([1.0, 0.0]) + w[1] * np.array([0.0, 2.0]) + w[2] * np.array([-1.0, -1.0])
    np.testing.assert_allclose(opt.mean(state), expected, rtol=1e-6)
    assert float(opt.metrics(state)["sigma"]) == pytest.approx(0.1) and not opt.keeps_population


def test_vanilla_es_ask_samples_sigma_around_the_mean_and_mirrors():
    opt = optimisers.vanilla_es(4000, num_elites=10, sigma=0.3)
    mean = jnp.asarray([1.0, -2.0, 0.5])
    population, _ = opt.ask(jax.random.PRNGKey(0), opt.init(None, mean))
    deviation = np.asarray(population) - np.asarray(mean)
    np.testing.assert_allclose(deviation.std(axis=0), 0.3, rtol=0.05)
    assert np.all(np.abs(deviation.mean(axis=0)) < 4 * 0.3 / np.sqrt(4000))
    mirrored = optimisers.vanilla_es(6, num_elites=2, sigma=0.3, mirrored=True)
    population, _ = mirrored.ask(jax.random.PRNGKey(1), mirrored.init(None, mean))
    np.testing.assert_allclose(population[3:] - mean, -(population[:3] - mean), atol=1e-6)


@pytest.mark.parametrize("name", ["cem", "vanilla_es", "openes"])
def test_recentre_moves_only_the_mean(name):
    """m <- m + beta (x - m): beta 0.25 by hand; the rest of the state (sep-CEM's variance,
    OpenES's optimiser state) as it was."""
    dims = 3
    if name == "cem":
        opt = optimisers.cem(4, 2, sigma_init=0.5, eps_init=0.01, eps_end=0.0, tau_eps=0.5)
    elif name == "vanilla_es":
        opt = optimisers.vanilla_es(4, 2, sigma=0.1)
    else:
        opt = make_search(ESConfig(strategy="OpenES", population_size=4), dims)
    state = opt.init(jax.random.PRNGKey(0), jnp.asarray([1.0, 2.0, 3.0]))
    moved = opt.recentre(state, jnp.asarray([5.0, 2.0, -1.0]), 0.25)
    np.testing.assert_allclose(opt.mean(moved), [2.0, 2.0, 2.0])
    rest = lambda s: [x for x in jax.tree.leaves(s.replace(mean=jnp.zeros(dims)))]  # noqa: E731
    for a, b in zip(rest(state), rest(moved)):
        np.testing.assert_array_equal(a, b)
    genetic = optimisers.genetic(4, np.arange(dims), None)
    assert genetic.recentre is None


def one_es_generation(strategy, **es):
    cfg = {**TINY_ES, "es": {**TINY_ES["es"], "strategy": strategy, "fitness_shaping": "strategy", **es}}
    workflow = ESWorkflow.build_from_config(cfg, recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    before = jax.tree.map(jnp.asarray, to_host(state))  # a copy: the run donates the state it is given
    state, metrics = workflow.run_iterations(state, 1)
    _, fitness, population = replay_generation(workflow, before)
    assert len(np.unique(fitness)) > 2  # the members differ: the update has something to rank
    return workflow, before, state, fitness, population


@pytest.mark.slow  # an ES generation of episodes (the vanilla ES one stays in the default set)
def test_one_sepcem_es_generation_equals_numpy_sep_cem():
    """es.strategy: SepCEM: a whole generation (every member's episodes, gathered fitness) and the
    sep-CEM update written out in NumPy on the replayed members' returns: the mean, the variance
    around the old mean (var_scale 1) plus eps, eps decayed."""
    sigma, elites, eps, tau = 0.2, 3, 0.01, 0.9
    workflow, before, state, fitness, population = one_es_generation(
        "SepCEM", sigma=sigma, num_elites=elites, eps_init=eps, eps_end=0.0, tau_eps=tau)
    mean = np.asarray(before.search.mean, np.float64)
    np.testing.assert_allclose(np.asarray(before.search.var), sigma**2, rtol=1e-6)
    z = numpy_elites(population.astype(np.float64), fitness, elites)
    w = numpy_log_weights(elites, 1.0)
    np.testing.assert_allclose(np.asarray(state.search.mean), w @ z, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(state.search.var), w @ (z - mean) ** 2 + eps, rtol=1e-5, atol=1e-7)
    assert float(state.search.eps) == pytest.approx(tau * eps)
    new_mean = np.asarray(ravel_pytree(to_host(state.agent_state.params))[0])
    np.testing.assert_array_equal(new_mean, np.asarray(state.search.mean))  # the agent acts with the mean


def test_one_vanilla_es_generation_equals_numpy_canonical_es():
    """es.strategy: VanillaES, mirrored: the members are m +- sigma eps, and the new mean the
    elites' log-rank (shift 1/2) weighted mean, in NumPy on the replayed members' returns."""
    sigma, elites = 0.1, 3
    workflow, before, state, fitness, population = one_es_generation("VanillaES", sigma=sigma, num_elites=elites)
    mean = np.asarray(before.search.mean, np.float64)
    half = population.shape[0] // 2
    np.testing.assert_allclose(population[half:] - mean, -(population[:half] - mean), atol=1e-6)
    z = numpy_elites(population.astype(np.float64), fitness, elites)
    np.testing.assert_allclose(np.asarray(state.search.mean), numpy_log_weights(elites, 0.5) @ z, rtol=1e-5, atol=1e-6)


def run(workflow_cls, cfg, generations):
    workflow = workflow_cls.build_from_config(cfg, recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    state, metrics = workflow.run_iterations(state, generations)
    return workflow, state, metrics


@pytest.mark.slow
def test_erl_eda_puts_the_trained_learner_into_the_mean():
    """erl.injection: mean, OpenES, sync_period 1, step 1: after the first generation that learns,
    the distribution's mean is the trained learner, and the whole next generation descends from it."""
    cfg = copy.deepcopy(ERL_TINY)
    cfg["erl"].update(optimiser="openes", injection="mean", sync_period=1, num_elites=1)
    workflow, state, metrics = run(ERLWorkflow, cfg, generations=1)
    assert metrics["train/learning"] > 0 and metrics["train/learner_injected"] > 0
    np.testing.assert_array_equal(state.search.mean, ravel_pytree(state.learner_actor)[0])
    assert state.from_learner.tolist() == [True] * 4
    cfg["erl"]["injection_step"] = 0.5  # half way: the mean is no longer the learner
    _, half, _ = run(ERLWorkflow, cfg, generations=1)
    assert not np.array_equal(half.search.mean, ravel_pytree(half.learner_actor)[0])


@pytest.mark.slow
def test_erl_es_runs_canonical_es_with_the_learner_as_a_sample():
    """erl.optimiser: vanilla_es (ERL-ES): the learner, trained from generation 1, joins generation
    2's samples as the last one; the mean stays finite and es_sigma is logged."""
    cfg = copy.deepcopy(ERL_TINY)
    cfg["erl"].update(optimiser="vanilla_es", num_elites=2, es_sigma=0.05, sync_period=1)
    workflow, state, metrics = run(ERLWorkflow, cfg, generations=2)
    assert workflow.search.name == "vanilla_es" and metrics["train/sigma"] == pytest.approx(0.05)
    assert state.from_learner.tolist() == [False, False, False, True]
    assert np.all(np.isfinite(state.search.mean))


@pytest.mark.parametrize("workflow_cls, section, values, message", [
    (ESWorkflow, "es", {"strategy": "SepCem"},
     "Unknown es.strategy 'SepCem'; valid: OpenES, ARS, SNES, CMA_ES, SepCEM, VanillaES."),
    (ESWorkflow, "es", {"strategy": "SepCEM"}, "es.fitness_shaping=centered_rank: SepCEM ranks the population"),
    (ESWorkflow, "es", {"strategy": "VanillaES", "fitness_shaping": "strategy", "num_elites": 9},
     "es.num_elites=9 must be in [1, population_size=8]."),
    (ESWorkflow, "es", {"strategy": "SepCEM", "fitness_shaping": "strategy", "tau_eps": 2.0}, "es.tau_eps in [0, 1]"),
    (ERLWorkflow, "erl", {"injection": "centre"}, "Unknown erl.injection 'centre'; valid: sample, mean."),
    (ERLWorkflow, "erl", {"injection": "mean"}, "erl.injection=mean moves a search distribution's mean; "
                                                "erl.optimiser=ga keeps a population"),
    (ERLWorkflow, "erl", {"optimiser": "openes", "injection": "mean", "injection_step": 0.0},
     "erl.injection_step must be in (0, 1], got 0.0."),
    (ERLWorkflow, "erl", {"optimiser": "vanilla_es", "num_elites": 5},
     "erl.num_elites=5 exceeds erl.population_size=4."),
    (CEMRLWorkflow, "cemrl", {"optimiser": "vanilla_es", "es_sigma": 0.0}, "cemrl.es_sigma must be > 0, got 0.0."),
])
def test_bad_variant_configs_are_refused_in_one_line(workflow_cls, section, values, message):
    from test_cemrl import TINY as CEMRL_TINY

    cfg = copy.deepcopy({"es": TINY_ES, "erl": ERL_TINY, "cemrl": CEMRL_TINY}[section])
    cfg[section] = {**cfg[section], **values}
    with pytest.raises(ConfigError) as error:
        workflow_cls.build_from_config(cfg, recorders=[])
    assert message in str(error.value) and "\n" not in str(error.value)

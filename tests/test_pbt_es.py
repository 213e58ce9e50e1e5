"""PBT over ES hyperparameters: the strategies' state hyperparameters (OpenES's learning rate
and sigma) against NumPy steps, a population of searches against independent runs, the
exploit/explore step on an ES population against the NumPy reference of ``test_pbt``
(which searches are copied, their whole search state equal to the source's, the new
hyperparameters within bounds), config errors, and exact resume."""

import copy
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("evosax", reason="ESWorkflow needs evosax (pip install -e \".[es]\")")

from test_checkpoint_resume import InterruptAt, Interrupted, assert_states_identical  # noqa: E402
from test_es import numpy_centered_rank, search_and_state  # noqa: E402
from test_pbt import lineage, numpy_exploit_explore  # noqa: E402

from evorl.algorithms.es import STRATEGIES, ESConfig  # noqa: E402
from evorl.app.experiment import run_experiment  # noqa: E402
from evorl.config import ConfigError  # noqa: E402
from evorl.engine.pbt import DRAW_TAG  # noqa: E402
from evorl.rl.evolution import draw  # noqa: E402
from evorl.rl.optimisers import with_hyperparameters  # noqa: E402
from evorl.workflows import ESWorkflow, NSGA2Workflow  # noqa: E402

LRS, SIGMAS = [0.01, 0.03, 0.1, 0.3], [0.05, 0.2]
PBT_ES = {
    "workflow_cls": "evorl.workflows.ESWorkflow",
    "seed": 1,
    "env": {"env_name": "CartPole-v1", "env_type": "gymnax"},
    "agent": {"actor_hidden_layer_sizes": [4]},
    "es": {"population_size": 4, "obs_norm": True, "learning_rate": LRS, "sigma": SIGMAS},
    "training": {"num_iterations": 6, "eval_interval": 2, "eval_episodes": 2},
    "pbt": {"enabled": True, "interval": 2, "eval_episodes": 2, "exploit_fraction": 0.25,
            "perturb_factors": [0.5, 2.0], "resample_probability": 0.3,
            "hyperparameters": {"es.learning_rate": [1e-3, 1.0], "es.sigma": [0.01, 1.0]}},
    "checkpoint": {"save_interval": 2, "max_to_keep": None},
    "logging": {"recorders": [], "plot": False},
}


def config(**changes):
    cfg = copy.deepcopy(PBT_ES)
    for key, value in changes.items():
        section, name = key.split("__")
        cfg[section][name] = value
    return cfg


# --- the strategies' state hyperparameters ---------------------------------------------
def test_each_strategy_holds_the_hyperparameters_it_declares():
    for name, spec in STRATEGIES.items():
        shaping = "centered_rank" if spec.shaped_sign is not None else "strategy"
        es = ESConfig(strategy=name, population_size=6, sigma=0.2, learning_rate=0.05, fitness_shaping=shaping)
        search, state = search_and_state(es, 5, np.zeros(5))
        assert tuple(search.hyperparameters) == spec.state_hyperparameters, name
        for key, held in search.hyperparameters.items():  # they start at the config's values
            assert float(held.get(state)) == pytest.approx(getattr(es, key), rel=1e-6)
    assert STRATEGIES["OpenES"].state_hyperparameters == ("learning_rate", "sigma")
    with pytest.raises(ValueError, match="holds no hyperparameter 'sigma' in its state; it holds learning_rate"):
        es = ESConfig(strategy="SNES", population_size=6)
        with_hyperparameters(*search_and_state(es, 5, np.zeros(5)), {"sigma": 0.3})


def test_openes_state_learning_rate_and_sigma_drive_ask_and_tell():
    """Members of a vmapped population of OpenES states, each with its own learning rate and
    sigma, each take the NumPy step ``m' = m - lr / (P sigma) sum_i u_i eps_i`` (SGD,
    ``u = centered_rank(-R)``) with their own values; ``ask`` samples ``m + sigma z``."""
    dims, pop = 6, 12
    es = ESConfig(strategy="OpenES", population_size=pop, sigma=1.0, learning_rate=1.0, optimizer="sgd")
    mean = np.arange(dims) / 10.0
    search, state = search_and_state(es, dims, mean)
    lrs, sigmas = np.array([0.05, 0.2, 0.01]), np.array([0.2, 0.05, 1.0])
    states = jax.vmap(lambda lr, sigma: with_hyperparameters(search, state, {"learning_rate": lr, "sigma": sigma})
                      )(jnp.asarray(lrs, jnp.float32), jnp.asarray(sigmas, jnp.float32))
    key = jax.random.PRNGKey(2)
    population, asked = jax.vmap(search.ask, in_axes=(None, 0))(key, states)  # [3, P, D]
    unit, _ = search.ask(key, state)  # sigma 1: the noise itself
    np.testing.assert_allclose(population, mean + sigmas[:, None, None] * (np.asarray(unit) - mean), rtol=1e-5,
                               atol=1e-6)
    returns = np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0, 5.0, 8.0])
    told = jax.vmap(search.tell, in_axes=(None, 0, 0, None))(jax.random.PRNGKey(3), asked, population,
                                                             jnp.asarray(returns, jnp.float32))
    utilities = numpy_centered_rank(-returns)
    for i, (lr, sigma) in enumerate(zip(lrs, sigmas)):
        eps = (np.asarray(population[i], np.float64) - mean) / sigma
        np.testing.assert_allclose(told.mean[i], mean - lr * utilities @ eps / (pop * sigma), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(told.std, sigmas, rtol=1e-6)  # tell keeps each member's sigma
    np.testing.assert_allclose(told.opt_state.hyperparams["learning_rate"], lrs, rtol=1e-6)


# --- the population and PBT's step on it ------------------------------------------------
@pytest.fixture(scope="module")
def workflow():
    return ESWorkflow.build_from_config(config(pbt__interval=1000), recorders=[])


def test_population_starts_each_search_at_its_variant(workflow):
    state = workflow.init(jax.random.PRNGKey(0))
    assert workflow.num_agents == 8
    values = np.asarray(workflow.pbt.values(state))  # [8, 2]: learning rate, sigma
    expected = [(lr, sigma) for lr in LRS for sigma in SIGMAS]  # agent v: variant v (lists in config order)
    np.testing.assert_allclose(values, expected, rtol=1e-6)
    np.testing.assert_array_equal(state.iteration, np.zeros(8))


@pytest.mark.slow
def test_pbt_step_copies_whole_searches_and_perturbs_their_hyperparameters(workflow):
    """The step on a population after one generation (Adam moments non-zero) against the NumPy
    reference: the worst quarter copy one of the best quarter; a copy's agent and search state
    (mean, Adam's moments and count, best member) equal its source's, save the learning rate
    and sigma, which are the explored values within bounds; the others are untouched; each
    search keeps its PRNG key and generation count."""
    state = jax.jit(jax.vmap(workflow.executor.step))(workflow.init(jax.random.PRNGKey(0)))[0]
    pbt = workflow.pbt
    fitness = np.array([5.0, 1.0, 7.0, 3.0, 2.0, 8.0, 6.0, 4.0], np.float32)  # worst 1, 4; best 5, 2
    new, record = jax.jit(pbt.step)(state, jnp.asarray(fitness))
    values = np.asarray(pbt.values(state))
    draws = draw(jax.random.fold_in(state.key[0], DRAW_TAG), 8, 2, 2)
    ref_source, ref_values = numpy_exploit_explore(fitness, values, jax.tree.map(np.asarray, vars(draws)), 2,
                                                   pbt.evolving, (0.5, 2.0), 0.3)
    source = np.asarray(record["source"])
    np.testing.assert_array_equal(source, ref_source)
    assert {i for i in range(8) if source[i] != i} == {1, 4} and set(source[[1, 4]]) <= {5, 2}
    np.testing.assert_allclose(pbt.values(new), ref_values, rtol=1e-6)
    assert np.all(ref_values >= [1e-3, 0.01]) and np.all(ref_values <= [1.0, 1.0])

    def without_hyperparameters(search):  # the search state with its learning rate and sigma blanked
        hyperparams = {**search.opt_state.hyperparams, "learning_rate": 0.0}
        return search.replace(std=0.0, opt_state=search.opt_state._replace(hyperparams=hyperparams))

    for i in range(8):
        mine = lambda tree: jax.tree.map(lambda x: np.asarray(x[i]), tree)  # noqa: E731
        theirs = lambda tree: jax.tree.map(lambda x: np.asarray(x[source[i]]), tree)  # noqa: E731
        assert_states_identical(mine(new.agent_state), theirs(state.agent_state))
        assert_states_identical(without_hyperparameters(mine(new.search)), without_hyperparameters(theirs(state.search)))
        assert_states_identical(mine((new.key, new.iteration)), mine((state.key, state.iteration)))
    assert np.any(np.asarray(state.search.opt_state.inner_state[0].mu) != 0)  # Adam's moments were copied, not zeros
    np.testing.assert_array_equal(np.asarray(pbt.values(new))[[0, 2, 3, 5, 6, 7]], values[[0, 2, 3, 5, 6, 7]])


@pytest.mark.slow  # ~30 s on 2 cores at load 6-8
def test_a_population_of_searches_equals_independent_runs():
    """Without PBT, search ``v`` of a population trains as a run of its own with variant ``v``'s
    learning rate and sigma and the population's seed key: the state hyperparameters take
    effect per search, and vmapping changes nothing but float rounding."""
    cfg = config(es__learning_rate=[0.01, 0.3], es__sigma=0.05)
    del cfg["pbt"]
    population = ESWorkflow.build_from_config(cfg, recorders=[])
    key = jax.random.PRNGKey(4)
    state, _ = population.run_iterations(population.init(key), 3)
    for v, lr in enumerate([0.01, 0.3]):
        alone = ESWorkflow.build_from_config(config(es__learning_rate=lr, es__sigma=0.05, pbt__enabled=False),
                                             recorders=[])
        single, _ = alone.run_iterations(alone.init(jax.random.split(key, 1)[0]), 3)
        for a, b in zip(jax.tree.leaves(single.agent_state.params), jax.tree.leaves(state.agent_state.params)):
            np.testing.assert_allclose(a, b[v], rtol=1e-5, atol=1e-6)
    assert not np.allclose(*[x for x in jax.tree.leaves(state.agent_state.params)[0]])  # the two lrs differ


# --- config errors ----------------------------------------------------------------------
@pytest.mark.parametrize("changes, message", [
    ({"es__strategy": "CMA_ES", "es__fitness_shaping": "strategy", "es__learning_rate": 0.01, "es__sigma": 0.1,
      "training__num_seeds": 4, "pbt__hyperparameters": {"es.learning_rate": [1e-3, 1.0]}},
     "'es.learning_rate' cannot evolve: es.strategy=CMA_ES does not read it from its search state "
     "(it holds no hyperparameter there). Keys that can evolve: none."),
    ({"es__strategy": "SNES", "es__sigma": [0.1, 0.2]}, "'es.sigma' cannot take a list"),
    ({"es__strategy": "SNES", "es__sigma": 0.1, "pbt__hyperparameters": {"es.sigma": [0.01, 1.0]}},
     "'es.sigma' cannot evolve: es.strategy=SNES does not read it from its search state (it holds learning_rate "
     "there). Keys that can evolve: es.learning_rate."),
    ({"pbt__hyperparameters": {"es.population_size": [2, 8]}}, "'es.population_size' cannot evolve: it shapes"),
    ({"pbt__hyperparameters": {"es.sigmaa": [0.01, 1.0]}}, "es.sigma"),
    ({"pbt__hyperparameters": {"es.sigma": [0.0, 1.0]}}, "es.sigma is resampled log-uniformly, its bounds must be > 0"),
    ({"pbt__hyperparameters": {"es.sigma": [0.1, 1.0]}}, "the initial value es.sigma=0.05 lies outside the bounds"),
    ({"es__sigma": [0.1, -0.2]}, "es.sigma must be > 0, got -0.2"),
    ({"es__learning_rate": 0.01, "es__sigma": 0.1}, "1 agents (training.num_seeds x hyperparameter variants)"),
])
def test_bad_pbt_es_configs_are_named(changes, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        ESWorkflow.build_from_config(config(**changes), recorders=[])


def test_nsga2_refuses_pbt_and_populations():
    cfg = {"workflow_cls": "evorl.workflows.NSGA2Workflow", "env": {"env_name": "hopper", "env_type": "brax"},
           "nsga2": {"objectives": ["forward", "ctrl"], "reference_point": [-100.0, -100.0]}}
    with pytest.raises(ConfigError, match="NSGA2Workflow evolves one Pareto front: set pbt.enabled=false"):
        NSGA2Workflow.check_config(NSGA2Workflow.parse_config({**cfg, "pbt": {**PBT_ES["pbt"], "interval": 10}}), None, 1)
    with pytest.raises(ConfigError, match="training.num_seeds=2: NSGA2Workflow trains one population per run"):
        NSGA2Workflow.check_config(NSGA2Workflow.parse_config({**cfg, "training": {"num_seeds": 2}}), None, 1)
    with pytest.raises(ConfigError, match="'nsga2.sigma' cannot take a list"):
        NSGA2Workflow.parse_config({**cfg, "nsga2": {**cfg["nsga2"], "sigma": [0.1, 0.2]}})


# --- a whole run: lineage and exact resume ----------------------------------------------
@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return run_experiment(config(training__eval_interval=1), output_dir=tmp_path_factory.mktemp("pbt_es"))


@pytest.mark.slow  # ~40 s on 2 cores at load 6-8
def test_interrupted_and_resumed_pbt_es_run_is_bit_identical(uninterrupted, tmp_path):
    records = lineage(uninterrupted.run_dir)
    assert [r["iteration"] for r in records] == [2, 4, 6]
    steps_per_generation = 4 * 1 * 500  # population_size x episodes_per_member x episode length
    assert [r["step"] for r in records] == [2 * steps_per_generation, 4 * steps_per_generation,
                                            6 * steps_per_generation]
    assert all(len(r["copied"]) == 2 for r in records)  # 8 searches x 0.25
    np.testing.assert_allclose(np.asarray(uninterrupted.state.search.std),
                               records[-1]["new_hyperparameters"]["es.sigma"], rtol=1e-6)
    with pytest.raises(Interrupted):
        run_experiment(config(training__eval_interval=1), output_dir=tmp_path, recorders=[InterruptAt(3)])
    assert [r["iteration"] for r in lineage(tmp_path)] == [2]  # checkpointed at 2, stopped after 3
    resumed = run_experiment({**config(training__eval_interval=1), "resume": str(tmp_path)})
    assert_states_identical(resumed.state, uninterrupted.state)
    assert lineage(tmp_path) == records


@pytest.mark.slow  # ~60 s on 2 cores
def test_pbt_es_population_on_two_devices_equals_one_device():
    """``distributed.layout: population``: 4 whole searches per device, the PBT steps gathering
    the population across the devices, end where one device ends."""
    from test_multi_device import run_two_devices

    cfg = {**config(), "checkpoint": {}, "distributed": {"layout": "population"}}
    result = run_two_devices("evorl.workflows.ESWorkflow", cfg, iterations=4)
    assert result["member_devices"] == 2 and not result["replicated"]  # searches split, not replicated
    assert result["max_state_diff"] <= 1e-5 * max(1.0, result["param_scale"]), result
    assert result["eval_return"][0] == pytest.approx(result["eval_return"][1], abs=1e-3)

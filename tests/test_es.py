"""Evolution strategies: our fitness shaping, mirrored sampling and shared observation
statistics against NumPy references; OpenES's update and gradient estimate; exact resume,
2 devices = 1 device, the run-folder tools, and a CartPole learning check."""

import argparse
import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("evosax", reason="ESWorkflow needs evosax (pip install -e \".[es]\")")

from test_checkpoint_resume import InterruptAt, Interrupted, assert_states_identical  # noqa: E402
from test_multi_device import run_two_devices  # noqa: E402

from evorl.algorithms.es import ESConfig, centered_rank, make_search, mirror  # noqa: E402
from evorl.config import ConfigError  # noqa: E402
from evorl.app.experiment import run_experiment  # noqa: E402
from evorl.workflows import ESWorkflow  # noqa: E402
from evorl.engine.execution import to_host  # noqa: E402

CARTPOLE = {"env_name": "CartPole-v1", "env_type": "gymnax"}
TINY_ES = {
    "workflow_cls": "evorl.workflows.ESWorkflow",
    "seed": 1,
    "env": CARTPOLE,
    "agent": {"actor_hidden_layer_sizes": [8]},
    "es": {"population_size": 8, "obs_norm": True, "episodes_per_member": 2},
    "training": {"num_iterations": 6, "eval_interval": 1, "eval_episodes": 2},
    "checkpoint": {"save_interval": 2, "max_to_keep": None},
    "logging": {"recorders": [], "plot": False},
}


def numpy_centered_rank(x):
    """Ranks by sorting, ties given the mean of the ranks they span, scaled to [-0.5, 0.5]."""
    x = np.asarray(x, np.float64)
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x))
    for value in np.unique(x):
        ranks[x == value] = ranks[x == value].mean()
    return ranks / (len(x) - 1) - 0.5


def test_centered_rank_by_hand_and_against_numpy():
    # by hand: sorted 1 < 2 = 2 < 3 < 7 -> ranks 0, 1.5, 1.5, 3, 4 over P - 1 = 4
    np.testing.assert_allclose(centered_rank(jnp.array([3.0, 1.0, 2.0, 7.0, 2.0])),
                               [0.25, -0.5, -0.125, 0.5, -0.125])
    np.testing.assert_allclose(centered_rank(jnp.array([5.0, 5.0, 5.0, 5.0])), [0.0] * 4)
    rng = np.random.default_rng(0)
    for x in (rng.normal(size=64), rng.integers(0, 5, size=33).astype(float)):  # distinct values; many ties
        shaped = np.asarray(centered_rank(jnp.asarray(x, jnp.float32)))
        np.testing.assert_allclose(shaped, numpy_centered_rank(x), atol=1e-6)
        assert abs(shaped.sum()) < 1e-4 and shaped.min() >= -0.5 and shaped.max() <= 0.5


def test_centered_rank_ranks_non_finite_costs_worst():
    """A member whose return diverged (NaN, +-inf) ranks as the worst cost, as in evosax and PBT;
    the shaped values stay in [-0.5, 0.5] and sum to 0."""
    # by hand: 0 < 1 < nan -> ranks 1, 2, 0 over P - 1 = 2 (before the fix NaN ranked best: [0, -0.75, -0.5])
    np.testing.assert_allclose(centered_rank(jnp.array([1.0, jnp.nan, 0.0])), [0.0, 0.5, -0.5])
    # 0 < 1, then nan, inf, -inf tie for the three worst ranks 2, 3, 4 (mean 3) over 4
    np.testing.assert_allclose(centered_rank(jnp.array([1.0, jnp.nan, 0.0, jnp.inf, -jnp.inf])),
                               [-0.25, 0.25, -0.5, 0.25, 0.25])
    rng = np.random.default_rng(1)
    for _ in range(5):
        x = rng.normal(size=17)
        x[rng.choice(17, size=4, replace=False)] = rng.choice([np.nan, np.inf, -np.inf], size=4)
        shaped = np.asarray(centered_rank(jnp.asarray(x, jnp.float32)))
        np.testing.assert_allclose(shaped, numpy_centered_rank(np.where(np.isfinite(x), x, np.inf)), atol=1e-6)
        assert abs(shaped.sum()) < 1e-4 and shaped.min() >= -0.5 and shaped.max() <= 0.5


def search_and_state(es: ESConfig, num_dims: int, mean):
    """The strategy of ``es`` (an AskTell, as the ES generation uses it) and its initial state at ``mean``."""
    search = make_search(es, num_dims)
    return search, search.init(jax.random.PRNGKey(0), jnp.asarray(mean, jnp.float32))


def test_mirrored_sampling_gives_pairs_mean_plus_minus_eps():
    mean = np.linspace(-1, 1, 5)
    for name in ("OpenES", "SNES", "CMA_ES"):
        shaping = "strategy" if name == "CMA_ES" else "centered_rank"
        es = ESConfig(strategy=name, population_size=10, sigma=0.3, mirrored=True, fitness_shaping=shaping)
        search, state = search_and_state(es, 5, mean)
        population = np.asarray(search.ask(jax.random.PRNGKey(1), state)[0], np.float64)
        eps = population[:5] - mean
        np.testing.assert_allclose(population[5:] - mean, -eps, atol=1e-6)
        assert np.all(np.abs(eps) > 0) and len(np.unique(population.round(6), axis=0)) == 10
    mirrored = mirror(jnp.array([[1.0, 2.0], [3.0, 4.0], [9.0, 9.0], [9.0, 9.0]]), jnp.array([1.0, 1.0]))
    np.testing.assert_allclose(mirrored, [[1, 2], [3, 4], [1, 0], [-1, -2]])


def test_openes_generation_update_equals_numpy_step_on_fixed_fitness():
    """OpenES with SGD and our centred ranks: ``m' = m - lr / (P sigma) sum_i u_i eps_i`` where
    ``u = centered_rank(-R)`` (evosax minimises the cost -R) and ``eps_i = (x_i - m) / sigma``."""
    dims, pop, sigma, lr = 6, 12, 0.2, 0.05
    es = ESConfig(strategy="OpenES", population_size=pop, sigma=sigma, learning_rate=lr, optimizer="sgd")
    mean = np.arange(dims) / 10.0
    search, state = search_and_state(es, dims, mean)
    population, ask_state = search.ask(jax.random.PRNGKey(2), state)
    returns = np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0, 5.0, 8.0])  # ties included
    new_state = search.tell(jax.random.PRNGKey(3), ask_state, population, jnp.asarray(returns, jnp.float32))

    x = np.asarray(population, np.float64)
    eps = (x - mean) / sigma
    utilities = numpy_centered_rank(-returns)
    expected = mean - lr * utilities @ eps / (pop * sigma)
    np.testing.assert_allclose(np.asarray(new_state.mean), expected, rtol=1e-5, atol=1e-6)
    # the step climbs: the best members' directions move the mean towards them
    assert np.dot(np.asarray(new_state.mean) - mean, eps[np.argmax(returns)]) > 0


def test_openes_step_ranks_a_diverged_member_worst():
    """Returns NaN and +inf (a diverged member) shape as the worst cost: the step equals NumPy's
    with them ranked below every finite return, and moves the mean away from them."""
    dims, pop, sigma, lr = 64, 6, 0.2, 0.05  # mirrored pairs (0, 3), (1, 4), (2, 5)
    es = ESConfig(strategy="OpenES", population_size=pop, sigma=sigma, learning_rate=lr, optimizer="sgd")
    mean = np.zeros(dims)
    search, state = search_and_state(es, dims, mean)
    population, ask_state = search.ask(jax.random.PRNGKey(2), state)
    returns = np.array([3.0, np.nan, np.inf, 1.0, 4.0, 2.0])
    new_state = search.tell(jax.random.PRNGKey(3), ask_state, population, jnp.asarray(returns, jnp.float32))
    eps = (np.asarray(population, np.float64) - mean) / sigma
    utilities = numpy_centered_rank([-3.0, np.inf, np.inf, -1.0, -4.0, -2.0])  # costs; diverged = +inf
    expected = mean - lr * utilities @ eps / (pop * sigma)
    np.testing.assert_allclose(np.asarray(new_state.mean), expected, rtol=1e-5, atol=1e-6)
    step = np.asarray(new_state.mean) - mean
    assert np.dot(step, eps[1]) < 0 and np.dot(step, eps[2]) < 0


def test_openes_gradient_estimate_on_a_quadratic_matches_the_analytic_gradient():
    """With mirrored pairs and raw fitness f(x) = -|x - c|^2, one SGD step of rate 1 moves the
    mean by the estimate g = (2/P) sum_pairs (eps eps^T) grad f(m): unbiased, with per-coordinate
    standard error sqrt((|grad|^2 + grad_j^2) / (P/2))."""
    dims, pop, sigma = 10, 4000, 0.05
    es = ESConfig(strategy="OpenES", population_size=pop, sigma=sigma, learning_rate=1.0, optimizer="sgd",
                  fitness_shaping="raw")
    rng = np.random.default_rng(0)
    mean, centre = rng.normal(size=dims), rng.normal(size=dims)
    search, state = search_and_state(es, dims, mean)
    population, ask_state = search.ask(jax.random.PRNGKey(4), state)
    fitness = -jnp.sum(jnp.square(population - centre), axis=1)
    new_state = search.tell(jax.random.PRNGKey(5), ask_state, population, fitness)
    estimate = np.asarray(new_state.mean, np.float64) - mean
    gradient = -2.0 * (mean - centre)
    stderr = np.sqrt((gradient @ gradient + gradient**2) / (pop / 2))
    assert np.all(np.abs(estimate - gradient) < 4 * stderr), (estimate, gradient, stderr)
    assert np.linalg.norm(estimate - gradient) < 0.3 * np.linalg.norm(gradient)


def replay_generation(workflow, state):
    """An independent replay of one generation: every member's greedy episodes for the full
    time limit (``lax.scan``, no early exit). Returns the observations acted on before each
    episode ended ``[n, obs_dim]``, each member's fitness (mean return) ``[P]`` and the
    candidates ``[P, D]``."""
    _, ask_key, env_key, _ = jax.random.split(state.key, 4)
    population, _ = workflow.search.ask(ask_key, state.search)
    _, unravel = jax.flatten_util.ravel_pytree(state.agent_state.params)
    env, agent = workflow.env, workflow.agent

    def member_episodes(x):
        member = state.agent_state.replace(params=unravel(x))

        def step(carry, _):
            env_state, active, returns = carry
            actions = agent.to_env_action(agent.evaluate_actions(member, env_state.obs))
            next_state = env.step(env_state, actions)
            returns = returns + jnp.where(active, next_state.reward, 0.0)
            return (next_state, active & ~next_state.done, returns), (env_state.obs, active)

        start = (env.reset(env_key), jnp.ones(env.num_envs, bool), jnp.zeros(env.num_envs))
        (_, _, returns), seen = jax.lax.scan(step, start, None, length=env.episode_length)
        return seen, jnp.mean(returns)

    (obs, active), fitness = jax.jit(jax.vmap(member_episodes))(population)  # [P, T, E, obs_dim], [P, T, E]
    return np.asarray(obs, np.float64)[np.asarray(active)], np.asarray(fitness, np.float64), np.asarray(population)


def test_one_openes_generation_equals_numpy_openes_step():
    """A whole generation (episodes of every member, gathered fitness, our shaping, evosax's
    update with SGD) against NumPy's OpenES step on the replayed members' returns."""
    sigma, lr = 0.1, 0.5
    cfg = {**TINY_ES, "es": {"strategy": "OpenES", "population_size": 8, "sigma": sigma, "learning_rate": lr,
                             "optimizer": "sgd", "episodes_per_member": 2}}
    workflow = ESWorkflow.build_from_config(cfg, recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    before = jax.tree.map(jnp.asarray, to_host(state))
    state, metrics = workflow.run_iterations(state, 1)
    _, fitness, population = replay_generation(workflow, before)
    assert metrics["train/episode_return"] == pytest.approx(fitness.mean(), rel=1e-6)
    assert len(np.unique(fitness)) > 2  # the members differ: the update has something to rank

    mean = np.asarray(before.search.mean, np.float64)
    eps = (population - mean) / sigma
    expected = mean - lr * numpy_centered_rank(-fitness) @ eps / (len(fitness) * sigma)
    new_mean = np.asarray(jax.flatten_util.ravel_pytree(to_host(state.agent_state.params))[0])
    np.testing.assert_allclose(np.asarray(state.search.mean), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(new_mean, np.asarray(state.search.mean))  # the agent acts with the mean


@pytest.mark.slow  # ~45 s on 2 cores at load 8-10 (2026-12-03)
def test_shared_obs_statistics_equal_numpy_over_all_members_observations():
    workflow = ESWorkflow.build_from_config(TINY_ES, recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    observations = []
    for _ in range(2):  # the second generation normalises with the first one's statistics
        before = jax.tree.map(np.asarray, to_host(state))
        state, _ = workflow.run_iterations(state, 1)
        observations.append(replay_generation(workflow, jax.tree.map(jnp.asarray, before))[0])
        seen = np.concatenate(observations)
        stats = to_host(state.agent_state.obs_stats)
        assert stats.count == len(seen)
        np.testing.assert_allclose(stats.mean, seen.mean(0), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(stats.var, seen.var(0), rtol=1e-3, atol=1e-6)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return run_experiment(copy.deepcopy(TINY_ES), output_dir=tmp_path_factory.mktemp("es_run"))


@pytest.mark.slow  # ~32 s on 2 cores at load 8-10 (2026-12-03)
def test_interrupted_and_resumed_es_run_is_bit_identical(uninterrupted, tmp_path):
    with pytest.raises(Interrupted):
        run_experiment(copy.deepcopy(TINY_ES), output_dir=tmp_path, recorders=[InterruptAt(3)])
    resumed = run_experiment({**copy.deepcopy(TINY_ES), "resume": str(tmp_path)})
    assert int(resumed.state.iteration) == 6
    assert_states_identical(resumed.state, uninterrupted.state)
    assert resumed.final_metrics == uninterrupted.final_metrics


@pytest.mark.slow
def test_es_run_folder_works_with_eval_policy_and_plot(uninterrupted, tmp_path):
    import evorl
    from evorl.app.plotting import plot_runs
    from evorl.app.scripts.evaluate import evaluate, parse_args

    run_dir = uninterrupted.run_dir
    metrics = evaluate(parse_args([str(run_dir), "--episodes", "3", "--max-frames", "10"]))
    assert metrics["eval/episode_return"] == pytest.approx(
        ESWorkflow.build_from_config({**TINY_ES, "training": {**TINY_ES["training"], "eval_episodes": 3}},
                                     recorders=[]).evaluate(uninterrupted.state)["eval/episode_return"])
    policy = evorl.load_policy(run_dir)
    assert policy(np.zeros(4)).shape == () and policy(np.zeros((5, 4))).shape == (5,)
    curves = plot_runs([run_dir], tmp_path / "curve.png")
    assert (tmp_path / "curve.png").is_file() and curves


@pytest.mark.slow
def test_two_devices_equal_one_device():
    result = run_two_devices("evorl.workflows.ESWorkflow", {**TINY_ES, "checkpoint": {}}, iterations=3)
    assert result["member_devices"] == 2 and result["replicated"]
    assert result["max_state_diff"] <= 1e-6 * max(1.0, result["param_scale"])
    assert result["metrics"][0] == result["metrics"][1] and result["eval_return"][0] == result["eval_return"][1]


@pytest.mark.parametrize("es, message", [
    ({"strategy": "CMA_ES"}, "set es.fitness_shaping=strategy"),
    ({"strategy": "ARS", "mirrored": False}, "always samples mirrored pairs"),
    ({"population_size": 7}, "must be even for mirrored sampling"),
    ({"strategy": "PSO"}, "Unknown es.strategy 'PSO'; valid: OpenES, ARS, SNES, CMA_ES"),
    ({"sigmaa": 0.1}, "Did you mean 'es.sigma'"),
])
def test_bad_es_configs_are_named(es, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        ESWorkflow.build_from_config({**TINY_ES, "es": es}, recorders=[])


def test_es_refuses_the_async_runner():
    with pytest.raises(ConfigError, match="runner.mode=async: ESWorkflow has no actors and learner"):
        ESWorkflow.build_from_config({**TINY_ES, "runner": {"mode": "async"}}, recorders=[])
    for mode in ("auto", "fused"):
        assert ESWorkflow.parse_config({**TINY_ES, "runner": {"mode": mode}}).runner.mode == mode


@pytest.mark.parametrize("es, hint", [({}, "Try a smaller es.learning_rate or es.sigma."),
                                      ({"strategy": "CMA_ES", "fitness_shaping": "strategy"},
                                       "Try a smaller es.sigma.")])
def test_es_divergence_names_es_keys(es, hint):
    """ES refuses training.learning_rate and max_grad_norm: its divergence error names its own keys."""
    from evorl.engine.health import TrainingDiverged
    from evorl.engine.host_loop import NONFINITE_PARAMS

    workflow = ESWorkflow.build_from_config({**TINY_ES, "es": {**TINY_ES["es"], **es}}, recorders=[])
    with pytest.raises(TrainingDiverged) as info:
        workflow.check_health({NONFINITE_PARAMS: np.array([1.0]), "train/fitness_std": np.array([np.nan])}, 3)
    message = str(info.value)
    assert message.startswith("training diverged by iteration 3: the agent: non-finite parameters and non-finite "
                              "loss metrics train/fitness_std=nan.") and message.endswith(hint), message
    assert "training." not in message


def test_rl_training_keys_are_refused():
    with pytest.raises(ConfigError, match="'training.num_envs' does not apply to ESWorkflow"):
        ESWorkflow.build_from_config({**TINY_ES, "training": {"num_envs": 8}}, recorders=[])


@pytest.mark.slow
def test_steps_per_s_counts_the_steps_the_episodes_took(monkeypatch):
    """A random CartPole policy's episodes end after ~20 of their 500 steps: the logged
    steps/s counts the steps played (their lengths), not the budget (x25 too fast)."""

    class OneSecondPerCall:  # the chunk's start and end: the chunk takes 1 s
        now = 0.0

        @classmethod
        def perf_counter(cls):
            cls.now += 1.0
            return cls.now

    monkeypatch.setattr("evorl.engine.host_loop.time", OneSecondPerCall)
    logged = []

    class Spy:
        def write(self, metrics, step):
            logged.append(metrics)

    workflow = ESWorkflow.build_from_config({**TINY_ES, "training": {"num_iterations": 2, "eval_interval": 2}},
                                            recorders=[Spy()])
    workflow.learn(workflow.init(jax.random.PRNGKey(0)))
    [metrics] = logged
    played = metrics["train/episode_length"] * metrics["train/episodes"]  # 2 generations x 8 members x 2 episodes
    assert metrics["train/episodes"] == 32 and metrics["steps_per_s"] == pytest.approx(played)
    assert played < 2 * workflow.env_steps_per_iteration / 5  # the budget: 2 x 8 x 2 x 500 steps


@pytest.mark.slow  # 10 s: three strategies compiled
def test_snes_continuous_actions_cma_es_and_ars_run():
    """Pendulum (Box actions, Gaussian mode as the greedy action) with SNES; CMA-ES and ARS on CartPole."""
    for cfg in ({"env": {"env_name": "Pendulum-v1", "env_type": "gymnax"},
                 "es": {"strategy": "SNES", "population_size": 6, "optimizer": "sgd", "learning_rate": 1.0,
                        "obs_norm": True}},
                {"es": {"strategy": "CMA_ES", "population_size": 6, "fitness_shaping": "strategy",
                        "mirrored": False}},
                {"es": {"strategy": "ARS", "population_size": 6}}):
        workflow = ESWorkflow.build_from_config({**TINY_ES, **cfg}, recorders=[])
        state, metrics = workflow.run_iterations(workflow.init(jax.random.PRNGKey(0)), 2)
        # the chunk's total: 2 generations x 6 members x 1 episode
        assert metrics["train/episodes"] == 2 * 6 and np.isfinite(metrics["train/episode_return"])
        assert int(state.iteration) == 2 and np.isfinite(workflow.evaluate(state)["eval/episode_return"])


@pytest.mark.slow
def test_openes_solves_cartpole():
    cfg = {"workflow_cls": "evorl.workflows.ESWorkflow", "env": CARTPOLE, "agent": {"actor_hidden_layer_sizes": [16]},
           "es": {"strategy": "OpenES", "population_size": 32, "sigma": 0.1, "learning_rate": 0.05, "obs_norm": True},
           "training": {"num_iterations": 80, "eval_interval": 10, "eval_episodes": 16}}
    workflow = ESWorkflow.build_from_config(cfg, recorders=[])
    workflow.learn(workflow.init(jax.random.PRNGKey(0)))
    assert workflow.last_metrics["eval/episode_return"] >= 475


@pytest.mark.slow
def test_two_processes_equal_one_process(tmp_path):
    """jax.distributed over 2 processes (one CPU device each, gloo): each process plays half the
    members; both end with the single process's state."""
    from test_multi_host import free_port, start_experiment

    cfg = {**TINY_ES, "training": {"num_iterations": 3, "eval_interval": 3, "eval_episodes": 2},
           "checkpoint": {"enabled": False}}
    port = free_port()
    procs = [start_experiment({**cfg, "distributed": {"coordinator_address": f"127.0.0.1:{port}", "num_processes": 2,
                                                      "process_id": i}}, tmp_path / "run", tmp_path / f"p{i}.npz")
             for i in range(2)]
    procs.append(start_experiment(cfg, tmp_path / "single", tmp_path / "single.npz"))
    for p in procs:
        out = p.communicate(timeout=600)[0]
        assert p.returncode == 0, out[-4000:]
    results = [np.load(tmp_path / f"{name}.npz") for name in ("p0", "p1", "single")]
    for key in results[0].files:
        np.testing.assert_array_equal(results[0][key], results[1][key])
        np.testing.assert_allclose(results[0][key], results[2][key], rtol=1e-6, atol=1e-7)

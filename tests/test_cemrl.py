"""CEM-RL: the sep-CEM update against NumPy (means, diagonal covariance around the old mean,
the additive noise and its schedule) and its sampling; the critic's gradient step moves exactly
the first N/2 actors; a short run end to end (run folder, evaluation, load_policy of the mean
actor), exact resume, and a lean learning check on gymnax Pendulum-v1."""

import copy
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree
from test_checkpoint_resume import InterruptAt, Interrupted, assert_states_identical

from evorl.rl import replay
from evorl.algorithms.cemrl import CEMState, cem_init, cem_sample, cem_update, log_rank_weights, make_learn
from evorl.config import ConfigError
from evorl.app.experiment import run_experiment
from evorl.workflows import CEMRLWorkflow

TINY = {
    "workflow_cls": "evorl.workflows.CEMRLWorkflow",
    "seed": 2,
    "env": {"env_name": "Pendulum-v1", "env_type": "gymnax", "episode_length": 20},
    "agent": {"actor_hidden_layer_sizes": [8], "critic_hidden_layer_sizes": [8], "exploration_noise": 0.0},
    "cemrl": {"population_size": 4, "num_elites": 2, "num_updates": 4, "batch_size": 8, "buffer_size": 400,
              "learning_starts": 80},
    "training": {"num_iterations": 4, "eval_interval": 2, "eval_episodes": 2},
    "checkpoint": {"save_interval": 2, "max_to_keep": None},
    "logging": {"recorders": [], "plot": False},
}


def numpy_sep_cem(mean, var, eps, population, fitness, num_elites, tau_eps, eps_end, var_scale):
    """The sep-CEM step in float64: elites by sorting (a NaN ranks last), weights
    log((K + 1) / i), var_scale times the variance around the old mean plus eps, then eps decays."""
    order = np.argsort(-np.where(np.isfinite(fitness), fitness, -np.inf), kind="stable")
    elites = np.asarray(population, np.float64)[order[:num_elites]]
    weights = np.log((num_elites + 1) / np.arange(1, num_elites + 1))
    weights /= weights.sum()
    return weights @ elites, var_scale * (weights @ (elites - mean) ** 2) + eps, tau_eps * eps + (1 - tau_eps) * eps_end


def test_log_rank_weights_by_hand():
    w = np.log(4 / np.arange(1, 4))  # K_e = 3: log 4, log 2, log 4/3
    np.testing.assert_allclose(log_rank_weights(3), w / w.sum(), rtol=1e-6)
    assert np.all(np.diff(np.asarray(log_rank_weights(5))) < 0)


@pytest.mark.parametrize("var_scale", [1.0, 1.0 / 5])  # the paper's eq. 2; the authors' code (the default)
def test_cem_update_against_numpy_over_generations(var_scale):
    """Three chained updates of a 10-member, 7-parameter population (one NaN fitness) equal
    the NumPy step: the weighted elite mean, the diagonal covariance around the old mean
    (times var_scale) plus eps_t, and eps_t = eps_end + (eps_0 - eps_end) tau^t."""
    rng = np.random.default_rng(0)
    eps0, eps_end, tau = 1e-2, 1e-5, 0.95
    cem = cem_init(rng.normal(size=7), sigma_init=1e-3, eps_init=eps0)
    np.testing.assert_allclose(cem.var, np.full(7, 1e-3))
    mean, var, eps = np.asarray(cem.mean, np.float64), np.asarray(cem.var, np.float64), eps0
    for t in range(3):
        population = mean + rng.normal(size=(10, 7)) * np.sqrt(var)
        fitness = rng.normal(size=10)
        fitness[3] = np.nan
        cem = cem_update(cem, jnp.asarray(population, jnp.float32), jnp.asarray(fitness, jnp.float32), 5, tau, eps_end,
                         var_scale)
        mean, var, eps = numpy_sep_cem(mean, var, eps, population.astype(np.float32), fitness.astype(np.float32),
                                       5, tau, eps_end, var_scale)
        np.testing.assert_allclose(cem.mean, mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(cem.var, var, rtol=1e-4, atol=1e-9)
        np.testing.assert_allclose(float(cem.eps), eps_end + (eps0 - eps_end) * tau ** (t + 1), rtol=1e-5)
        assert float(cem.eps) == pytest.approx(eps, rel=1e-5)


def test_cem_sample_has_the_distribution_moments():
    cem = CEMState(mean=jnp.asarray([1.0, -2.0, 0.5]), var=jnp.asarray([0.01, 1.0, 4.0]), eps=jnp.asarray(0.0))
    x = np.asarray(cem_sample(cem, jax.random.PRNGKey(0), 20000))  # [20000, 3]
    np.testing.assert_allclose(x.mean(0), cem.mean, atol=4 * np.sqrt(4.0 / 20000))
    np.testing.assert_allclose(x.var(0), cem.var, rtol=0.05)


def fill(buffer, key, count):
    """``buffer`` with ``count`` random transitions."""
    example = jax.tree.map(lambda x: x[0, 0], buffer.data)
    keys = iter(jax.random.split(key, 5))
    batch = jax.tree.map(lambda x: jax.random.normal(next(keys), (count,) + x.shape), example)
    return replay.add(buffer, batch.replace(discount=jnp.full((count,), 0.99)))


@pytest.mark.slow  # a CEM-RL generation with gradient steps
def test_gradient_steps_move_exactly_the_first_half_and_the_critic():
    """Step 2 of a generation on a population of 4: actors 0 and 1 (N/2) change, 2 and 3 stay bit
    for bit; the critic's Adam takes num_updates steps. Before learning_starts nothing moves."""
    workflow = CEMRLWorkflow.build_from_config(TINY, recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    _, unravel = ravel_pytree(state.agent_state.params["actor"])
    population = cem_sample(state.search, jax.random.PRNGKey(1), 4)  # [4, D]
    learn = jax.jit(lambda s, p, k: make_learn(workflow.agent, workflow.optimizer, workflow.config.cemrl)(s, p, unravel, k))

    critic, _, opt_state, still, metrics = learn(state, population, jax.random.PRNGKey(2))  # an empty buffer
    assert float(metrics["learning"]) == 0 and np.array_equal(still, population)

    state = state.replace(buffer=fill(state.buffer, jax.random.PRNGKey(3), 100))
    critic, _, opt_state, moved, metrics = learn(state, population, jax.random.PRNGKey(2))
    changed = np.any(np.asarray(moved) != np.asarray(population), axis=1)  # [4]
    assert changed.tolist() == [True, True, False, False]
    assert int(jax.tree.leaves(opt_state)[0]) == TINY["cemrl"]["num_updates"]  # Adam's step count
    assert not all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(critic),
                                                         jax.tree.leaves(state.agent_state.params["critic"])))
    assert float(metrics["learning"]) == 1 and float(metrics["critic_loss"]) > 0


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return run_experiment(copy.deepcopy(TINY), output_dir=tmp_path_factory.mktemp("cemrl_run"))


@pytest.mark.slow
def test_short_run_end_to_end(uninterrupted):
    """4 generations of 4 actors x 20 steps: the buffer holds all 320 transitions, the critic
    learned from generation 1 on, and load_policy acts with the distribution's mean actor."""
    import evorl

    state, metrics = uninterrupted.state, uninterrupted.workflow.last_metrics
    assert int(state.iteration) == 4 and int(state.buffer.size) == 4 * 4 * 20
    assert metrics["env_steps"] == 320 and np.isfinite(metrics["eval/episode_return"])
    assert metrics["train/learning"] == 1.0 and metrics["train/critic_loss"] > 0  # generations 3, 4
    assert float(state.search.eps) == pytest.approx(1e-5 + (1e-2 - 1e-5) * 0.95 ** 4, rel=1e-5)
    mean_actor = ravel_pytree(state.agent_state.params["actor"])[0]
    np.testing.assert_array_equal(mean_actor, state.search.mean)
    policy = evorl.load_policy(uninterrupted.run_dir)
    np.testing.assert_array_equal(ravel_pytree(policy.agent_state.params["actor"])[0], state.search.mean)
    assert np.asarray(policy(np.zeros(3))).shape == (1,)


@pytest.mark.slow  # a second tiny run and its resume: about 40 s on 2 loaded cores
def test_interrupted_and_resumed_run_is_bit_identical(uninterrupted, tmp_path):
    check_exact_resume(TINY, uninterrupted, tmp_path)


def check_exact_resume(tiny: dict, uninterrupted, tmp_path) -> None:
    """A 4-generation run stopped after generation 4's start (checkpointed at 2) and resumed
    equals ``uninterrupted`` leaf for leaf (CEM-RL's and ERL's tests)."""
    with pytest.raises(Interrupted):
        run_experiment(copy.deepcopy(tiny), output_dir=tmp_path, recorders=[InterruptAt(4)])  # checkpointed at 2
    resumed = run_experiment({**copy.deepcopy(tiny), "resume": str(tmp_path)})
    assert int(resumed.state.iteration) == 4
    assert_states_identical(resumed.state, uninterrupted.state)


@pytest.mark.parametrize("section, values, message", [
    ("cemrl", {"num_elites": 9}, "num_elites=9 exceeds"),
    ("cemrl", {"buffer_size": 10, "learning_starts": 10}, "must hold one generation"),
    ("training", {"num_envs": 4}, "does not apply to CEMRLWorkflow"),
    ("agent", {"normalize_obs": True}, "normalize_obs"),
    ("cemrl", {"batch_size": 401}, "cemrl.batch_size=401 exceeds cemrl.buffer_size=400"),
    ("agent", {"tau": 0.5}, "'agent.tau' is not an agent key of CEM-RL: set 'cemrl.tau'"),
])
def test_config_errors_name_the_key(section, values, message):
    cfg = copy.deepcopy(TINY)
    cfg[section] = {**cfg[section], **values}
    with pytest.raises(ConfigError, match=message):
        CEMRLWorkflow.build_from_config(cfg, recorders=[])


def test_a_replay_buffer_too_large_is_refused_before_the_envs_are_created(monkeypatch):
    """2e9 transitions of Pendulum (lower bound: 5 floats each, 40 GB) is refused in one line
    naming the key, not allocated (the exact check after the agent is built says the same)."""
    monkeypatch.setattr("evorl.engine.rl_base.create_env", lambda *a, **k: pytest.fail("env created"))
    cfg = copy.deepcopy(TINY)
    cfg["cemrl"]["buffer_size"] = 2_000_000_000
    cfg["runner"] = {"max_memory_gb": 16}
    with pytest.raises(ConfigError, match=r"replay buffer: 2,000,000,000 transitions .*cemrl\.buffer_size") as error:
        CEMRLWorkflow.build_from_config(cfg, recorders=[])
    assert "\n" not in str(error.value)
    monkeypatch.undo()
    cfg["cemrl"]["buffer_size"] = 400  # TINY's own buffer fits the same limit
    assert CEMRLWorkflow.build_from_config(cfg, recorders=[]).config.runner.max_memory_gb == 16


@pytest.mark.slow  # 5 seeds x 15 generations, one compile: ~2.5 min on 2 cores beside another run (2026-12-04)
def test_cemrl_learns_pendulum():
    """configs/cemrl_pendulum.yaml (10 actors, 15 generations = 30k env steps, 1000 critic steps
    per generation, eps_init 1e-3): the mean actor's greedy return (10 episodes) after training,
    measured 2026-12-03 at load ~5 on 2 cores with init(PRNGKey(seed)): seeds 0, 1, 2 end at
    -145, -152, -150 from their initial mean actors' -1237, -1287, -1257 (random actions: about
    -1200); seeds 100, 101: -151, -145; 200-202: -194, -157, -224. On an AMD EPYC host
    (2026-12-04) seeds 0-4 end at -264.5, -150.5, -411.1, -187.8, -212.3. At least 4 of seeds
    0-4 must reach -400 and gain 400 over their initial actor."""
    check_learns_pendulum(CEMRLWorkflow, "cemrl_pendulum")


def check_learns_pendulum(workflow_cls, config_name: str) -> None:
    """Seeds 0-4 of ``configs/<config_name>.yaml``, one compile: at least 4 of the 5 (the
    configs set's 80% rule) reach -400 and gain 400 over their initial actor (CEM-RL's and
    ERL's learning tests). Not every seed: the final value is one draw of a noisy training,
    and which seed draws low moves with the CPU's float rounding (CEM-RL seed 2 ended at -150
    on one CPU, -411 on another)."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(OmegaConf.load(Path(__file__).resolve().parents[1] / f"configs/{config_name}.yaml"))
    cfg.pop("defaults")
    workflow = workflow_cls.build_from_config({**cfg, "logging": {"recorders": []}}, recorders=[])
    results = []
    for seed in range(5):
        state = workflow.init(jax.random.PRNGKey(seed))
        before = workflow.evaluate(state)["eval/episode_return"]
        state, _ = workflow.run_iterations(state, workflow.config.training.num_iterations)
        after = workflow.evaluate(state)["eval/episode_return"]
        results.append((seed, float(before), float(after)))
    learned = [r for r in results if r[2] >= -400 and r[2] >= r[1] + 400]
    assert len(learned) >= 4, results


def test_cemrl_variance_scale_defaults_to_the_authors_one_over_elites():
    """``cemrl.var_scale: null`` is 1 / num_elites (the authors' code); a set value is used as
    given; a non-positive one is refused with the key's name."""
    from evorl.algorithms.cemrl import CEMRLConfig

    assert CEMRLConfig(num_elites=4).elite_var_scale == pytest.approx(0.25)
    assert CEMRLConfig(num_elites=4, var_scale=1.0).elite_var_scale == 1.0
    with pytest.raises(ConfigError, match="cemrl.var_scale must be > 0"):
        CEMRLConfig(var_scale=0.0).validate()

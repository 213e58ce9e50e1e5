"""A population survives its worst member: PBT replaces a diverged agent by a copy of a good
one and the run goes on (one console line, the lineage's ``diverged``); a run that stops
diverged leaves its last finite state on disk and names that checkpoint truly; ERL/CEM-RL rank
a diverged actor below the finite ones. And the newer families refuse bad input before
anything is built: JaxMARL agent counts and keywords, envs that cannot build here, MAPPO
without its critic, NSGA-II's reference point and non-finite objectives, and a dominance
ranking that could never end."""

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import TINY
from flax import struct

from evorl.app.experiment import load_run, run_experiment
from evorl.app.run_folder import checkpoint_dir
from evorl.config import ConfigError, EnvConfig, parse_section
from evorl.config.pbt import PBTConfig
from evorl.engine.health import TrainingDiverged
from evorl.engine.lineage import lineage_record
from evorl.engine.pbt import PBT
from evorl.rl.agent import AgentState
from evorl.rl.evolution import Evolving, draw, replace_diverged
from evorl.rl.state_roles import role_field

ROOT = Path(__file__).resolve().parents[1]
DIVERGING_LR = 1e30
LR = Evolving("training.learning_rate", None, 1e-6, 1e-2, log_scale=True)


# --- PBT's step: every diverged agent copies a good one -------------------------------------
@struct.dataclass
class Hyper:
    ent_coef: jax.Array


@struct.dataclass
class PopulationState:
    """The fields PBT's step reads and copies (its ``pbt_copy`` role, as an on-policy state's), for ``n`` agents."""

    key: jax.Array
    agent_state: AgentState = role_field("pbt_copy")
    opt_state: jax.Array = role_field("pbt_copy")
    learning_rate: jax.Array = role_field("pbt_copy")
    iteration: jax.Array
    lagged_params: None = role_field("pbt_copy", default=None)
    pbt_velocity: jax.Array | None = None


def population(n: int, cso: bool = False) -> PopulationState:
    params = {"w": jnp.arange(n, dtype=jnp.float32)[:, None] * jnp.ones((n, 3))}  # agent i's weights are i
    return PopulationState(
        key=jax.random.split(jax.random.PRNGKey(0), n), opt_state=jnp.arange(n, dtype=jnp.float32),
        agent_state=AgentState(params=params, obs_stats=None, hparams=Hyper(jnp.full((n,), 0.01))),
        learning_rate=jnp.geomspace(1e-5, 1e-3, n).astype(jnp.float32), iteration=jnp.full((n,), 10, jnp.int32),
        pbt_velocity=jnp.ones((n, 1)) if cso else None)


@pytest.mark.parametrize("strategy", ["truncation", "cso"])
def test_every_diverged_agent_copies_a_good_one_at_the_step(strategy):
    """Truncation replaces only the k=2 worst of 8 and the swarm only its pairs' losers; with 3
    agents diverged (one pair of the swarm may hold two) each still copies an agent alive,
    one of the best, and explores from that agent's learning rate (not from its own, which
    diverged), within the bounds; a swarm's velocity restarts at 0."""
    n, dead = 8, [0, 3, 5]
    config = PBTConfig(enabled=True, strategy=strategy, exploit_fraction=0.25, perturb_factors=(0.5, 2.0),
                       resample_probability=0.0, hyperparameters={LR.key: [LR.low, LR.high]})
    pbt = PBT(config, (LR,), n)
    alive = jnp.ones(n, bool).at[jnp.asarray(dead)].set(False)
    fitness = jnp.where(alive, jnp.arange(n, dtype=jnp.float32), jnp.nan)  # agent 7 best
    for seed in range(5):
        state = population(n, cso=strategy == "cso").replace(key=jax.random.split(jax.random.PRNGKey(seed), n))
        new, record = jax.jit(pbt.step)(state, fitness, alive)
        source = np.asarray(record["source"])
        assert np.asarray(record["diverged"]).tolist() == [i in dead for i in range(n)]
        assert all(np.asarray(alive)[source]), source  # nobody copies a diverged agent
        donors = {6, 7} if strategy == "truncation" else {1, 2, 4, 6, 7}
        assert {int(source[i]) for i in dead} <= donors, source
        np.testing.assert_array_equal(np.asarray(new.agent_state.params["w"])[:, 0], source)  # the copy's weights
        lr = np.asarray(new.learning_rate)
        for i in dead:  # from its source's learning rate, by truncation's rule, for the swarm too
            assert lr[i] in (pytest.approx(0.5 * state.learning_rate[source[i]]),
                             pytest.approx(2.0 * state.learning_rate[source[i]]))
        assert np.all((lr >= LR.low) & (lr <= LR.high))
        if strategy == "cso":
            assert not np.asarray(new.pbt_velocity)[dead].any()


def test_replace_diverged_leaves_a_population_alone_without_divergence_or_without_survivors():
    source = jnp.asarray([0, 3, 2, 3])
    winner = draw(jax.random.PRNGKey(0), 4, 1, 2).winner
    same, stranded = replace_diverged(source, jnp.ones(4, bool), jnp.arange(4.0), winner, 1)
    assert np.asarray(same).tolist() == [0, 3, 2, 3] and not np.asarray(stranded).any()
    same, stranded = replace_diverged(source, jnp.zeros(4, bool), jnp.full(4, jnp.nan), winner, 1)
    assert np.asarray(same).tolist() == [0, 3, 2, 3] and not np.asarray(stranded).any()


def test_the_lineage_record_names_the_replaced_agents():
    record = {"iteration": 10, "source": np.array([2, 1, 2]), "fitness": np.array([np.nan, 1.0, 3.0]),
              "before": np.array([[1e30], [1e-3], [2e-3]]), "after": np.array([[4e-3], [1e-3], [2e-3]]),
              "diverged": np.array([True, False, False])}
    out = lineage_record(record, ["training.learning_rate"])
    assert out["copied"] == [{"agent": 0, "from": 2, "diverged": True}] and out["diverged"] == [0]
    assert out["fitness"][1:] == [1.0, 3.0] and np.isnan(out["fitness"][0])


def pbt_cfg(**training):
    cfg = copy.deepcopy(TINY)
    cfg["training"].update(learning_rate=[DIVERGING_LR, 5e-4], num_seeds=2, num_iterations=4, eval_interval=2,
                           **training)
    cfg["pbt"] = {"enabled": True, "interval": 2, "exploit_fraction": 0.25, "eval_episodes": 2,
                  "hyperparameters": {"training.learning_rate": [1e-5, 1e31]}}
    return cfg


@pytest.mark.slow
def test_pbt_replaces_the_diverged_agents_and_the_run_goes_on(tmp_path, capsys):
    """Two of four agents diverge in their first iteration; truncation (k = 1) would replace one:
    both copy a good agent at the step, one line says so, the lineage lists both, the run
    finishes with every agent finite and its metrics finite."""
    result = run_experiment(pbt_cfg(), output_dir=tmp_path)
    lines = [line for line in capsys.readouterr().err.splitlines() if "diverged" in line]
    assert len(lines) == 1, lines
    assert lines[0].startswith("evorl: training diverged by iteration 2 for 2 agent(s), which PBT replaced: agent 0 "
                               "(learning_rate=1e+30, seed 0), at iteration 2 by a copy of agent ")
    assert "4 of 4 agents train on" in lines[0]
    records = [json.loads(line) for line in (tmp_path / "pbt_lineage.jsonl").read_text().splitlines()]
    assert records[0]["diverged"] == [0, 1] and records[1]["diverged"] == []
    assert {c["agent"] for c in records[0]["copied"] if c.get("diverged")} == {0, 1}
    assert all(lr < 1e-2 for lr in records[0]["new_hyperparameters"]["training.learning_rate"])
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "finished"
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all(m["train/loss"] is not None and np.isfinite(m["train/loss"]) for m in metrics)
    workflow, state, iteration = load_run(tmp_path)
    assert iteration == 4 and workflow.params_finite(state).all()
    assert result.workflow.alive_agents().all()


# --- every stop path names a checkpoint that is on disk and resumes ---------------------------
@pytest.mark.slow
def test_a_run_without_a_run_folder_says_nothing_was_checkpointed(tiny_cfg):
    from evorl.workflows import PPOWorkflow

    tiny_cfg["training"].update(learning_rate=DIVERGING_LR, num_iterations=1)
    workflow = PPOWorkflow.build_from_config(tiny_cfg, recorders=[])
    with pytest.raises(TrainingDiverged, match="Nothing was checkpointed \\(no run folder, or checkpoint.enabled"):
        workflow.learn(workflow.init(jax.random.PRNGKey(0)))


@pytest.mark.slow
def test_the_checkpoint_a_diverged_run_names_resumes(tiny_cfg, tmp_path):
    """Diverged in its first chunk (before any save): the run's start is saved, named, and a
    resume starts from it (and diverges again, at the same iteration, saving nothing new)."""
    tiny_cfg["training"]["learning_rate"] = DIVERGING_LR
    with pytest.raises(TrainingDiverged, match=r"iteration 0 \(the run's start\).*resume=") as first:
        run_experiment(tiny_cfg, output_dir=tmp_path)
    assert str(tmp_path) in str(first.value)
    with pytest.raises(TrainingDiverged, match=r"by iteration 1: .*the newest checkpoint, iteration 0"):
        run_experiment({**tiny_cfg, "resume": str(tmp_path)}, output_dir=tmp_path)
    assert [p.name for p in checkpoint_dir(tmp_path).iterdir()] == ["0"]


@pytest.mark.slow
def test_a_later_divergence_names_the_newest_save_not_the_start(tiny_cfg, tmp_path):
    """With saves every 2 iterations and a divergence at iteration 3 (a learning rate raised
    on resume is refused, so the divergence is injected: PoisonedPPOWorkflow at iteration 3)."""
    from test_divergence import PoisonedPPOWorkflow

    class PoisonedAt3(PoisonedPPOWorkflow):
        POISON_AT = 3

    globals()["PoisonedAt3"] = PoisonedAt3
    tiny_cfg["workflow_cls"] = f"{__name__}.PoisonedAt3"
    with pytest.raises(TrainingDiverged, match=r"by iteration 3: .*the newest checkpoint, iteration 2, holds"):
        run_experiment(tiny_cfg, output_dir=tmp_path)
    assert sorted(p.name for p in checkpoint_dir(tmp_path).iterdir()) == ["2"]


@pytest.mark.slow
def test_erl_whose_critic_diverges_stops_with_its_start_checkpointed(tmp_path):
    cfg = {"workflow_cls": "evorl.workflows.ERLWorkflow", "seed": 0,
           "env": {"env_name": "Pendulum-v1", "env_type": "gymnax", "episode_length": 20},
           "agent": {"actor_hidden_layer_sizes": [8], "critic_hidden_layer_sizes": [8]},
           "erl": {"optimiser": "vanilla_es", "injection": "mean", "population_size": 4, "num_elites": 2,
                   "num_updates": 4, "batch_size": 8, "buffer_size": 1000, "learning_starts": 20},
           "training": {"num_iterations": 3, "eval_interval": 1, "eval_episodes": 1, "learning_rate": DIVERGING_LR},
           "logging": {"recorders": [], "plot": False}}
    with pytest.raises(TrainingDiverged, match=r"the newest checkpoint, iteration 0 \(the run's start\)"):
        run_experiment(cfg, output_dir=tmp_path)
    workflow, state, iteration = load_run(tmp_path)  # saved without its (empty) replay buffer, refilled empty
    assert iteration == 0 and workflow.params_finite(state).all() and int(state.buffer.size) == 0


def test_erl_and_cemrl_population_metrics_leave_out_a_diverged_actor():
    from evorl.algorithms.population_rl import population_metrics
    from evorl.rl import metrics as M
    from evorl.rl.replay import ReplayBuffer
    from evorl.rl.rollout import EpisodeStats

    fitness = jnp.array([1.0, jnp.nan, 3.0, -jnp.inf])
    stats = EpisodeStats(fitness * 2, jnp.full(4, 20.0), jnp.full(4, 2.0))
    buffer = ReplayBuffer(data=None, position=jnp.zeros((), jnp.int32), size=jnp.asarray(8, jnp.int32))
    out = {k: float(M.declared({k: v})[k].value) for k, v in population_metrics(stats, fitness, buffer).items()}
    assert out["nonfinite_actors"] == 2 and out["fitness_mean"] == 2.0 and out["fitness_min"] == 1.0
    assert out["best_actor_return"] == 3.0 and np.isfinite(out["fitness_std"])


# --- the newer families refuse bad input before building --------------------------------------
def cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "EVORL_COMPILATION_CACHE": "0"}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "train.py"), *args, f"hydra.run.dir={cwd / 'run'}"],
                          cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


def assert_one_config_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("evorl:")]
    assert len(errors) == 1 and errors[0].startswith("evorl: config error: "), proc.stderr
    assert all(f in errors[0] for f in fragments), errors[0]


MARL_CASES = {
    "agents_absurd": (["env.kwargs.num_agents=100000"], ["memory", "100000 agents per env step"]),
    "agents_zero": (["env.kwargs.num_agents=0"], ["env.kwargs.num_agents must be an integer >= 1, got 0"]),
    "agents_negative": (["env.kwargs.num_agents=-2"], ["env.kwargs.num_agents must be an integer >= 1, got -2"]),
    "unknown_kwarg": (["+env.kwargs.bogus=1"], ["env.kwargs bogus:", "has no such keyword", "num_landmarks"]),
}


@pytest.fixture
def train(train_in_process):
    """``train(args, cwd)``: :func:`cli` in this test's process (the command itself: ``-m slow``)."""
    return lambda args, cwd: subprocess.CompletedProcess(
        args, *train_in_process([*args, f"hydra.run.dir={cwd / 'run'}"], cwd))


@pytest.mark.parametrize("args, fragments", list(MARL_CASES.values()), ids=list(MARL_CASES))
def test_jaxmarl_bad_input_is_exit_2_and_one_line(args, fragments, tmp_path, train):
    pytest.importorskip("jaxmarl")
    assert_one_config_error(train(["--config-name=ippo_mpe_simple_spread", *args], tmp_path), *fragments)


@pytest.mark.slow
def test_jaxmarl_bad_input_to_the_command_is_exit_2_and_one_line(tmp_path):
    pytest.importorskip("jaxmarl")
    args, fragments = MARL_CASES["agents_zero"]
    assert_one_config_error(cli(["--config-name=ippo_mpe_simple_spread", *args], tmp_path), *fragments)


def test_mappo_without_its_centralised_critic_is_refused(tmp_path, train):
    pytest.importorskip("jaxmarl")
    assert_one_config_error(train(["--config-name=mappo_mpe_simple_spread", "agent.centralised_critic=false"], tmp_path),
                            "that is IPPO", "ippo_mpe_simple_spread", "IPPOWorkflow")


def test_jaxmarl_keywords_are_read_from_the_env_class():
    pytest.importorskip("jaxmarl")
    from evorl.envs.jaxmarl_env import accepted_keywords, check_jaxmarl_kwargs, jaxmarl_class, jaxmarl_step_size

    assert jaxmarl_class("MPE_simple_spread_v3").__name__ == "SimpleSpreadMPE"
    assert {"num_agents", "local_ratio", "rad", "max_steps"} <= accepted_keywords(jaxmarl_class("MPE_simple_spread_v3"))
    check_jaxmarl_kwargs("MPE_simple_spread_v3", {"num_agents": 4, "action_type": "Continuous"})
    assert jaxmarl_step_size("MPE_simple_spread_v3", {"num_agents": 4}) == (4, 4 + 2 * 3 + 2 * 3 + 2 * 3)
    with pytest.raises(ConfigError, match="env.kwargs bogus, typo: JaxMARL's MPE_simple_spread_v3"):
        check_jaxmarl_kwargs("MPE_simple_spread_v3", {"typo": 1, "bogus": 2})


@pytest.mark.parametrize("env, fragments", [
    ({"env_type": "gymnax", "env_name": "MNISTBandit-bsuite"}, ["downloads the MNIST data set", "/tmp/mnist"]),
    ({"env_type": "jaxmarl", "env_name": "MPE_simple_spread_v3", "kwargs": {"num_agents": True}},
     ["env.kwargs.num_agents must be an integer >= 1"]),
], ids=["bsuite_mnist", "agents_bool"])
def test_envs_that_cannot_build_here_are_config_errors(env, fragments, monkeypatch):
    from evorl.config import env_limits

    monkeypatch.setitem(env_limits.DOWNLOADING_ENVS, "MNISTBandit-bsuite",
                        (*env_limits.DOWNLOADING_ENVS["MNISTBandit-bsuite"][:1], "/nonexistent/mnist",
                         env_limits.DOWNLOADING_ENVS["MNISTBandit-bsuite"][2]))
    with pytest.raises(ConfigError) as info:
        parse_section(EnvConfig, env, "env")
    assert all(f.replace("/tmp/mnist", "/nonexistent/mnist") in str(info.value) for f in fragments), str(info.value)


def test_brax_swimmer_is_refused_before_building_where_its_fluid_model_breaks():
    pytest.importorskip("brax")
    from evorl.config.env_limits import brax_fluid_refusal

    refusal = brax_fluid_refusal("swimmer")
    if refusal is None:
        pytest.skip("this brax steps swimmer on this jax")
    with pytest.raises(ConfigError, match=r"env.env_name=swimmer: brax .* cannot step 'swimmer'.*a_min"):
        parse_section(EnvConfig, {"env_type": "brax", "env_name": "swimmer"}, "env")
    assert brax_fluid_refusal("hopper") is None


# --- NSGA-II ---------------------------------------------------------------------------------
def test_nsga2_flags_an_undominated_reference_point_and_nonfinite_objectives():
    from evorl.algorithms.nsga2 import NSGA2Config
    from evorl.algorithms.nsga2_workflow import front_warnings

    nsga2 = NSGA2Config(objectives=("reward_run", "reward_ctrl"), reference_point=(1e9, 1e9))
    metrics = {"train/hypervolume": np.array(0.0), "train/front_size": np.array(3.0),
               "train/best_reward_run": np.array(-2.8), "train/best_reward_ctrl": np.array(-0.01),
               "train/nonfinite_children": np.array(2.0)}
    nonfinite, reference = front_warnings(nsga2, metrics, 5)
    assert nonfinite.startswith("non-finite objectives: up to 2 of 32 children")
    assert reference.startswith("nsga2.reference_point=[1000000000.0, 1000000000.0]: no point of the front dominates")
    assert "reward_run=-2.8" in reference
    fine = {**metrics, "train/hypervolume": np.array(4.0), "train/nonfinite_children": np.array(0.0)}
    assert front_warnings(nsga2, fine, 5) == []


def test_nsga2_reference_point_that_cannot_be_dominated_is_refused():
    from evorl.algorithms.nsga2 import NSGA2Config

    with pytest.raises(ConfigError, match="reference_point"):
        parse_section(NSGA2Config, {"objectives": ["a", "b"], "reference_point": [float("inf"), 0.0]}, "nsga2")


def test_non_dominated_ranks_raises_instead_of_looping_on_a_cyclic_rule(monkeypatch):
    from evorl.rl import multi_objective as mo

    points = jnp.asarray(np.random.default_rng(0).normal(size=(6, 2)), jnp.float32)
    assert sorted(np.asarray(jax.jit(mo.non_dominated_ranks)(points)).tolist())[0] == 0
    monkeypatch.setattr(mo, "dominates", lambda o: ~jnp.eye(o.shape[0], dtype=bool))  # everyone beats everyone

    def ranks(x):  # a fresh function: traced anew with the broken rule
        return mo.non_dominated_ranks(x)

    with pytest.raises(Exception, match="6 members still unranked after as many rounds as members"):
        jax.block_until_ready(jax.jit(ranks)(points))

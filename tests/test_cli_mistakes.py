"""Ordinary mistakes on the command line (issue "Faults and bad input, round two"): each is one
line on stderr and exit status 2, never a traceback, and leaves no empty folder behind."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY

ROOT = Path(__file__).resolve().parents[1]
TINY_OVERRIDES = ["agent.actor_hidden_layer_sizes=[8]", "agent.critic_hidden_layer_sizes=[8]"]


def train_process(args, cwd):
    """``scripts/train.py`` with ``args`` in the order given, as a user runs it (evorl puts
    Hydra's options before the overrides itself: ``test_options_after_overrides_keep_their_meaning``)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "EVORL_COMPILATION_CACHE": "0"}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "train.py"), *args],
                          cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture
def train(train_in_process):
    """``train(args, cwd)``: ``evorl-train args`` run in this test's process, answered as
    :func:`train_process` answers (a ``CompletedProcess``)."""
    return lambda args, cwd: subprocess.CompletedProcess(args, *train_in_process(args, cwd))


def assert_one_line(proc, *parts, status=2):
    """Exit ``status``, no traceback, and one ``evorl:`` line on stderr containing ``parts``;
    returns that line."""
    assert proc.returncode == status, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("evorl: "), proc.stderr
    for part in parts:
        assert part in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def config_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("configs")
    header = "defaults:\n  - _self_\nworkflow_cls: evorl.workflows.PPOWorkflow\n"
    (folder / "interpolation.yaml").write_text(header + "training:\n  learning_rate: ${oops}\n")
    (folder / "latin1.yaml").write_bytes(header.encode() + "# caf\xe9\ntraining:\n  num_envs: 4\n".encode("latin-1"))
    return folder


CASES = {
    "resume_true": (["resume=true"], ["config error: resume=true", "the run folder to continue"]),
    "interpolation": (["training.learning_rate=${oops}"], ["config error: 'training.learning_rate'", "oops"]),
    "interpolation_in_file": (["--config-path={dir}", "--config-name=interpolation"],
                              ["config error: 'training.learning_rate'", "oops"]),
    "not_utf8_file": (["--config-path={dir}", "--config-name=latin1"],
                      ["config error: {dir}/latin1.yaml is not UTF-8 text", "line 4"]),
    "output_dir_forbidden": (["output_dir=/proc/forbidden"], ["cannot create the run folder /proc/forbidden"]),
    "hydra_run_dir_forbidden": (["hydra.run.dir=/proc/forbidden"], ["cannot create the run folder /proc/forbidden"]),
    "coordinator_address": (["distributed.coordinator_address=notanaddress", "distributed.num_processes=2",
                             "distributed.process_id=0"], ["distributed.coordinator_address", "host:port"]),
    "gymnasium_kwarg": (["env.env_type=gymnasium", "env.kwargs={bogus_kw:1}"],
                        ["config error: env.kwargs", "CartPole-v1", "'bogus_kw'"]),
    "algo_unknown": (["algo=ppo2"], ["config error: algo=ppo2", "Did you mean 'algo=ppo'?",
                                     "Valid: a2c, ddpg, dqn, impala, ppo, reinforce, sac, td3"]),
    "env_unknown": (["env=nosuchenv"], ["config error: env=nosuchenv", "acrobot, cartpole, pendulum"]),
    "int_key_given_1e5": (["training.num_iterations=1e5"],
                          ["config error: 'training.num_iterations' = 100000.0 is a float",
                           "write training.num_iterations=100000."]),
    "env_id_as_group": (["env=CartPole-v1"], ["config error: env=CartPole-v1: no such env group",
                                              "(env= chooses one: acrobot, cartpole, pendulum)",
                                              "set env.env_name=CartPole-v1", "Did you mean 'env=cartpole'?"]),
}


#: The cases run as a process of their own in the default test set (``-m slow``: every case);
#: the others run in the test's process there.
PROCESS_CASES = ("not_utf8_file", "coordinator_address")


def check_mistake(run, args, parts, config_dir, tmp_path):
    args = [a.replace("{dir}", str(config_dir)) for a in args]
    run_dir = [] if any(a.startswith("hydra.run.dir=") for a in args) else [f"hydra.run.dir={tmp_path / 'run'}"]
    assert_one_line(run([*TINY_OVERRIDES, *args, *run_dir], tmp_path), *[p.replace("{dir}", str(config_dir))
                                                                          for p in parts])
    assert not (tmp_path / "run").exists() and not (tmp_path / "outputs").exists()  # no empty folder left


@pytest.mark.parametrize("args, parts", [CASES[c] for c in CASES if c not in PROCESS_CASES],
                         ids=[c for c in CASES if c not in PROCESS_CASES])
def test_a_mistake_is_one_line_and_exit_2(args, parts, config_dir, tmp_path, train):
    check_mistake(train, args, parts, config_dir, tmp_path)


@pytest.mark.parametrize("args, parts", [pytest.param(*CASES[c], id=c, marks=() if c in PROCESS_CASES else
                                                      pytest.mark.slow) for c in CASES])
def test_a_mistake_to_the_command_is_one_line_and_exit_2(args, parts, config_dir, tmp_path):
    check_mistake(train_process, args, parts, config_dir, tmp_path)


def test_a_missing_extra_names_it(tmp_path, train):
    try:
        import mujoco_playground  # noqa: F401
        pytest.skip("mujoco_playground is installed")
    except ImportError:
        pass
    assert_one_line(train([*TINY_OVERRIDES, "env.env_type=playground", f"hydra.run.dir={tmp_path / 'run'}"], tmp_path),
                    "pip install", "[playground]")


def test_hydra_settings_take_a_run_folder_file_as_its_folder(tmp_path):
    from evorl.app.cli import hydra_settings

    (tmp_path / "config.yaml").write_text("seed: 0\n")
    (tmp_path / "run.json").write_text("{}\n")
    assert f"hydra.run.dir={tmp_path}" in hydra_settings([f"resume={tmp_path / 'run.json'}"])
    assert not any(s.startswith("hydra.run.dir=") for s in hydra_settings(["resume=true"]))
    assert not any(s.startswith("hydra.run.dir=") for s in hydra_settings([f"resume={tmp_path / 'nosuch'}"]))


# --- a run folder that cannot be resumed ------------------------------------------------------
@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished run of two iterations (a checkpoint at iteration 2)."""
    from evorl.app.experiment import run_experiment

    cfg = {**TINY, "training": {**TINY["training"], "num_iterations": 2}}
    return run_experiment(cfg, output_dir=tmp_path_factory.mktemp("finished") / "run").run_dir


@pytest.fixture
def run_copy(finished, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(finished, run_dir)
    return run_dir


def dead_pid() -> int:
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)


@pytest.mark.parametrize("garbled", [b"seed: \xff\xfe\n", b"{not: [yaml\n"])
def test_a_garbled_config_yaml_is_one_line(run_copy, tmp_path, garbled, train):
    (run_copy / "config.yaml").write_bytes(garbled)
    assert_one_line(train([f"resume={run_copy}"], tmp_path), f"config error: {run_copy / 'config.yaml'}")


def test_a_run_killed_before_its_first_checkpoint_says_so_and_how_to_start_afresh(run_copy, tmp_path, train):
    """Killed during compilation: config.yaml, run.json 'running' (its process dead), run.lock."""
    shutil.rmtree(run_copy / "checkpoints")
    pid = dead_pid()
    info = json.loads((run_copy / "run.json").read_text())
    (run_copy / "run.json").write_text(json.dumps({**info, "status": "running", "pid": pid, "end_time": None}))
    (run_copy / "run.lock").write_text(json.dumps({"pid": pid, "host": "thishost", "start_time": "then"}))
    line = assert_one_line(train([f"resume={run_copy}"], tmp_path), f"{run_copy} has no checkpoint yet",
                           f"output_dir={run_copy}", f"--config-path={run_copy} --config-name=config")
    assert f"process {pid}" in line
    info = json.loads((run_copy / "run.json").read_text())
    assert info["status"] == "interrupted" and f"process {pid} no longer running" in info["reason"]


@pytest.mark.parametrize("folder_key", ["hydra.run.dir", "output_dir"])
def test_resume_with_another_folder_is_refused_not_ignored(run_copy, tmp_path, folder_key, train):
    elsewhere = tmp_path / "elsewhere"
    line = assert_one_line(train([f"resume={run_copy}", f"{folder_key}={elsewhere}"], tmp_path),
                           f"config error: resume={run_copy} continues in that run's own folder: {folder_key}=",
                           "copy the folder and resume the copy")
    assert str(elsewhere) in line and not elsewhere.exists()


def test_resume_with_a_config_name_for_another_run_is_refused_not_ignored(run_copy, tmp_path, train):
    """The run is PPO on gymnax CartPole-v1: --config-name sac_brax_inverted_pendulum asks for
    another run; ppo_cartpole names the same one (compared by algorithm and env only)."""
    line = assert_one_line(train(["--config-name", "sac_brax_inverted_pendulum", f"resume={run_copy}"], tmp_path),
                           f"config error: resume={run_copy} continues that run's own config.yaml",
                           "workflow_cls='evorl.workflows.SACWorkflow' (the run's: 'evorl.workflows.PPOWorkflow')",
                           "env.env_name='inverted_pendulum' (the run's: 'CartPole-v1')", "Drop --config-name")
    from evorl.app.cli_args import check_resume_identity

    resumed = {"workflow_cls": "evorl.workflows.PPOWorkflow", "env": {"env_name": "CartPole-v1", "env_type": "gymnax"},
               "seed": 3, "resume": str(run_copy)}
    composed = {**resumed, "seed": 0}  # ppo_cartpole.yaml's identity; other keys come from the run
    assert check_resume_identity(composed, resumed) is resumed
    assert line


def test_resuming_with_fewer_iterations_than_the_checkpoint_is_refused(run_copy, tmp_path, train):
    before = (run_copy / "config.yaml").read_bytes()
    assert_one_line(train([f"resume={run_copy}", "training.num_iterations=1"], tmp_path),
                    "config error: ", "training.num_iterations=1", "iteration 2", "nothing")
    assert (run_copy / "config.yaml").read_bytes() == before


def test_options_after_overrides_keep_their_meaning(tmp_path):
    """``algo=sac env=pendulum --cfg job`` as typed: Hydra's argparse takes one run of overrides,
    so evorl gathers them after the options (it appends its own settings too)."""
    from evorl.app.cli_args import overrides_last

    assert overrides_last(["algo=sac", "--cfg", "job", "env=pendulum", "-m", "--info", "config", "seed=1"]) == [
        "--cfg", "job", "-m", "--info", "config", "algo=sac", "env=pendulum", "seed=1"]
    assert overrides_last(["--info", "seed=1", "--config-name=dqn_cartpole", "--config-name", "x"]) == [
        "--info", "--config-name=dqn_cartpole", "--config-name", "x", "seed=1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "train.py"), "algo=sac", "env=pendulum", "--cfg",
                           "job", "training.num_iterations=7"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "workflow_cls: evorl.workflows.SACWorkflow" in proc.stdout and "env_name: Pendulum-v1" in proc.stdout
    assert "num_iterations: 7" in proc.stdout and not list(tmp_path.iterdir())

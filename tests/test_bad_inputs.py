"""Fuzzing the config: every bad input is one ConfigError naming the key, raised before
anything is compiled; through the command line, exit status 2 and one line."""

import copy
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import TINY

from evorl.config import ConfigError
from evorl.app.experiment import run_experiment
from evorl.workflows import PPOWorkflow

ROOT = Path(__file__).resolve().parents[1]
INF, NAN = float("inf"), float("nan")


def edit(section=None, **values):
    """A change to TINY: keys of ``section`` (None: top-level keys)."""
    def apply(cfg):
        target = cfg if section is None else cfg.setdefault(section, {})
        target.update(values)
    return apply


def replace(section, value):
    def apply(cfg):
        cfg[section] = value
    return apply


def pbt(**keys):
    """PBT over four agents (``training.num_seeds``), evolving the learning rate unless ``keys`` say."""
    def apply(cfg):
        cfg["training"]["num_seeds"] = 4
        cfg["pbt"] = {"enabled": True, "hyperparameters": {"training.learning_rate": [1e-5, 1e-2]}, **keys}
    return apply


def both(*changes):
    def apply(cfg):
        for change in changes:
            change(cfg)
    return apply


def workflow(name, agent=None):
    def apply(cfg):
        cfg["workflow_cls"] = f"evorl.workflows.{name}"
        cfg["agent"] = {"actor_hidden_layer_sizes": [8], "critic_hidden_layer_sizes": [8], **(agent or {})}
    return apply


def dqn(**training):
    """DQN (the off-policy training section) with ``training`` keys; PPO's keys of TINY left out."""
    def apply(cfg):
        cfg["workflow_cls"] = "evorl.workflows.DQNWorkflow"
        cfg["agent"] = {"q_hidden_layer_sizes": [8]}
        cfg["training"] = {"num_iterations": 4, "num_envs": 4, "rollout_length": 1, "n_step": 1, "buffer_size": 256,
                           "batch_size": 8, "learning_starts": 8, "eval_interval": 2, "eval_episodes": 2, **training}
    return apply


# (change to TINY, text the error's first line must contain)
BAD_INPUTS = {
    # training: finite floats, ranges, types, lists of hyperparameters
    "lr_inf": (edit("training", learning_rate=INF), "training.learning_rate"),
    "lr_nan": (edit("training", learning_rate=NAN), "training.learning_rate"),
    "lr_minus_inf": (edit("training", learning_rate=-INF), "training.learning_rate"),
    "lr_inf_string": (edit("training", learning_rate="inf"), "training.learning_rate"),
    "lr_yaml_inf_string": (edit("training", learning_rate=".inf"), "training.learning_rate"),
    "lr_zero": (edit("training", learning_rate=0), "training.learning_rate"),
    "lr_list_negative": (edit("training", learning_rate=[1e-3, -1.0]), "training.learning_rate"),
    "lr_list_empty": (edit("training", learning_rate=[]), "training.learning_rate"),
    "adam_eps_inf": (edit("training", adam_eps=INF), "training.adam_eps"),
    "adam_eps_zero": (edit("training", adam_eps=0.0), "training.adam_eps"),
    "optimizer_unknown": (edit("training", optimizer="sgd"), "training.optimizer must be one of adam, rmsprop"),
    "max_grad_norm_inf": (edit("training", max_grad_norm=INF), "training.max_grad_norm"),
    "max_grad_norm_negative": (edit("training", max_grad_norm=-1.0), "training.max_grad_norm"),
    "gamma_above_1": (edit("training", gamma=1.5), "training.gamma"),
    "gamma_list": (edit("training", gamma=[0.9, 1.5]), "training.gamma"),
    "gamma_nan": (edit("training", gamma=NAN), "training.gamma"),
    "gae_lambda_list_nan": (edit("training", gae_lambda=[0.95, NAN]), "training.gae_lambda"),
    "gae_lambda_negative": (edit("training", gae_lambda=-0.1), "training.gae_lambda"),
    "num_envs_zero": (edit("training", num_envs=0), "training.num_envs"),
    "num_envs_fraction": (edit("training", num_envs=2.5), "training.num_envs"),
    "num_envs_word": (edit("training", num_envs="four"), "training.num_envs"),
    "num_envs_bool": (edit("training", num_envs=True), "training.num_envs"),
    "num_iterations_inf": (edit("training", num_iterations=INF), "training.num_iterations"),
    "num_iterations_1e12": (edit("training", num_iterations=1e12), "'training.num_iterations' = 1000000000000 is "
                                                                     "out of range: it must be at most 2147483647"),
    "num_envs_1e11": (edit("training", num_envs=100000000000), "'training.num_envs' = 100000000000"),
    "num_envs_minus_2_pow_40": (edit("training", num_envs=-2**40), "at least -2147483648"),
    "eval_episodes_2_pow_31": (edit("training", eval_episodes=2**31), "'training.eval_episodes' = 2147483648"),
    "steps_per_iteration_2_pow_32": (edit("training", num_envs=2**20, rollout_length=2**12),
                                     "training.num_envs x training.rollout_length = 1048576 x 4096"),
    "lr_numeric_string": (edit("training", learning_rate="1e-3"), "'training.learning_rate' = '1e-3' is text, not a "
                                                                   "number: give the float itself, unquoted (PyYAML's "
                                                                   "safe_load reads 1e-3 as text: write 1.0e-3)"),
    "lr_numpy_string": (edit("training", learning_rate=np.str_("0.1")), "'training.learning_rate' = '0.1' is text"),
    "lr_word": (edit("training", learning_rate="fast"), "'training.learning_rate' = 'fast' has type str"),
    "lr_list_repeated": (edit("training", learning_rate=[1e-3, 1e-3]), "'training.learning_rate' = [0.001, 0.001] "
                                                                        "repeats 0.001"),
    "gamma_list_repeated": (edit("training", gamma=[0.9, 0.99, 0.9]), "'training.gamma' = [0.9, 0.99, 0.9] repeats 0.9"),
    "rollout_length_negative": (edit("training", rollout_length=-5), "training.rollout_length"),
    "num_minibatches_not_dividing": (edit("training", num_minibatches=3), "training.num_minibatches"),
    "num_epochs_list": (edit("training", num_epochs=[1, 2]), "training.num_epochs"),
    "eval_interval_zero": (edit("training", eval_interval=0), "training.eval_interval"),
    "num_seeds_zero": (edit("training", num_seeds=0), "training.num_seeds"),
    "actor_lag_negative": (edit("training", actor_lag=-1), "training.actor_lag"),
    "train_episode_length_zero": (edit("training", train_episode_length=0), "training.train_episode_length"),
    "anneal_lr_word": (edit("training", anneal_lr="maybe"), "training.anneal_lr"),
    "training_unknown_key": (edit("training", lr=1e-3), "training.lr"),
    "training_int": (replace("training", 5), "'training'"),
    "training_list": (replace("training", [1, 2]), "'training'"),
    # agent (PPO)
    "vf_coef_inf": (edit("agent", vf_coef=INF), "agent.vf_coef"),
    "vf_coef_negative": (edit("agent", vf_coef=-1.0), "vf_coef"),
    "ent_coef_nan": (edit("agent", ent_coef=NAN), "agent.ent_coef"),
    "clip_epsilon_zero": (edit("agent", clip_epsilon=0.0), "clip_epsilon"),
    "clip_epsilon_list_inf": (edit("agent", clip_epsilon=[0.1, INF]), "agent.clip_epsilon"),
    "clip_epsilon_list_repeated": (edit("agent", clip_epsilon=[0.2, np.float64(0.2)]), "'agent.clip_epsilon'"),
    "actor_layers_2_pow_31": (edit("agent", actor_hidden_layer_sizes=[2**31]), "agent.actor_hidden_layer_sizes[0]"),
    "target_kl_inf": (edit("agent", target_kl=INF), "agent.target_kl"),
    "target_kl_negative": (edit("agent", target_kl=-0.1), "target_kl"),
    "value_clip_epsilon_nan": (edit("agent", value_clip_epsilon=NAN), "agent.value_clip_epsilon"),
    "kl_coef_negative": (edit("agent", kl_coef=-1.0), "kl_coef"),
    "init_log_std_nan": (edit("agent", init_log_std=NAN), "agent.init_log_std"),
    "init_log_std_inf": (edit("agent", init_log_std=INF), "agent.init_log_std"),
    "init_log_std_list": (edit("agent", init_log_std=[0.0, 1.0]), "agent.init_log_std"),
    "actor_layers_empty": (edit("agent", actor_hidden_layer_sizes=[]), "agent.actor_hidden_layer_sizes"),
    "critic_layers_empty": (edit("agent", critic_hidden_layer_sizes=[]), "agent.critic_hidden_layer_sizes"),
    "actor_layers_zero": (edit("agent", actor_hidden_layer_sizes=[8, 0]), "agent.actor_hidden_layer_sizes"),
    "actor_layers_word": (edit("agent", actor_hidden_layer_sizes=[8, "x"]), "agent.actor_hidden_layer_sizes"),
    "activation_unknown": (edit("agent", activation="sigmoidal"), "activation"),
    "network_unknown": (edit("agent", network="rnn"), "agent.network"),
    "distribution_unknown": (edit("agent", policy_distribution="beta"), "agent.policy_distribution"),
    "normalize_obs_word": (edit("agent", normalize_obs="yes"), "agent.normalize_obs"),
    "agent_misspelt": (edit("agent", clip_epsilom=0.1), "agent.clip_epsilom"),
    "agent_renamed": (edit("agent", normalize_advantages=True), "agent.normalize_advantages"),
    "agent_int": (replace("agent", 5), "'agent'"),
    # env
    "reward_scale_inf": (edit("env", reward_scale=INF), "env.reward_scale"),
    "reward_scale_zero": (edit("env", reward_scale=0.0), "env.reward_scale"),
    "episode_length_zero": (edit("env", episode_length=0), "env.episode_length"),
    "action_repeat_zero": (edit("env", action_repeat=0), "env.action_repeat"),
    "env_type_unknown": (edit("env", env_type="gym"), "env.env_type"),
    "env_name_misspelt": (edit("env", env_name="CartPol-v1"), "env_name"),
    "brax_key_on_gymnax": (edit("env", backend="mjx"), "env.backend"),
    "env_string": (replace("env", "CartPole-v1"), "'env'"),
    "env_none": (replace("env", None), "config section 'env' is null"),
    "episode_length_2_pow_31": (edit("env", episode_length=2**31), "'env.episode_length' = 2147483648"),
    # top level
    "seed_huge": (edit(seed=99999999999999999999), "'seed'"),
    "seed_2_pow_32": (edit(seed=2**32), "'seed'"),
    "seed_negative": (edit(seed=-1), "'seed'"),
    "seed_word": (edit(seed="abc"), "'seed'"),
    "seed_fraction": (edit(seed=1.5), "'seed'"),
    "seed_whole_float": (edit(seed=1e3), "'seed' = 1000.0 must be an integer in [0, 2**32) (it is a float: "
                                         "write seed=1000)"),
    "seed_numpy_float": (edit(seed=np.float64(7.0)), "'seed'"),
    "seed_bool": (edit(seed=True), "'seed'"),
    "resume_empty": (edit(resume=""), "resume must be a run folder path"),
    "output_dir_empty": (edit(output_dir=""), "output_dir"),
    "resume_number": (edit(resume=5), "'resume'"),
    "workflow_abstract_base": (edit(workflow_cls="evorl.workflows.Workflow"), "evorl.workflows.PPOWorkflow"),
    "workflow_on_policy_base": (edit(workflow_cls="evorl.workflows.OnPolicyWorkflow"), "workflow_cls"),
    "workflow_rl_base": (edit(workflow_cls="evorl.workflows.RLWorkflow"), "workflow_cls"),
    "workflow_not_a_workflow": (edit(workflow_cls="builtins.int"), "workflow_cls"),
    "workflow_missing_module": (edit(workflow_cls="nosuchmodule.PPOWorkflow"), "workflow_cls"),
    "top_level_misspelt": (edit(trainig={}), "'trainig'"),
    # checkpoint, logging, distributed
    "save_interval_zero": (edit("checkpoint", save_interval=0), "checkpoint.save_interval"),
    "max_to_keep_zero": (edit("checkpoint", max_to_keep=0), "checkpoint.max_to_keep"),
    "checkpoint_int": (replace("checkpoint", 5), "'checkpoint'"),
    "checkpoint_none": (replace("checkpoint", None), "config section 'checkpoint' is null"),
    # pbt
    "pbt_without_hyperparameters": (pbt(hyperparameters={}), "pbt.enabled=true but pbt.hyperparameters is empty"),
    "pbt_interval_not_a_multiple": (both(edit("training", eval_interval=2), pbt(interval=3)),
                                    "pbt.interval=3 must be a multiple of training.eval_interval=2"),
    "pbt_none": (replace("pbt", None), "config section 'pbt' is null"),
    "recorder_unknown": (edit("logging", recorders=["console", "foo"]), "logging.recorders"),
    "console_unknown": (edit("logging", console="fancy"), "logging.console"),
    "layout_unknown": (edit("distributed", layout="agents"), "distributed.layout"),
    "num_processes_alone": (edit("distributed", num_processes=2), "distributed"),
    # other algorithms' agent keys
    "impala_rho_bar_nan": (workflow("IMPALAWorkflow", {"vtrace_rho_bar": NAN}), "agent.vtrace_rho_bar"),
    "impala_c_bar_minus_inf": (workflow("IMPALAWorkflow", {"vtrace_c_bar": -INF}), "agent.vtrace_c_bar"),
    "impala_pg_rho_bar_zero": (workflow("IMPALAWorkflow", {"pg_rho_bar": 0.0}), "pg_rho_bar"),
    "impala_baseline_cost_inf": (workflow("IMPALAWorkflow", {"baseline_cost": INF}), "agent.baseline_cost"),
    "a2c_vf_coef_inf": (workflow("A2CWorkflow", {"vf_coef": INF}), "agent.vf_coef"),
    # the optimiser and the memory check
    "optimizer_unknown": (edit("training", optimizer="sgd"), "training.optimizer"),
    "max_memory_gb_negative": (edit("runner", max_memory_gb=-1.0), "runner.max_memory_gb"),
    "max_memory_gb_word": (edit("runner", max_memory_gb="lots"), "runner.max_memory_gb"),
    "memory_over_the_limit": (edit("runner", max_memory_gb=1e-6), "runner.max_memory_gb"),
    # DQN's off-policy training section
    "dqn_buffer_size_zero": (dqn(buffer_size=0), "training.buffer_size"),
    "dqn_actor_lag_negative": (dqn(actor_lag=-1), "training.actor_lag must be >= 0"),
    "dqn_buffer_size_not_rows": (dqn(buffer_size=258), "training.buffer_size=258 must be a multiple of training.num_envs=4"),
    "dqn_batch_size_zero": (dqn(batch_size=0), "training.batch_size"),
    "dqn_n_step_zero": (dqn(n_step=0), "training.n_step"),
    "dqn_num_updates_zero": (dqn(num_updates=0), "training.num_updates"),
    "dqn_tau_zero": (dqn(tau=0.0), "training.tau"),
    "dqn_tau_above_one": (dqn(tau=1.5), "training.tau"),
    "dqn_gamma_above_one": (dqn(gamma=1.5), "training.gamma"),
    "dqn_learning_starts_past_the_buffer": (dqn(buffer_size=64, learning_starts=1000), "training.learning_starts"),
    "dqn_target_update_period_zero": (dqn(target_update_period=0), "training.target_update_period"),
    # a negative clip norm turns the gradient round (optax scales by max_norm / norm)
    "dqn_max_grad_norm_negative": (dqn(max_grad_norm=-1.0), "training.max_grad_norm must be > 0 or null"),
    "dqn_max_grad_norm_zero": (dqn(max_grad_norm=0.0), "training.max_grad_norm must be > 0 or null"),
    "dqn_adam_eps_negative": (dqn(adam_eps=-1.0), "training.adam_eps must be > 0"),
    "dqn_batch_past_the_buffer": (dqn(batch_size=257), "training.batch_size=257 exceeds training.buffer_size=256"),
    "dqn_n_step_past_the_rollout": (dqn(n_step=2), "training.n_step=2 exceeds training.rollout_length=1"),
    "dqn_cnn_on_vector_observations": (both(dqn(), edit("agent", network="cnn")),
                                       "agent.network='cnn' needs image observations"),
    "ppo_agent_gamma": (edit("agent", gamma=0.9), "'agent.gamma' is not an agent key of PPO: set 'training.gamma'"),
    "dqn_on_policy_key": (dqn(num_minibatches=4), "training.num_minibatches"),
    "dqn_pbt_evolving_the_batch_size": (both(dqn(), pbt(hyperparameters={"training.batch_size": [8, 64]})),
                                        "'training.batch_size' cannot evolve"),
    "ppo_without_a_buffer_to_leave_out": (edit("checkpoint", save_buffer=False), "checkpoint.save_buffer=false"),
}


class CompileWatch:
    """Records what JAX traces: any program beyond a single NumPy-style operation (building
    the env's spaces runs a few, eagerly) means that compilation started."""

    def __init__(self):
        self.names: list[str] = []
        jax.monitoring.register_event_duration_secs_listener(self._record)

    def _record(self, event, duration, fun_name=None, **kwargs):
        if event == "/jax/core/compile/jaxpr_trace_duration":
            self.names.append(str(fun_name))

    def programs(self) -> list[str]:
        return [n for n in self.names if not (hasattr(jnp, n) or hasattr(jax.lax, n))]


@pytest.fixture(scope="module")
def compile_watch():
    return CompileWatch()


@pytest.mark.parametrize("change, key", list(BAD_INPUTS.values()), ids=list(BAD_INPUTS))
def test_bad_input_is_one_config_error_naming_the_key_before_compiling(change, key, compile_watch):
    cfg = copy.deepcopy(TINY)
    change(cfg)
    jax.clear_caches()  # a program compiled by an earlier test would otherwise not be traced again
    compile_watch.names.clear()
    with pytest.raises(ConfigError) as info:
        run_experiment(cfg)
    first_line = str(info.value).splitlines()[0]
    assert key in first_line, first_line
    assert compile_watch.programs() == [], f"compiled before failing: {compile_watch.programs()}"


def test_watch_sees_a_compilation(compile_watch):
    """The check above is not vacuous: building and initialising a workflow is seen."""
    jax.clear_caches()
    compile_watch.names.clear()
    PPOWorkflow.build_from_config(TINY, recorders=[]).init(jax.random.PRNGKey(0))
    assert compile_watch.programs()


def test_brax_env_name_is_a_config_error():
    pytest.importorskip("brax")
    cfg = copy.deepcopy(TINY)
    cfg["env"]["env_type"] = "brax"
    with pytest.raises(ConfigError, match=r"Unknown brax env_name 'CartPole-v1' \(env.env_name"):
        run_experiment(cfg)


@pytest.mark.parametrize("value", [INF, ".inf", "inf"])
def test_inf_means_no_clipping_for_impala_thresholds(value):
    from evorl.workflows import IMPALAWorkflow

    cfg = {**copy.deepcopy(TINY), "workflow_cls": "evorl.workflows.IMPALAWorkflow",
           "agent": {"vtrace_rho_bar": value, "vtrace_c_bar": value, "pg_rho_bar": [1.0, value]}}
    config = IMPALAWorkflow.parse_config(cfg)
    assert config.agent.vtrace_rho_bar == config.agent.vtrace_c_bar == INF
    assert config.sweep == (("agent.pg_rho_bar", (1.0, INF)),)


def test_pbt_interval_need_not_be_a_multiple_with_train_fitness_or_disabled():
    for change in (pbt(interval=3, fitness="train"), pbt(interval=3, enabled=False)):
        cfg = copy.deepcopy(TINY)
        cfg["training"]["eval_interval"] = 2
        change(cfg)
        assert PPOWorkflow.parse_config(cfg).pbt.interval == 3


def test_a_left_out_section_takes_its_defaults():
    cfg = {key: value for key, value in copy.deepcopy(TINY).items() if key not in ("env", "checkpoint")}
    config = PPOWorkflow.parse_config(cfg)
    assert config.env.env_name == "CartPole-v1" and config.checkpoint.enabled


@pytest.mark.parametrize("value", ["+.inf", "Inf"])
def test_infinity_as_text_is_read_and_a_number_as_text_is_not(value):
    """YAML and Hydra leave some spellings of infinity as text (``x: inf``, ``x=.inf``): they
    are read; a number written as text (``'2.0'``) is refused."""
    from evorl.workflows import IMPALAWorkflow

    cfg = {**copy.deepcopy(TINY), "workflow_cls": "evorl.workflows.IMPALAWorkflow", "agent": {"vtrace_rho_bar": value}}
    assert IMPALAWorkflow.parse_config(cfg).agent.vtrace_rho_bar == INF
    cfg["agent"]["vtrace_rho_bar"] = "2.0"
    with pytest.raises(ConfigError, match="'agent.vtrace_rho_bar' = '2.0' is text, not a number"):
        IMPALAWorkflow.parse_config(cfg)


def test_int32_limits_are_accepted():
    cfg = copy.deepcopy(TINY)
    cfg["training"].update(num_iterations=2**31 - 1, eval_interval=2**31 - 1)
    cfg["checkpoint"]["save_interval"] = None
    config = PPOWorkflow.parse_config(cfg)
    assert config.training.num_iterations == 2**31 - 1


def test_numpy_scalars_are_the_numbers_they_hold():
    cfg = copy.deepcopy(TINY)
    cfg["seed"] = np.int64(8)
    cfg["training"].update(num_envs=np.int64(8), learning_rate=np.float32(0.5), anneal_lr=np.bool_(False))
    cfg["agent"]["clip_epsilon"] = [np.float64(0.1), np.float32(0.25)]
    config = PPOWorkflow.parse_config(cfg)
    assert config.seed == 8 and type(config.seed) is int
    assert config.training.num_envs == 8 and type(config.training.num_envs) is int
    assert config.training.learning_rate == 0.5 and type(config.training.learning_rate) is float
    assert config.training.anneal_lr is False
    assert config.sweep == (("agent.clip_epsilon", (0.1, 0.25)),)


# --- through the command line ---------------------------------------------------------------
TINY_OVERRIDES = ["agent.actor_hidden_layer_sizes=[8]", "agent.critic_hidden_layer_sizes=[8]"]
CLI_CASES = {
    "lr_inf": (["training.learning_rate=inf"], "training.learning_rate"),
    "gae_lambda_list_nan": (["training.gae_lambda=[0.95,nan]"], "training.gae_lambda"),
    "seed_huge": (["seed=99999999999999999999"], "'seed' = 99999999999999999999 must be in [0, 2**32)"),
    "resume_empty": (["resume="], "resume must be a run folder path"),
    "num_iterations_1e12": (["training.num_iterations=1e12"],
                            "'training.num_iterations' = 1000000000000 is out of range: it must be at most 2147483647"),
    "num_envs_1e11": (["training.num_envs=100000000000"], "'training.num_envs' = 100000000000 is out of range"),
    "seed_1e3": (["seed=1e3"], "'seed' = 1000.0 must be an integer"),
    "lr_list_repeated": (["training.learning_rate=[1e-3,1e-3]"], "'training.learning_rate' = [0.001, 0.001] repeats"),
    "pbt_without_hyperparameters": (["pbt.enabled=true", "training.num_seeds=4"],
                                    "pbt.enabled=true but pbt.hyperparameters is empty"),
    "pbt_interval_not_a_multiple": (["pbt.enabled=true", "training.num_seeds=4", "pbt.interval=5",
                                     "pbt.hyperparameters.training.learning_rate=[1e-5,1e-2]"],
                                    "pbt.interval=5 must be a multiple of training.eval_interval=10"),
    "layers_empty": (["agent.actor_hidden_layer_sizes=[]"], "agent.actor_hidden_layer_sizes"),
    "brax_cartpole": (["env.env_type=brax"], "env.env_name"),
    "abstract_workflow": (["workflow_cls=evorl.workflows.Workflow"], "Known workflows"),
    "yaml_syntax": (["--config-path={dir}", "--config-name=syntax"], "syntax.yaml, line 6, column 1"),
    "yaml_section_int": (["--config-path={dir}", "--config-name=section"],
                         "config section 'training' must be a mapping"),
    # Hydra's own override errors: one line in evorl's words, status 2 (they were Hydra's lines and 1)
    "group_with_a_config_name": (["--config-name=dqn_cartpole", "env=pendulum"],
                                 "env= chooses a config group, which only the default config composes"),
    "comma_values_without_m": (["training.learning_rate=1e-3,2e-3"],
                               "a list is training.learning_rate=[1e-3,2e-3]"),
}


@pytest.fixture(scope="module")
def config_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("configs")
    header = "defaults:\n  - _self_\nworkflow_cls: evorl.workflows.PPOWorkflow\ntraining:\n"
    (folder / "syntax.yaml").write_text(header + "  num_envs: [4, 8\n")
    (folder / "section.yaml").write_text(header.replace("training:\n", "training: 5\n"))
    return folder


def assert_cli_config_error(args, key, cwd):
    """``scripts/train.py`` with ``args`` (Hydra's options first) exits with status 2 and one
    line ``evorl: config error: ...`` containing ``key``, no traceback."""
    options = [a for a in args if a.startswith("--")]  # Hydra's options come before the overrides
    overrides = [a for a in args if not a.startswith("--")]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "EVORL_COMPILATION_CACHE": "0"}
    env.pop("HYDRA_FULL_ERROR", None)
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "train.py"), *options, *overrides,
                           f"hydra.run.dir={cwd / 'run'}"],
                          cwd=cwd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("evorl:")]
    assert len(errors) == 1 and errors[0].startswith("evorl: config error: ") and key in errors[0], proc.stderr


def cli_args(args, config_dir):
    """Hydra's options, the tiny network, then the case's overrides."""
    args = [a.format(dir=config_dir) for a in args]
    options = [a for a in args if a.startswith("--")]
    return [*options, *TINY_OVERRIDES, *[a for a in args if a not in options]]


@pytest.mark.parametrize("args, key", list(CLI_CASES.values()), ids=list(CLI_CASES))
def test_bad_input_through_the_cli_is_exit_2_and_one_line(args, key, config_dir, tmp_path, train_in_process):
    status, _, err = train_in_process([*cli_args(args, config_dir), f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    assert status == 2 and "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("evorl:")]
    assert len(errors) == 1 and errors[0].startswith("evorl: config error: ") and key in errors[0], err


#: The cases whose command runs as its own process in the default test set (``-m slow``: all).
CLI_PROCESS_CASES = ("seed_1e3", "yaml_syntax")


@pytest.mark.parametrize("args, key", [pytest.param(*CLI_CASES[case], id=case, marks=() if case in CLI_PROCESS_CASES
                                                    else pytest.mark.slow) for case in CLI_CASES])
def test_bad_input_to_the_command_is_exit_2_and_one_line(args, key, config_dir, tmp_path):
    assert_cli_config_error(cli_args(args, config_dir), key, tmp_path)


def test_es_config_with_the_async_runner_is_exit_2_and_one_line(tmp_path, train_in_process):
    pytest.importorskip("evosax")
    status, _, err = train_in_process(["--config-name=es_openes_cartpole", "runner.mode=async",
                                       f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    assert status == 2 and err.startswith("evorl: config error: ") and err.count("\n") == 1, err
    assert "runner.mode=async: ESWorkflow has no actors and learner" in err

"""The rules of a run that read several config sections together, or a fact of the built env or
agent (its number of agents, its episode length, whether it steps on the host, whether it learns
from whole sequences). Each is a function of plain values, called on a workflow's build path
before anything is compiled; the layers below trust what passed."""

from __future__ import annotations

from typing import Any

from evorl.config.env import HOST_ENV_TYPES
from evorl.config.errors import ConfigError, require


# --- every RL workflow ----------------------------------------------------------------------
def check_save_buffer(save_buffer: bool, keeps_buffer: bool, name: str) -> None:
    """``checkpoint.save_buffer: false`` applies to a workflow whose state holds a replay buffer."""
    require(save_buffer or keeps_buffer,
            f"checkpoint.save_buffer=false applies to runs with a replay buffer (DQN, DDPG, TD3, SAC, CEM-RL); "
            f"{name} keeps none: remove the key.")


def check_env_agents(env_agents: int, env_is_multi_agent: bool, algorithm_is_multi_agent: bool, name: str,
                     env_name: str, env_type: str, single_agent_alternative: str) -> None:
    """A multi-agent env for a single-agent algorithm, or the reverse, is a config error."""
    if env_is_multi_agent and not algorithm_is_multi_agent:
        raise ConfigError(f"env {env_name!r} ({env_type}) has {env_agents} agents; "
                          f"{name} trains one: use a multi-agent algorithm (IPPOWorkflow, MAPPOWorkflow; "
                          f"MATD3Workflow, MADDPGWorkflow for continuous actions).")
    if algorithm_is_multi_agent and not env_is_multi_agent:
        raise ConfigError(f"{name} trains the agents of a multi-agent env (env_type jaxmarl); env "
                          f"{env_name!r} ({env_type}) has one agent: use {single_agent_alternative}.")


def check_host_env_runner(asynchronous: bool, env_on_host: bool, env_type: str, mode: str) -> None:
    """A host env (stepped in Python) trains with the actor-learner."""
    require(asynchronous or not env_on_host,
            f"env_type {env_type!r} steps its environments on the host, outside compiled programs: "
            f"train it with runner.mode=async (or auto), not runner.mode={mode}.")


def check_train_episode_length(train_episode_length: int, episode_length: int) -> None:
    """``training.train_episode_length`` at most the env's (evaluation) episode length."""
    require(train_episode_length <= episode_length,
            f"training.train_episode_length={train_episode_length} must be <= the evaluation "
            f"episodes' length {episode_length} (env.episode_length).")


# --- on-policy ------------------------------------------------------------------------------
def check_one_gradient_step(name: str, num_epochs: int, num_minibatches: int) -> None:
    """An algorithm of one gradient step per rollout (A2C, REINFORCE) takes one epoch of one minibatch."""
    require(num_epochs == 1 and num_minibatches == 1,
            f"{name} takes one gradient step per rollout: set training.num_epochs=1 and "
            f"training.num_minibatches=1 (got {num_epochs} and {num_minibatches}).")


def check_on_policy_placement(num_devices: int, layout: str, agents: int, num_envs: int) -> int:
    """The devices over which each agent's environments split (1 with ``distributed.layout:
    population``, whose agents must then divide over the devices); ``num_envs`` must split evenly."""
    if layout == "population":
        require(agents % num_devices == 0,
                f"distributed.layout=population puts whole agents on each device: the {agents} agents "
                f"(training.num_seeds x hyperparameter variants) must divide evenly over {num_devices} devices.")
        num_devices = 1  # each agent's environments stay on one device
    require(num_envs % num_devices == 0,
            f"training.num_envs={num_envs} must be divisible by the number of devices ({num_devices}).")
    return num_devices


def check_minibatches(num_minibatches: int, rollout_length: int, envs_per_device: int,
                      sequence_minibatches: bool) -> None:
    """``training.num_minibatches`` must split one device's batch evenly: its transitions, or
    (agents that learn from whole sequences) its environments."""
    if sequence_minibatches:
        units, what = envs_per_device, "training.num_envs per device"
    else:
        units, what = envs_per_device * rollout_length, "the batch (num_envs per device x rollout_length)"
    require(units % num_minibatches == 0,
            f"training.num_minibatches={num_minibatches} must divide {what} = {units}.")


# --- off-policy -----------------------------------------------------------------------------
def check_off_policy_run(name: str, asynchronous: bool, distributed: Any) -> None:
    """An off-policy run's learner keeps its buffer on one device, in one process."""
    # (an async learner given enable_multi_devices by the caller runs on one device all the same: its Placement
    # has no mesh)
    require(not asynchronous or not distributed.multi_devices,
            f"runner.mode=async: {name}'s learner keeps its replay buffer on one device: set "
            f"distributed.multi_devices=false (several devices: runner.mode=fused with a JAX env and "
            f"distributed.layout=population).")
    require(distributed.coordinator_address is None and not distributed.auto,
            f"{name} trains in one process for now: leave distributed.coordinator_address and "
            f"distributed.auto unset.")


def check_off_policy_placement(num_devices: int, layout: str, agents: int, num_envs: int) -> None:
    """Whole agents, or each agent's environments and buffer columns, split evenly over the devices."""
    require(num_devices == 1 or layout == "envs" or agents % num_devices == 0,
            f"distributed.layout=population puts whole agents, each with its replay buffer, on each device: the "
            f"{agents} agents (training.num_seeds x hyperparameter variants) must divide evenly over "
            f"{num_devices} devices.")
    require(num_devices == 1 or layout == "population" or num_envs % num_devices == 0,
            f"distributed.layout=envs splits each agent's environments and its replay buffer's columns over the "
            f"devices: training.num_envs={num_envs} must be divisible by the number of devices ({num_devices}).")


# --- evolution strategies -------------------------------------------------------------------
def check_es_runner(name: str, mode: str) -> None:
    require(mode != "async",
            f"runner.mode=async: {name} has no actors and learner, it plays its episodes inside compiled "
            "programs; set runner.mode=auto or fused (or leave runner out).")


def check_es_placement(name: str, where: str, agents: int, layout: str, num_devices: int, env_type: str,
                       population_size: int) -> None:
    """Whole searches, or each search's members, split evenly over the devices; the env is a JAX env."""
    if agents > 1 and layout == "population":
        require(agents % num_devices == 0,
                f"distributed.layout=population puts whole searches on each device: the {agents} searches "
                f"(training.num_seeds x hyperparameter variants) must divide evenly over {num_devices} devices.")
        num_devices = 1  # each search's members stay on one device
    require(env_type not in HOST_ENV_TYPES, f"{name} plays its episodes inside compiled programs: "
                                            f"env_type {env_type!r} steps on the host; use "
                                            f"a gymnax or brax env.")
    require(population_size % num_devices == 0,
            f"{where}.population_size={population_size} must divide evenly over the {num_devices} devices "
            f"(each device plays population_size / {num_devices} members).")

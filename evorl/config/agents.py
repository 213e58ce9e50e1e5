"""The rules of an agent factory's keywords (the ``agent:`` section), given the facts of the env
they meet: whether an observation space was given and its shape, the action space's kind. Each
factory calls its rule before it builds a network, so a config (``build_from_config``) and a
Python caller (``make_mlp_ppo_agent(...)``) are refused alike; a space appears in a message as
the env prints it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evorl.config.errors import ConfigError, require


def check_obs_space_given(obs_space: Any, factory: str) -> None:
    require(obs_space is not None, f"{factory} needs obs_space (e.g. obs_space=env.obs_space).")


def check_activation(name: str, valid: Sequence[str]) -> None:
    if name not in valid:
        raise ConfigError(f"Unknown activation {name!r}; valid: {', '.join(valid)}")


def check_hidden_sizes(hidden_layer_sizes: Sequence[int]) -> None:
    """A network builder's hidden layer widths are positive."""
    if any(int(s) < 1 for s in hidden_layer_sizes):
        raise ConfigError(f"hidden_layer_sizes must be positive, got {list(hidden_layer_sizes)}")


def check_actor_critic_options(o: Any, obs_shape: tuple[int, ...] | None, action_is_box: bool, action_space: Any,
                               networks: Sequence[str], image_networks: Sequence[str], cores: Sequence[str],
                               gaussians: Sequence[str]) -> None:
    """The network / policy keywords of an actor-critic factory (``ActorCriticOptions``), naming the keys."""
    for key in ("actor_hidden_layer_sizes", "critic_hidden_layer_sizes"):
        sizes = getattr(o, key)
        require(len(sizes) >= 1 and all(s >= 1 for s in sizes),
                f"agent.{key} = {list(sizes)} must list one or more positive layer sizes, e.g. [64, 64] "
                f"(an empty list would make the network linear).")
    require(o.network in networks, f"Unknown agent.network {o.network!r}; valid: {', '.join(networks)}.")
    require(o.network not in image_networks or (obs_shape is not None and len(obs_shape) == 3),
            f"agent.network={o.network!r} needs image observations [H, W, C], got obs shape {obs_shape}.")
    require(not o.shared_torso or o.network in image_networks,
            f"agent.shared_torso shares an image torso ({', '.join(image_networks)}); agent.network={o.network!r} "
            f"has none.")
    require(o.core in cores, f"Unknown agent.core {o.core!r}; valid: {', '.join(cores)}.")
    require(o.core_size >= 1, f"agent.core_size must be >= 1, got {o.core_size}.")
    require(o.policy_distribution in gaussians,
            f"Unknown agent.policy_distribution {o.policy_distribution!r}; valid: {', '.join(gaussians)}.")
    if not action_is_box:
        require(o.policy_distribution == "clipped_gaussian" and not o.state_dependent_std,
                "agent.policy_distribution / agent.state_dependent_std apply to Box (continuous) action "
                f"spaces; this env's action space is {action_space}.")


def check_dqn_action_space(action_is_discrete: bool, action_space: Any) -> None:
    require(action_is_discrete,
            f"DQN acts in a discrete action space; this env's is {action_space} (for continuous actions: SAC, TD3, "
            f"DDPG or PPO).")


def check_q_network_options(o: Any, obs_shape: tuple[int, ...], networks: Sequence[str],
                            image_networks: Sequence[str]) -> None:
    """DQN's Q-network keywords (``QNetworkOptions``)."""
    sizes = o.q_hidden_layer_sizes
    require(len(sizes) >= 1 and all(s >= 1 for s in sizes),
            f"agent.q_hidden_layer_sizes = {list(sizes)} must list one or more positive layer sizes, e.g. [64, 64].")
    require(o.network in networks, f"Unknown agent.network {o.network!r}; valid: {', '.join(networks)}.")
    require(o.network not in image_networks or len(obs_shape) == 3,
            f"agent.network={o.network!r} needs image observations [H, W, C], got obs shape {obs_shape}.")


def check_continuous_options(o: Any, action_is_box: bool, action_is_bounded: bool, action_space: Any,
                             factory: str) -> None:
    """A continuous-control factory's action space (a bounded Box) and network sizes
    (``ContinuousNetworkOptions``)."""
    require(action_is_box,
            f"{factory} acts in a continuous (Box) action space; this env's is {action_space}: pick a continuous "
            f"env (e.g. env=pendulum) or, for discrete actions, DQN or PPO.")
    require(action_is_bounded, f"{factory} needs a bounded Box action space (its actor squashes into "
                               f"[low, high]), got {action_space}.")
    for name in ("actor_hidden_layer_sizes", "critic_hidden_layer_sizes"):
        sizes = getattr(o, name)
        require(len(sizes) >= 1 and all(int(s) >= 1 for s in sizes),
                f"agent.{name} = {list(sizes)} must list one or more positive layer sizes, e.g. [256, 256].")


def check_policy_delay(policy_delay: int) -> None:
    require(policy_delay >= 1, f"agent.policy_delay must be >= 1, got {policy_delay}.")


def check_init_alpha(init_alpha: float) -> None:
    require(init_alpha > 0, f"agent.init_alpha must be > 0, got {init_alpha}.")


def check_multi_agent_obs(obs_space: Any, obs_shape: tuple[int, ...] | None, factory: str) -> None:
    """A multi-agent factory takes the env's stacked observation space, ``Box [n_agents, obs_dim]``
    (``obs_shape`` None: no space given)."""
    require(obs_shape is not None and len(obs_shape) == 2,
            f"{factory} needs the stacked observation space of a multi-agent env, Box [n_agents, obs_dim]; "
            f"got {obs_space}.")


def check_ippo_options(network_options: dict) -> None:
    """IPPO / MAPPO build plain MLPs on raw observations."""
    require(not network_options.get("normalize_obs", False),
            "agent.normalize_obs is not supported by IPPO / MAPPO yet: set it false.")
    require(network_options.get("core", "none") == "none" and network_options.get("network", "mlp") == "mlp",
            "IPPO / MAPPO build MLP actors and critics: agent.network must be 'mlp' and agent.core 'none'.")


def check_mappo_critic(centralised_critic: bool, where: str) -> None:
    """MAPPO's critic is centralised: without it the run is IPPO's, and would be labelled MAPPO."""
    require(centralised_critic,
            f"{where}.centralised_critic=false under MAPPO: that is IPPO: use --config-name=ippo_mpe_simple_spread / "
            f"workflow_cls=evorl.workflows.IPPOWorkflow (MAPPO's critic reads the global state).")


def check_matd3_action_space(action_is_box: bool, action_space: Any, factory: str) -> None:
    """MATD3 / MADDPG act in continuous action spaces."""
    require(action_is_box,
            f"{factory} acts in continuous (Box) action spaces; this env's agents act in {action_space}: for "
            f"JaxMARL's MPE set env.kwargs.action_type: Continuous, or train discrete agents with IPPO / MAPPO.")


def check_matd3_normalize_obs(normalize_obs: bool, factory: str) -> None:
    require(not normalize_obs, f"agent.normalize_obs is not supported by {factory} yet: set it false.")

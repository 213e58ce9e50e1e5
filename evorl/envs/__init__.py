"""Environments: ``create_env`` builds a vectorised, auto-resetting env from a config."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, cast

from evorl.config import ConfigError
from evorl.config.env import ENV_TYPES, ENV_TYPE_KEYS, ENV_TYPE_SPECS, EnvConfig, check_env_type_keys
from evorl.envs.env import EnvState
from evorl.envs.host_env import HostVectorEnv
from evorl.envs.spaces import Box, Discrete, Space
from evorl.envs.vec_env import VectorEnv

__all__ = [
    "Box", "Discrete", "EnvState", "HostVectorEnv", "Space", "VectorEnv", "create_env", "EnvConfig", "ENV_TYPES", "ENV_TYPE_KEYS",
]


def _as_dict(env_cfg: Any) -> dict:
    if isinstance(env_cfg, Mapping):
        return dict(env_cfg)
    try:  # OmegaConf DictConfig or a config dataclass
        from omegaconf import DictConfig, OmegaConf

        if isinstance(env_cfg, DictConfig):
            return cast(dict, OmegaConf.to_container(env_cfg, resolve=True))  # a DictConfig's container is a dict
    except ImportError:  # pragma: no cover
        pass
    if hasattr(env_cfg, "__dataclass_fields__"):
        import dataclasses

        return dataclasses.asdict(env_cfg)
    raise TypeError(f"env config must be a mapping with env_name and env_type, got {type(env_cfg).__name__}")


def create_env(env_cfg: Any, episode_length: int | None = None, parallel: int = 1,
               **env_kwargs) -> VectorEnv | HostVectorEnv:
    """Builds ``parallel`` copies of the environment ``env_cfg`` describes.

    Args:
        env_cfg: a dict / OmegaConf / EnvConfig with ``env_name`` and ``env_type``
            (one of ``ENV_TYPES``), optionally ``reward_scale`` and ``action_repeat``
            (see :class:`VectorEnv`) and the type's own keys (``ENV_TYPE_KEYS``, e.g. brax's
            ``backend``, gymnasium's and envpool's Atari keys and ``kwargs``, playground's and
            jumanji's ``obs_fields``); other keys are passed to the backend's constructor.
            ``gymnasium`` and ``envpool`` give a :class:`HostVectorEnv`, every other type
            (``ENV_TYPE_SPECS``) a JAX :class:`VectorEnv` (``env.on_host`` tells them apart).
        episode_length: time limit in steps (episodes end ``truncated`` there); ``None``
            keeps the environment's own limit.
        parallel: number of environments stepped in lock step.
    """
    cfg = _as_dict(env_cfg)
    missing = [k for k in ("env_name", "env_type") if k not in cfg]
    if missing:
        raise ConfigError(f"env config needs {' and '.join(missing)}; got keys {sorted(cfg)}")
    env_name, env_type = cfg.pop("env_name"), cfg.pop("env_type")
    cfg_length = cfg.pop("episode_length", None)
    episode_length = cfg_length if episode_length is None else episode_length
    if env_type not in ENV_TYPES:
        raise ConfigError(f"Unknown env_type {env_type!r}; valid env types: {', '.join(ENV_TYPES)}")
    check_env_type_keys(env_type, cfg)
    foreign = {key for keys in ENV_TYPE_KEYS.values() for key in keys} - set(ENV_TYPE_KEYS[env_type])
    kwargs = {k: v for k, v in {**cfg, **env_kwargs}.items() if k not in foreign}
    module_name, class_name = ENV_TYPE_SPECS[env_type].adapter.split(".")
    backend_env = getattr(importlib.import_module(f"evorl.envs.{module_name}"), class_name)
    return backend_env(env_name, num_envs=parallel, episode_length=episode_length, **kwargs)


def step_size_before_building(env_cfg: Any) -> tuple[int, int] | None:
    """``(agents, observation size of one agent)`` of one env step, read before the env is
    built where building it could itself exhaust memory (a JaxMARL env given an agent count:
    evorl's adapter stacks every agent's spaces, so an absurd count must meet the memory
    estimate first); None otherwise. Refuses JaxMARL keywords the env does not read."""
    from evorl.config.env_limits import AGENT_COUNT_KWARGS

    cfg = _as_dict(env_cfg)
    if cfg.get("env_type") != "jaxmarl" or not set(AGENT_COUNT_KWARGS) & set(cfg.get("kwargs") or {}):
        return None
    from evorl.envs.jaxmarl_env import jaxmarl_step_size

    return jaxmarl_step_size(cfg["env_name"], dict(cfg.get("kwargs") or {}))

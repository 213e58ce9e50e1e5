"""The ``env:`` config section and the env types it can name."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from evorl.config import ConfigError, require

ENV_TYPES = ("gymnax", "brax")
#: Env types whose environments are stepped on the host (Python), not in compiled programs.
HOST_ENV_TYPES = ("gymnasium", "envpool")
#: Config keys only one env type understands (``VectorEnv``'s own keys apply to all).
ENV_TYPE_KEYS: dict[str, tuple[str, ...]] = {"gymnax": (), "brax": ("backend",)}


def check_env_type_keys(env_type: str, cfg: Mapping, where: str = "env") -> None:
    """A key of another env type set to a value (not None) is an error naming both."""
    for other, keys in ENV_TYPE_KEYS.items():
        for key in keys:
            if other != env_type and cfg.get(key) is not None:
                raise ConfigError(
                    f"{where}.{key} is only valid with env_type {other!r}, not {env_type!r}."
                )


@dataclass(frozen=True)
class EnvConfig:
    env_name: str = "CartPole-v1"
    env_type: str = "gymnax"
    #: Time limit in (agent) steps (truncation); None keeps the environment's own.
    episode_length: int | None = None
    #: Learners see ``reward_scale * r``; logged and evaluation returns stay unscaled.
    reward_scale: float = 1.0
    #: Backend steps per agent step (the action is held, rewards are summed).
    action_repeat: int = 1
    #: brax only: physics backend (mjx, generalized, positional, spring); None = default.
    backend: str | None = None

    def validate(self, where: str) -> None:
        require(self.env_type in ENV_TYPES, f"Unknown {where}.env_type {self.env_type!r}; valid: {', '.join(ENV_TYPES)}.")
        require(self.episode_length is None or self.episode_length >= 1,
                f"{where}.episode_length must be >= 1, got {self.episode_length}.")
        require(self.reward_scale > 0, f"{where}.reward_scale must be > 0, got {self.reward_scale}.")
        require(self.action_repeat >= 1, f"{where}.action_repeat must be >= 1, got {self.action_repeat}.")
        check_env_type_keys(self.env_type, dataclasses.asdict(self), where)
        if self.backend is not None:
            from evorl.envs.brax_env import BRAX_BACKENDS

            require(self.backend in BRAX_BACKENDS,
                    f"Unknown {where}.backend {self.backend!r}; valid: {', '.join(BRAX_BACKENDS)}.")

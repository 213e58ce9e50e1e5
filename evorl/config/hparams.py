"""The rules of each algorithm's loss hyperparameters (``PPOHParams``, ``DQNHParams``, ...).

Each function takes the hyperparameters (any object with the algorithm's fields) and raises
:class:`~evorl.config.errors.ConfigError` naming the field as the agent factory's keyword
(``clip_epsilon must be > 0``); the config check (``RLWorkflow.checked_hparams``) names it under
its section (``agent.clip_epsilon``, ``training.tau``). The hyperparameter dataclasses'
``validated()`` call them: once from the config, for every variant, before anything is built,
and once from the agent's factory, for a caller that builds an agent without a config.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from evorl.config.errors import ConfigError, require


def _non_negative(hp: Any, names: tuple[str, ...]) -> None:
    for name in names:
        require(getattr(hp, name) >= 0, f"{name} must be >= 0, got {getattr(hp, name)}.")


def check_ppo(hp: Any) -> None:
    """PPO's (and MAPPO's) clipping, KL target and loss weights."""
    require(hp.clip_epsilon > 0, f"clip_epsilon must be > 0, got {hp.clip_epsilon}.")
    require(hp.value_clip_epsilon is None or hp.value_clip_epsilon > 0,
            f"value_clip_epsilon must be > 0 or null, got {hp.value_clip_epsilon}.")
    require(hp.target_kl is None or hp.target_kl > 0, f"target_kl must be > 0 or null, got {hp.target_kl}.")
    _non_negative(hp, ("vf_coef", "ent_coef", "kl_coef"))


def check_a2c(hp: Any) -> None:
    """A2C's (and REINFORCE's) loss weights."""
    _non_negative(hp, ("vf_coef", "ent_coef"))


def check_impala(hp: Any) -> None:
    """IMPALA's V-trace clips (``pg_rho_bar`` already filled in) and loss weights."""
    for name in ("vtrace_rho_bar", "vtrace_c_bar", "pg_rho_bar"):
        require(getattr(hp, name) > 0, f"{name} must be > 0 (.inf for no clipping), got {getattr(hp, name)}.")
    require(hp.vtrace_c_bar <= hp.vtrace_rho_bar,
            f"vtrace_c_bar={hp.vtrace_c_bar} must be <= vtrace_rho_bar={hp.vtrace_rho_bar} (V-trace's assumption).")
    _non_negative(hp, ("baseline_cost", "ent_coef", "kl_coef"))


def check_dqn(hp: Any) -> None:
    """DQN's exploration schedule and Huber threshold."""
    for name in ("epsilon_start", "epsilon_end"):
        require(0.0 <= getattr(hp, name) <= 1.0, f"{name} must be in [0, 1], got {getattr(hp, name)}.")
    require(hp.epsilon_end <= hp.epsilon_start,
            f"epsilon_end={hp.epsilon_end} must be <= epsilon_start={hp.epsilon_start}: epsilon decays from "
            f"start to end (a constant rate: set both to it).")
    require(hp.epsilon_decay_steps > 0, f"epsilon_decay_steps must be > 0, got {hp.epsilon_decay_steps}.")
    require(hp.huber_delta is None or hp.huber_delta > 0, f"huber_delta must be > 0 or null, got {hp.huber_delta}.")


def check_sac(hp: Any) -> None:
    """SAC's fixed temperature."""
    require(hp.alpha is None or hp.alpha >= 0, f"alpha must be >= 0 or null, got {hp.alpha}.")


def check_td3(hp: Any) -> None:
    """TD3's (and DDPG's, MATD3's) noise scales."""
    _non_negative(hp, ("exploration_noise", "target_noise", "target_noise_clip"))


def checked_hparams(hparams: Any, training_keys: tuple[str, ...]) -> Any:
    """``hparams.validated()``, its error naming the key as the config does
    (``agent.target_noise must be >= 0``; ``training.tau ...`` for one of ``training_keys``)."""
    try:
        return hparams.validated()
    except ConfigError as e:
        name = re.match(r"\w+", str(e))
        fields = {f.name for f in dataclasses.fields(hparams)}
        if name is None or name.group() not in fields:
            raise
        section = "training" if name.group() in training_keys else "agent"
        raise ConfigError(f"{section}.{e}") from None

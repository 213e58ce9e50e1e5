"""Typed, validated configuration.

Every config section is a frozen dataclass; :func:`parse_section` turns a mapping (a
plain dict or OmegaConf) into one, and fails before anything is compiled with a message
that names the bad key or value: an unknown key with the closest valid one, a value of
the wrong type, a float that is not finite, an integer outside int32 (:data:`INT32_MAX`),
or a value out of range (each dataclass's ``validate``). A float field accepts ``.inf`` only
when its annotation is :data:`FloatOrInf` (e.g. IMPALA's clipping thresholds, where ``.inf``
means no clipping); NaN is never a valid value. A float is a number: of text, only the
spellings of infinity and NaN that YAML and Hydra leave as strings (``.inf``, ``inf``, ...)
are read, so that they get their own error or meaning; ``'1e-3'`` is refused.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np


class ConfigError(ValueError):
    """A configuration key or value that cannot be used."""


class _AllowInf:
    """Marks a float config field for which ``+inf`` is meaningful (see :data:`FloatOrInf`)."""

    def __repr__(self) -> str:
        return "allow_inf"


#: A float config field that accepts ``.inf`` (e.g. a clipping threshold: ``.inf`` = no
#: clipping). Plain ``float`` fields must be finite.
FloatOrInf = Annotated[float, _AllowInf()]
#: The non-finite floats as text: YAML's spellings (Hydra passes ``x=.inf`` on as the string)
#: and the words a YAML file leaves as strings (``x: inf``).
_NONFINITE_WORDS = {".inf": math.inf, "+.inf": math.inf, "-.inf": -math.inf, ".nan": math.nan,
                    "inf": math.inf, "+inf": math.inf, "-inf": -math.inf, "nan": math.nan}
#: The largest integer a config key takes: counts become int32 arrays and loop bounds.
INT32_MAX = 2**31 - 1


def to_plain(cfg: Any) -> Any:
    """OmegaConf containers to plain dicts / lists; anything else unchanged."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
    except ImportError:  # pragma: no cover
        return cfg
    if isinstance(cfg, (DictConfig, ListConfig)):
        return OmegaConf.to_container(cfg, resolve=True)
    return cfg


def unknown_key_error(key: str, valid: list[str], where: str) -> ConfigError:
    full = f"{where}.{key}" if where else key
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    hint = f" Did you mean '{(where + '.') if where else ''}{close[0]}'?" if close else ""
    return ConfigError(f"Unknown config key '{full}'.{hint} Valid keys{' of ' + where if where else ''}: {', '.join(sorted(valid))}.")


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is Annotated:
        return _type_name(typing.get_args(tp)[0])
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _allows_inf(tp: Any) -> bool:
    return typing.get_origin(tp) is Annotated and any(isinstance(m, _AllowInf) for m in tp.__metadata__)


def _check_finite(value: float, name: str, allow_inf: bool) -> float:
    if math.isfinite(value) or (allow_inf and value == math.inf):
        return value
    valid = "a finite number or .inf (no limit)" if allow_inf else "a finite number"
    raise ConfigError(f"'{name}' = {value} is not a valid value; it must be {valid}.")


def coerce(value: Any, tp: Any, name: str) -> Any:
    """Checks ``value`` against the annotation ``tp`` (int, float, bool, str, tuples,
    ``X | None``, :data:`FloatOrInf`) and returns it in canonical form (lists become
    tuples, ints floats, NumPy scalars Python numbers). Floats must be finite, except
    ``+inf`` for a :data:`FloatOrInf` field."""
    if isinstance(value, np.generic):  # np.int64(8), np.float32(0.1), np.bool_(True)
        value = value.item()
    origin = typing.get_origin(tp)
    if origin is Annotated:
        inner = typing.get_args(tp)[0]
        if inner is not float:
            raise TypeError(f"config annotation {tp!r} of '{name}' is not supported")
        return _check_finite(_to_float(value, name), name, _allows_inf(tp))
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(value, arg, name)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(f"'{name}' = {value!r} is not a valid {_type_name(tp)}.")
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return _check_int32(value, name)
        if isinstance(value, float) and value.is_integer():
            return _check_int32(int(value), name)
    elif tp is float:
        return _check_finite(_to_float(value, name), name, allow_inf=False)
    elif tp is str:
        if isinstance(value, str):
            return value
    elif origin is tuple:
        args = typing.get_args(tp)
        if isinstance(value, (list, tuple)):
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(coerce(v, args[0], f"{name}[{i}]") for i, v in enumerate(value))
            if len(args) == len(value):
                return tuple(coerce(v, a, f"{name}[{i}]") for i, (v, a) in enumerate(zip(args, value)))
    elif origin is dict or tp is dict:
        if isinstance(value, Mapping):
            return dict(value)
    else:
        raise TypeError(f"config annotation {tp!r} of '{name}' is not supported")
    raise ConfigError(f"'{name}' = {value!r} has type {type(value).__name__}; expected {_type_name(tp)}.")


def _check_int32(value: int, name: str) -> int:
    if -INT32_MAX - 1 <= value <= INT32_MAX:
        return value
    limit = f"at most {INT32_MAX} (2**31 - 1)" if value > 0 else f"at least {-INT32_MAX - 1} (-2**31)"
    raise ConfigError(f"'{name}' = {value} is out of range: it must be {limit}; config integers are int32 "
                      f"(counts become int32 arrays and loop bounds).")


def _to_float(value: Any, name: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and value.strip().lower() in _NONFINITE_WORDS:
        return _NONFINITE_WORDS[value.strip().lower()]
    if isinstance(value, str) and _is_number(value):
        yaml11 = "e" in value.lower() and "." not in value  # YAML 1.1 floats need a dot
        hint = f" (PyYAML's safe_load reads {value} as text: write {value.lower().replace('e', '.0e', 1)})" \
            if yaml11 else ""
        raise ConfigError(f"'{name}' = {value!r} is text, not a number: give the float itself, unquoted{hint}.")
    raise ConfigError(f"'{name}' = {value!r} has type {type(value).__name__}; expected float.")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def dotted_keys(data: dict, prefix: str = "") -> dict:
    """A nested mapping as one level with dotted keys: ``{"a": {"b": 1}}`` -> ``{"a.b": 1}``."""
    out = {}
    for key, value in data.items():
        if isinstance(value, Mapping):
            out.update(dotted_keys(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def section_data(data: Any, where: str) -> dict:
    """The config section ``data`` as a plain dict; anything but a mapping is an error naming
    the section, null included (``env: null`` does not mean "the defaults": a caller passes
    ``{}`` for a section the config leaves out)."""
    data = to_plain(data)
    if data is None:
        raise ConfigError(f"config section '{where}' is null; give it a mapping of keys to values, "
                          f"or leave it out to take its defaults.")
    if not isinstance(data, Mapping):
        raise ConfigError(f"config section '{where}' must be a mapping of keys to values, "
                          f"got {type(data).__name__} {data!r}.")
    return dict(data)


def type_hints(cls: Any) -> dict[str, Any]:
    """The annotations of a config dataclass or factory, :data:`FloatOrInf` markers kept."""
    return typing.get_type_hints(cls, include_extras=True)


def parse_section(cls: type, data: Any, where: str) -> Any:
    """Builds the dataclass ``cls`` from the mapping ``data`` (missing keys take defaults)."""
    if isinstance(data, cls):
        return data
    data = section_data(data, where)
    hints = type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    values = {}
    for key, value in data.items():
        if key not in fields:
            raise unknown_key_error(str(key), list(fields), where)
        values[key] = coerce(value, hints[key], f"{where}.{key}")
    missing = [
        name for name, f in fields.items()
        if name not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(f"config section '{where}' is missing required key(s): {', '.join(missing)}.")
    section = cls(**values)
    if hasattr(section, "validate"):
        section.validate(where)
    return section


def require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def __getattr__(name: str) -> Any:
    # ``EnvConfig`` lives with the envs (evorl.envs.config), which import this module: it is
    # imported on first use so that ``from evorl.config import EnvConfig`` keeps working.
    if name == "EnvConfig":
        from evorl.envs.config import EnvConfig

        return EnvConfig
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def dataclass_from_signature(name: str, fn: Callable, exclude: tuple[str, ...], include: type | None = None) -> type:
    """A frozen config dataclass whose fields are ``fn``'s keyword parameters with defaults,
    after the fields of the dataclass ``include`` (keywords ``fn`` takes as ``**kwargs``).

    The agent factories are the single source of truth for an algorithm's agent keys; this
    turns a factory's typed signature into its ``agent:`` config section.
    """
    hints = type_hints(fn)
    fields = []
    if include is not None:
        include_hints = type_hints(include)
        fields += [(f.name, include_hints[f.name], dataclasses.field(default=f.default))
                   for f in dataclasses.fields(include)]
    for p in inspect.signature(fn).parameters.values():
        if p.name in exclude or p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            continue
        if p.default is inspect.Parameter.empty:
            raise TypeError(f"{fn.__name__}: config parameter '{p.name}' needs a default")
        fields.append((p.name, hints[p.name], dataclasses.field(default=p.default)))
    return dataclasses.make_dataclass(name, fields, frozen=True)


# --------------------------------------------------------------------------------------
# The sections every on-policy experiment shares.
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DistributedConfig:
    """Data parallelism over devices and processes (``jax.distributed``)."""

    #: Split the environments over every device (of every process) and average gradients.
    multi_devices: bool = False
    #: ``host:port`` of process 0; with ``num_processes`` and ``process_id`` this starts
    #: ``jax.distributed`` (multi-host training; implies ``multi_devices``).
    coordinator_address: str | None = None
    #: How many processes take part (with ``coordinator_address``).
    num_processes: int | None = None
    #: This process's index, in ``[0, num_processes)``; process 0 writes the run folder.
    process_id: int | None = None
    #: Let JAX detect the cluster instead (SLURM, Open MPI, Kubernetes, or the
    #: ``JAX_COORDINATOR_ADDRESS`` environment variable with the cluster's process ids).
    auto: bool = False
    #: A process silent for this long is declared dead and the others stop with an error.
    heartbeat_timeout_seconds: int = 30
    #: How long ``jax.distributed.initialize`` waits for every process to join.
    initialization_timeout_seconds: int = 300
    #: With several devices, what is split across them: ``envs`` (each agent's environments;
    #: gradients averaged over devices) or ``population`` (whole agents on each device, no
    #: communication: for populations, PBT and ES; ``num_seeds`` x variants must divide evenly).
    layout: str = "envs"

    @property
    def multi_process(self) -> bool:
        return self.auto or self.coordinator_address is not None

    def validate(self, where: str) -> None:
        given = [self.coordinator_address is not None, self.num_processes is not None, self.process_id is not None]
        require(all(given) or not any(given),
                f"{where}: coordinator_address, num_processes and process_id go together (got "
                f"{self.coordinator_address!r}, {self.num_processes!r}, {self.process_id!r}).")
        require(not (self.auto and any(given)),
                f"{where}.auto detects the cluster; do not also set coordinator_address/num_processes/process_id.")
        if self.coordinator_address is not None:
            host, _, port = str(self.coordinator_address).rpartition(":")
            require(bool(host) and port.isdigit() and 0 < int(port) < 65536,
                    f"{where}.coordinator_address = {self.coordinator_address!r} must be host:port (process 0's "
                    f"address and a free port, e.g. 10.0.0.1:1234).")
        if self.num_processes is not None:
            require(self.num_processes >= 1, f"{where}.num_processes must be >= 1, got {self.num_processes}.")
            require(0 <= self.process_id < self.num_processes,
                    f"{where}.process_id must be in [0, {self.num_processes}), got {self.process_id}.")
        require(self.heartbeat_timeout_seconds >= 1, f"{where}.heartbeat_timeout_seconds must be >= 1.")
        require(self.layout in ("envs", "population"),
                f"{where}.layout must be 'envs' or 'population', got {self.layout!r}.")


#: The values of ``training.optimizer``.
OPTIMIZERS = ("adam", "rmsprop")


@dataclass(frozen=True)
class TrainingConfig:
    """The ``training:`` section: one iteration collects ``num_envs x rollout_length`` env
    steps, then takes ``num_epochs x num_minibatches`` gradient steps on them."""

    #: Training iterations, each of num_envs x rollout_length env steps.
    num_iterations: int = 100
    #: Env steps per environment per iteration (the T of the [T, B] rollout).
    rollout_length: int = 128
    #: Environments stepped side by side (the B of the [T, B] rollout).
    num_envs: int = 4
    #: The optimiser's step size (a list trains one agent per value).
    learning_rate: float = 2.5e-4
    #: Decay the learning rate linearly to 0 over ``num_iterations``.
    anneal_lr: bool = True
    #: The gradient step after global-norm clipping: ``adam``, or ``rmsprop`` (decay 0.99, epsilon
    #: outside the root, as SB3 and rl-baselines3-zoo run A2C).
    optimizer: str = "adam"
    #: The optimiser's epsilon (Adam's or RMSprop's, added to the root of the second moment).
    adam_eps: float = 1e-5
    #: Clip the gradient's global norm to this (null: no clipping).
    max_grad_norm: float | None = 0.5
    #: Discount factor.
    gamma: float = 0.99
    #: GAE's lambda (IMPALA: V-trace's lambda; 1 gives n-step returns).
    gae_lambda: float = 0.95
    #: Passes over each iteration's rollout.
    num_epochs: int = 4
    #: Minibatches per epoch (must divide num_envs x rollout_length).
    num_minibatches: int = 4
    #: Iterations between evaluations and log lines; each interval is one compiled call.
    eval_interval: int = 10
    #: Episodes per evaluation.
    eval_episodes: int = 16
    #: Evaluate with the policy's most likely action (greedy); false: with sampled actions, as
    #: it acts in training (an undertrained Atari policy's argmax often repeats one action).
    eval_deterministic: bool = True
    #: Independent agents trained side by side in one program (vmapped), each its own seed.
    num_seeds: int = 1
    #: The rollout acts with the parameters of ``actor_lag`` iterations ago (one "update" of
    #: lag = one iteration's ``num_epochs x num_minibatches`` gradient steps): simulates
    #: IMPALA's decoupled actors on one machine. 0 acts with the current parameters.
    actor_lag: int = 0
    #: Time limit of the training episodes, in agent steps (null: ``env.episode_length``).
    #: Shorter training episodes give more episode starts per step of data; the cut is a
    #: truncation, so returns are bootstrapped from the value there and the learning target
    #: is unchanged. Evaluation always plays full ``env.episode_length`` episodes.
    train_episode_length: int | None = None

    def validate(self, where: str) -> None:
        for key in ("num_iterations", "rollout_length", "num_envs", "num_epochs", "num_minibatches",
                    "eval_interval", "eval_episodes", "num_seeds"):
            require(getattr(self, key) >= 1, f"{where}.{key} must be >= 1, got {getattr(self, key)}.")
        require(self.env_steps_per_iteration <= INT32_MAX,
                f"{where}.num_envs x {where}.rollout_length = {self.num_envs} x {self.rollout_length} = "
                f"{self.env_steps_per_iteration} steps per iteration; at most {INT32_MAX} (2**31 - 1: the "
                f"rollout's steps are indexed in int32).")
        require(self.actor_lag >= 0, f"{where}.actor_lag must be >= 0, got {self.actor_lag}.")
        require(self.train_episode_length is None or self.train_episode_length >= 1,
                f"{where}.train_episode_length must be >= 1 or null, got {self.train_episode_length}.")
        require(self.learning_rate > 0, f"{where}.learning_rate must be > 0, got {self.learning_rate}.")
        require(self.optimizer in OPTIMIZERS,
                f"{where}.optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}.")
        require(self.adam_eps > 0, f"{where}.adam_eps must be > 0, got {self.adam_eps}.")
        require(self.max_grad_norm is None or self.max_grad_norm > 0,
                f"{where}.max_grad_norm must be > 0 or null, got {self.max_grad_norm}.")
        require(0.0 <= self.gamma <= 1.0, f"{where}.gamma must be in [0, 1], got {self.gamma}.")
        require(0.0 <= self.gae_lambda <= 1.0, f"{where}.gae_lambda must be in [0, 1], got {self.gae_lambda}.")

    @property
    def env_steps_per_iteration(self) -> int:
        return self.num_envs * self.rollout_length


# --------------------------------------------------------------------------------------
# Hyperparameter axes: a list where a float is expected trains one agent per value.
# --------------------------------------------------------------------------------------
def _float_arm(tp: Any) -> Any:
    """The float annotation (``float`` or :data:`FloatOrInf`) of a float field, optionally
    ``| None``; None for any other field."""
    if tp is float or (typing.get_origin(tp) is Annotated and typing.get_args(tp)[0] is float):
        return tp
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _float_arm(args[0]) if len(args) == 1 else None
    return None


def extract_sweeps(
    data: Any, cls: type, where: str, sweepable: tuple[str, ...] | None = None
) -> tuple[dict, list[tuple[str, tuple[float, ...]]]]:
    """Splits list values of float fields of ``cls`` out of the section ``data``.

    Returns the section with each such list replaced by its first value, and the axes
    ``[("where.key", (v1, v2, ...)), ...]``. ``sweepable`` limits which keys may be swept
    (None: every float field); a list for any other key is an error naming the ones that can.
    """
    data = section_data(data, where)
    hints = type_hints(cls)
    axes = []
    for key, value in list(data.items()):
        if not isinstance(value, (list, tuple)) or key not in hints or _float_arm(hints[key]) is None:
            continue
        if sweepable is not None and key not in sweepable:
            raise ConfigError(
                f"'{where}.{key}' cannot take a list ({list(value)!r}): a list trains one agent per value, "
                f"but {where}.{key} is not a hyperparameter the compiled program reads as data (it shapes "
                f"the networks or the program itself); sweep it with separate runs (a Hydra -m sweep). "
                f"Keys of {where} that can take a list: {', '.join(sweepable)}."
            )
        require(len(value) >= 1, f"'{where}.{key}' is an empty list.")
        values = tuple(coerce(v, _float_arm(hints[key]), f"{where}.{key}[{i}]") for i, v in enumerate(value))
        repeated = sorted({v for v in values if values.count(v) > 1})
        require(not repeated, f"'{where}.{key}' = {list(values)} repeats {', '.join(map(str, repeated))}: a list "
                              f"trains one agent per value, so a repeated value trains identical agents; "
                              f"for several agents per value set training.num_seeds.")
        axes.append((f"{where}.{key}", values))
        data[key] = values[0]
    return data, axes


def sweep_variants(axes: list[tuple[str, tuple[float, ...]]]) -> list[dict[str, float]]:
    """The cartesian product of the axes: one ``{"where.key": value}`` per trained variant."""
    variants = [{}]
    for name, values in axes:
        variants = [{**v, name: x} for v in variants for x in values]
    return variants

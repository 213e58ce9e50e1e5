"""Parsing and coercion of config sections.

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
import inspect
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import numpy as np

from evorl.config.errors import ConfigError, unknown_key_error


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


def plain_config(cfg: Any) -> Any:
    """``cfg`` as plain data, its ``${...}`` interpolations resolved; one that does not resolve
    is a ConfigError naming the key and its value."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        return to_plain(cfg)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None)
        raw = OmegaConf.to_container(cfg, resolve=False)
        for part in (key or "").split("."):
            raw = raw.get(part) if isinstance(raw, dict) else None
        problem = str(getattr(e, "msg", e)).splitlines()[0]
        what = f"'{key}' = {raw!r}" if key else "the config"
        raise ConfigError(f"{what} does not resolve: {problem}. An ${{...}} interpolation names another key "
                          f"of the config (e.g. ${{training.num_envs}}).") from None


def config_mapping(cfg: Any) -> dict:
    """A whole experiment config (dict or OmegaConf) as a plain dict (a copy), or the one-line
    error a workflow's ``parse_config`` gives for anything else."""
    cfg = to_plain(cfg)
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"config must be a mapping, got {type(cfg).__name__}")
    return dict(cfg)


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
    ``+inf`` for a :data:`FloatOrInf` field; an int key takes no float, not even a whole one."""
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
        if len(errors) == 1:  # ``X | None``: X's own message
            raise ConfigError(errors[0])
        raise ConfigError(f"'{name}' = {value!r} is not a valid {_type_name(tp)}.")
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return _check_int32(value, name)
        if isinstance(value, float):
            raise ConfigError(_float_for_int(value, name))
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


def _float_for_int(value: float, name: str) -> str:
    """The error for a float given to an integer key. A whole one (``1e5``, which Hydra and
    YAML read as the float 100000.0) is refused too, with the integer to write: a count is
    exact, and a float that only looks whole (``1e17``) is not the integer it names."""
    if math.isfinite(value) and value.is_integer():
        _check_int32(int(value), name)  # 1e12: out of range is the first thing to fix
        return f"'{name}' = {value!r} is a float; it takes an integer: write {name}={int(value)}."
    return f"'{name}' = {value!r} has type float; expected int."


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


def dotted_keys(data: Mapping, prefix: str = "") -> dict:
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


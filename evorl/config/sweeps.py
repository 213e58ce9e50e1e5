"""Hyperparameter axes: a list where a float is expected trains one agent per value."""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any

from evorl.config.errors import ConfigError, require
from evorl.config.parsing import coerce, section_data, type_hints

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
                f"Keys of {where} that can take a list: {', '.join(sweepable) or 'none'}."
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
    variants: list[dict[str, float]] = [{}]
    for name, values in axes:
        variants = [{**v, name: x} for v in variants for x in values]
    return variants


def num_agents(config: Any) -> int:
    """The agents a run trains side by side: ``training.num_seeds`` x the hyperparameter
    variants of its lists (:func:`sweep_variants`)."""
    return config.training.num_seeds * len(sweep_variants(list(config.sweep)))

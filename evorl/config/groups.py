"""The rules of the config groups (``algo/``, ``env/``, ``tuned/``, composed by
:mod:`evorl.app.config_groups`): an option the group has, the ``algo`` node an algorithm's
defaults fill, and an ``agent:`` key that belongs to another algorithm."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from evorl.config.errors import ConfigError, did_you_mean, unknown_key_error

#: The node of the composed config that holds the chosen algorithm's defaults.
ALGO_NODE = "algo"
#: The sections an algorithm's defaults may set.
ALGO_SECTIONS = ("agent", "training")


def unknown_option_text(group: str, option: str, options: list[str]) -> str:
    """The error for ``group=option`` when the group has no such option: the closest options
    first, then every one; for ``env=``, which is easily taken for an environment's id
    (``env=CartPole-v1``), the key that names an environment."""
    hint = did_you_mean(option, options, prefix=f"{group}=")
    if group != "env":
        return f"{group}={option}: no such option.{hint} Valid: {', '.join(options)}."
    return (f"env={option}: no such env group (env= chooses one: {', '.join(options)}). To train on the "
            f"environment {option!r}, set env.env_name={option} (with env.env_type, gymnax by default; "
            f"evorl-train --list-envs lists the environments of each env type).{hint}")


def check_group_option(group: str, option: str, exists: bool, group_options: Callable[[str], list[str]]) -> None:
    """``group=option`` names a file of the group (``exists``); else the group's options are listed."""
    if not exists:
        raise ConfigError(unknown_option_text(group, option, group_options(group)))


def check_algo_node(node: Any, algo_options: Callable[[], list[str]]) -> None:
    """The ``algo`` node is an algorithm's defaults: a mapping with ``workflow_cls`` and its
    ``agent`` and ``training`` keys."""
    if not isinstance(node, Mapping) or "workflow_cls" not in node:
        raise ConfigError(f"'{ALGO_NODE}' holds an algorithm's defaults (a mapping with workflow_cls and its "
                          f"agent and training keys); got {node!r}. Choose one with algo=<"
                          f"{'|'.join(algo_options())}>.")
    unknown = [key for key in node if key not in ("workflow_cls", *ALGO_SECTIONS)]
    if unknown:
        raise unknown_key_error(str(unknown[0]), ["workflow_cls", *ALGO_SECTIONS], ALGO_NODE)


def refuse_agent_key_of_others(key: str, valid: list[str], owners: list[str], name: str, owner: str, fix: str,
                               example: str | None) -> None:
    """``agent.key``, not a key of ``name``'s agent (``valid``) but of ``owners``': the error says
    how to train the first of them (``fix``, or the config ``example``)."""
    raise ConfigError(
        f"{unknown_key_error(str(key), valid, 'agent')} 'agent.{key}' is a key of "
        f"{', '.join(owners)}, not of {name}: to train {owner}, pass {fix}"
        + (f" (or --config-name={example})" if example else "") + "."
    )

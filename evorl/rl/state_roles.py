"""The roles of a training state's fields, declared once, on the fields themselves.

A state (a ``flax.struct.dataclass``) marks each field that a part of the run treats apart
with :func:`role_field`; the runner, PBT, the divergence freeze and the checkpoints read the
marks with :func:`fields_with_role` (and :func:`env_axes`, :func:`buffer_field`)::

    @struct.dataclass
    class MyState:
        agent_state: AgentState = role_field("frozen", "pbt_copy")
        env_state: EnvState = role_field("env", "actor", "pbt_keep")

The roles (:data:`ROLES`):

* ``env``: split over the devices with ``distributed.layout=envs`` along the environments'
  axis: the leading one, or ``env_axis`` (a pytree of axes, None for leaves kept whole);
* ``actor``: held by the actors of the actor-learner (``runner.mode=async``), None in the
  learner's state;
* ``frozen``: what a diverged agent of a population keeps from its last finite iteration;
* ``pbt_copy``: what an agent that PBT replaces takes from its source;
* ``pbt_keep``: what stays each agent's own, outside PBT's exchange;
* ``buffer``: the replay buffer, which ``checkpoint.save_buffer: false`` leaves out of checkpoints;
* ``from_config``: set from the run's config at every start (the learning rate's annealing
  length), so a checkpoint neither holds nor restores it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from flax import struct

ROLES = ("env", "actor", "frozen", "pbt_copy", "pbt_keep", "buffer", "from_config")


def role_field(*roles: str, env_axis: Any = 0, **kwargs: Any) -> Any:
    """A pytree field of a state dataclass with ``roles`` (see the module docstring);
    ``kwargs`` go to :func:`dataclasses.field` (``default=None``)."""
    unknown = [r for r in roles if r not in ROLES]
    if unknown:
        raise ValueError(f"unknown state field role(s) {unknown}; the roles are {', '.join(ROLES)}.")
    if env_axis != 0 and "env" not in roles:
        raise ValueError("env_axis applies to a field with the 'env' role.")
    return struct.field(pytree_node=True, metadata={"roles": roles, "env_axis": env_axis}, **kwargs)


def fields_with_role(state: Any, role: str) -> tuple[str, ...]:
    """The names of the fields of ``state`` (a state dataclass or an instance) that have
    ``role``, in the dataclass's order."""
    if role not in ROLES:
        raise ValueError(f"unknown state field role {role!r}; the roles are {', '.join(ROLES)}.")
    return tuple(f.name for f in dataclasses.fields(state) if role in f.metadata.get("roles", ()))


def env_axes(state: Any) -> dict[str, Any]:
    """``{field: its environments' axis}`` of the fields of ``state`` with the ``env`` role."""
    return {f.name: f.metadata["env_axis"] for f in dataclasses.fields(state)
            if "env" in f.metadata.get("roles", ())}


def buffer_field(state: Any) -> str | None:
    """The field of ``state`` that holds its replay buffer; None: it has none."""
    names = fields_with_role(state, "buffer")
    if len(names) > 1:
        name = state.__name__ if isinstance(state, type) else type(state).__name__
        raise ValueError(f"{name} marks {len(names)} fields as its "
                         f"replay buffer ({', '.join(names)}); a state has at most one.")
    return names[0] if names else None

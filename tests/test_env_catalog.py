"""--list-envs lists what trains: ALE ids and envpool's envs included, gymnasium's mujoco-py and
Tuple-observation ids left out with why, each group with the extra it needs; an env of each
listed group is made and stepped (envpool's FrozenLake had no one-hot observations)."""

import importlib.util

import numpy as np
import pytest

from evorl.app.cli_help import listing_lines
from evorl.app.env_catalog import LISTINGS, SUITE_LEFT_OUT, envpool_listing, gymnasium_listing
from evorl.config import install_hint
from evorl.envs import create_env


#: One env of each listed group that tests/test_host_envs.py does not make already (classic
#: control, MuJoCo and Atari are made there).
GROUPS_NOT_MADE_ELSEWHERE = {"gymnasium": ["FrozenLake-v1", "phys2d/CartPole-v1", "tabular/Blackjack-v0"],
                             "envpool": ["FrozenLake-v1", "LunarLander-v3", "Hopper-v4"]}


def test_gymnasium_lists_ale_and_what_trains_with_its_extra():
    listing = gymnasium_listing()
    names = listing.names
    assert {"CartPole-v1", "HalfCheetah-v5", *GROUPS_NOT_MADE_ELSEWHERE["gymnasium"]} <= set(names)
    if importlib.util.find_spec("ale_py") is not None:
        assert {"ALE/Pong-v5", "ALE/Breakout-v5", "ALE/SpaceInvaders-v5"} <= set(names)
        assert "ALE/Combat-v5" not in names  # a ROM without a single-player game: no id
    assert not {"Ant-v2", "Hopper-v3", "Blackjack-v1", "GymV26Environment-v0"} & set(names)
    left_out = {name: why for names_, why in listing.left_out for name in names_}
    assert "mujoco-py" in left_out["Ant-v2"] and "Tuple observation" in left_out["Blackjack-v1"]
    text = "\n".join(listing_lines(listing))
    assert f'  MuJoCo (22, {install_hint("mujoco")}):' in text and 'Atari (' in text and install_hint("atari") in text
    assert "left out, need mujoco-py" in text and "set env.episode_length: CliffWalking-v1" in text


@pytest.mark.parametrize("env_type,name", [(t, n) for t, names in GROUPS_NOT_MADE_ELSEWHERE.items() for n in names])
def test_one_env_of_the_other_listed_groups_steps(env_type, name):
    if env_type == "envpool":
        pytest.importorskip("envpool")
    step_once(create_env({"env_name": name, "env_type": env_type}, episode_length=5, parallel=2))


def sample_actions(env):
    space = env.action_space
    return np.zeros((env.num_envs,) + space.shape, np.float32) if space.shape else np.zeros(env.num_envs, np.int32)


def step_once(env):
    first = env.reset(0)
    state = env.step(sample_actions(env))
    assert first.obs.shape == state.obs.shape == (env.num_envs,) + env.obs_space.shape


def test_envpool_lists_its_trainable_families_with_ale_names():
    pytest.importorskip("envpool")
    listing = envpool_listing()
    names = set(listing.names)
    assert {"ALE/Pong-v5", "CartPole-v1", "Ant-v4", *GROUPS_NOT_MADE_ELSEWHERE["envpool"]} <= names
    assert "Pong-v5" not in names and not any(n.startswith("MiniGrid") for n in names)  # Dict observations
    assert listing.left_out and "other families" in listing.left_out[0][0][0]


def test_jumanji_left_out_are_the_ones_its_adapter_refuses():
    pytest.importorskip("jumanji")
    from test_jumanji_env import REFUSED

    assert set(SUITE_LEFT_OUT["jumanji"]) == set(REFUSED)
    assert not set(REFUSED) & set(LISTINGS["jumanji"]().names)


def test_every_install_hint_names_the_checkout_not_the_package_index():
    """The package index's ``evorl`` is another project: a hint to install an extra names the
    checkout evorl runs from, ``pip install -e "ROOT[extra]"`` (``install_hint``: a command that
    works from any folder), never the package by its name."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    files = [*root.glob("evorl/**/*.py"), *root.glob("docs/**/*.md"), *root.glob("configs/**/*.yaml"), root / "README.md"]
    named = [f"{f.relative_to(root)}:{i}" for f in files
             for i, line in enumerate(f.read_text().splitlines(), 1) if "evorl[" in line]
    assert not named, f"install hints that name the package index's evorl: {named}"
    assert install_hint("atari") == f'pip install -e "{root}[atari]"'
    assert (root / "pyproject.toml").is_file()


def test_every_env_type_of_the_help_is_listed():
    """--help names each env type of ENV_TYPES; --list-envs TYPE takes each of them."""
    from evorl.app.cli_help import listable_env_types
    from evorl.config.env import ENV_TYPES

    assert listable_env_types() == ENV_TYPES


@pytest.mark.slow  # the command as a process
def test_list_envs_jaxmarl_lists_what_trains_and_nothing_jaxmarl_prints():
    pytest.importorskip("jaxmarl")
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, str(root / "scripts" / "train.py"), "--list-envs", "jaxmarl"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith('jaxmarl (') and install_hint("marl") in lines[0], proc.stdout
    assert "MPE_simple_spread_v3" in proc.stdout and "IPPO" in proc.stdout
    assert "left out, agents whose observation spaces differ" in proc.stdout
    assert "Submoduled" not in proc.stdout + proc.stderr  # JaxMARL's own import lines


@pytest.mark.slow  # makes every registered JaxMARL env (~1 min)
def test_jaxmarl_left_out_are_the_ones_its_adapter_refuses():
    jaxmarl = pytest.importorskip("jaxmarl")
    listed = set(LISTINGS["jaxmarl"]().names)
    assert listed | set(SUITE_LEFT_OUT["jaxmarl"]) == set(jaxmarl.registered_envs)
    for name in jaxmarl.registered_envs:
        if name in listed:
            create_env({"env_name": name, "env_type": "jaxmarl"}, parallel=1)
        else:
            with pytest.raises((ValueError, TypeError)):  # ConfigError is a ValueError
                create_env({"env_name": name, "env_type": "jaxmarl"}, parallel=1)

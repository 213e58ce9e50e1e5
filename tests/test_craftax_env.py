"""Craftax adapter: spaces and shapes of the symbolic envs (traced), death as termination, the time
limit as truncation (craftax's own, which it reports as ``done``, out of reach)."""

import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("craftax", reason="craftax not installed (pip install -e '.[craftax]')")

from env_suite_checks import check_bookkeeping, check_traced_shapes, random_actions, run  # noqa: E402
from evorl.config import ConfigError  # noqa: E402
from evorl.envs import Discrete, create_env  # noqa: E402

#: env -> (observation shape, actions, craftax's time limit). The pixel variants
#: (Craftax-Classic-Pixels-v1 [63, 63, 3], Craftax-Pixels-v1 [130, 110, 3]) are left out:
#: craftax processes their textures on first use, 3 min on a 2-core CPU.
ENVS = {
    "Craftax-Classic-Symbolic-v1": ((1345,), 17, 10_000),
    "Craftax-Symbolic-v1": ((8268,), 43, 100_000),
}


def craftax_env(name="Craftax-Classic-Symbolic-v1", parallel=2, **cfg):
    return create_env({"env_type": "craftax", "env_name": name, **cfg}, parallel=parallel)


# full Craftax (8 s to compile) in the slow set
@pytest.mark.parametrize("name", [n if n.startswith("Craftax-Classic") else pytest.param(n, marks=pytest.mark.slow) for n in ENVS])
def test_every_env_resets_and_steps(name):
    env = craftax_env(name)
    shape, actions, limit = ENVS[name]
    assert (env.obs_space.shape, env.action_space, env.episode_length) == (shape, Discrete(actions), limit)
    assert env.obs_space.low.min() == 0 and env.obs_space.high.max() == 1
    check_traced_shapes(env)


def _kill_at(step):
    """Sets both copies' health to 0 before step ``step``: the step ends in death."""
    def edit(t, state):
        backend = state.backend_state
        health = jnp.where(t == step, jnp.zeros_like(backend.player_health), backend.player_health)
        return state.replace(backend_state=backend.replace(player_health=health))

    return edit


@pytest.mark.slow  # ~134 s on 2 cores at load 8-10 (2026-12-03)
def test_death_terminates_and_the_time_limit_truncates():
    """Limit 5; both copies die on step 7 (the 2nd of their 2nd episode): truncated on steps
    5 and 12, terminated on 7; craftax's own limit never fires (its ``done`` is death here)."""
    env = craftax_env(episode_length=5)
    assert env._params.max_timesteps > 10**9
    states = run(env, random_actions(env, 13), edit=_kill_at(6))
    np.testing.assert_array_equal(states.terminated[:, 0], [0] * 6 + [1] + [0] * 6)
    np.testing.assert_array_equal(states.truncated, np.array([[0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0]] * 2).T)
    np.testing.assert_array_equal(states.episode_length[:, 1], [1, 2, 3, 4, 5, 1, 2, 1, 2, 3, 4, 5, 1])
    # the dead player's last observation is kept; the agent acts on a fresh world's
    assert not np.array_equal(states.obs[6], states.final_obs[6])
    check_bookkeeping(states, 5)


def test_unknown_name():
    with pytest.raises(ConfigError, match=r"Unknown craftax env_name 'Craftax-Classic'.*Valid names: Craftax-Classic-Symbolic-v1"):
        craftax_env("Craftax-Classic")
    with pytest.raises(ConfigError, match=r"env.obs_fields is only valid with env_type 'playground' or 'jumanji'"):
        craftax_env("Craftax-Classic-Symbolic-v1", obs_fields=["map"])

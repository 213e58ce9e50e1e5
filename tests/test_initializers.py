"""The orthogonal initialiser factorises one matrix at a time under vmap, with Flax's values."""

import os
import subprocess
import sys
import textwrap

import flax.linen as nn
import jax
import numpy as np
import pytest

from evorl.envs.spaces import Box
from evorl.networks.initializers import orthogonal
from evorl.rl.continuous_control import make_q_ensemble


def qr_batch_dims(lowered) -> list[str]:
    """``num_batch_dims`` of every LAPACK QR (``geqrf``) custom call of a lowered program."""
    lines = [line for line in lowered.as_text().splitlines() if "geqrf" in line and "custom_call" in line]
    return [line.split('num_batch_dims = "')[1].split('"')[0] for line in lines]


def test_orthogonal_under_vmap_equals_flax_one_matrix_at_a_time():
    keys = jax.random.split(jax.random.PRNGKey(0), 6).reshape(2, 3, 2)  # nested vmaps: a population of ensembles
    ours = jax.jit(jax.vmap(jax.vmap(lambda k: orthogonal(2.0)(k, (32, 8)))))
    reference = jax.vmap(jax.vmap(lambda k: nn.initializers.orthogonal(2.0)(k, (32, 8))))(keys)
    np.testing.assert_array_equal(ours(keys), reference)
    assert qr_batch_dims(ours.lower(keys)) == ["0"]
    # a key shared by the mapped axis: one matrix, broadcast
    shared = jax.vmap(lambda x: x * orthogonal()(keys[0, 0], (4, 4)))(np.ones(3, np.float32))
    np.testing.assert_array_equal(shared, np.broadcast_to(nn.initializers.orthogonal()(keys[0, 0], (4, 4)), (3, 4, 4)))


def test_critic_ensemble_initialises_without_a_batched_qr():
    """Twin critics are initialised under vmap; a batched QR there hung two CPU devices each
    initialising 256x256 critics (``test_sac_population_initialises_on_two_devices``)."""
    critic = make_q_ensemble(Box(low=-np.ones(3), high=np.ones(3)), 1, (64, 64), "relu", 2)
    batch_dims = qr_batch_dims(jax.jit(critic.init).lower(jax.random.PRNGKey(0)))
    assert batch_dims and set(batch_dims) == {"0"}


INIT_ON_TWO_DEVICES = textwrap.dedent("""
    import jax
    from evorl.workflows import resolve_workflow_cls
    cfg = {"workflow_cls": "evorl.workflows.SACWorkflow", "env": {"env_name": "Pendulum-v1", "env_type": "gymnax"},
           "agent": {"actor_hidden_layer_sizes": [256, 256], "critic_hidden_layer_sizes": [256, 256]},
           "training": {"num_envs": 1, "rollout_length": 1, "buffer_size": 1000, "num_seeds": 8},
           "distributed": {"multi_devices": True, "layout": "population"}}
    workflow = resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    jax.block_until_ready(state)
    print(jax.device_count(), state.buffer.size.shape[0])
""")


@pytest.mark.slow  # a population's initialisation compiled in a subprocess of 2 devices
def test_sac_population_initialises_on_two_devices():
    """8 SAC agents (256x256 twin critics) split over 2 CPU devices: each device initialised its
    agents' critics with batched QRs at the same time, and jaxlib's CPU QR kernels, waiting on
    XLA's thread pool for each other's parts, hung forever (0% CPU). A hang fails here."""
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    try:
        out = subprocess.run([sys.executable, "-c", INIT_ON_TWO_DEVICES], capture_output=True, text=True, env=env,
                             timeout=240)
    except subprocess.TimeoutExpired:
        pytest.fail("the 2-device population's initialisation hung (240 s)")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["2", "8"]

"""compute_gae against a plain Python loop over episodes, with terminations and truncations."""

import numpy as np
import pytest

from evorl.utils.rl_toolkits import compute_gae


def reference_gae(rewards, values, next_values, terminated, truncated, gamma, lam):
    """Textbook GAE, one environment at a time, walking backwards through the trajectory.

    At the end of an episode the bootstrap value is V(final observation) when the episode was
    truncated and 0 when it terminated; the trace restarts at every episode end.
    """
    T, B = rewards.shape
    advantages = np.zeros((T, B))
    for b in range(B):
        running = 0.0
        for t in reversed(range(T)):
            episode_ended = terminated[t, b] or truncated[t, b]
            if episode_ended:
                running = 0.0
            bootstrap = 0.0 if terminated[t, b] else next_values[t, b]
            delta = rewards[t, b] + gamma * bootstrap - values[t, b]
            running = delta + gamma * lam * running
            advantages[t, b] = running
    return advantages, advantages + values


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gae_matches_python_loop(seed):
    rng = np.random.default_rng(seed)
    T, B = 37, 5
    rewards = rng.normal(size=(T, B)).astype(np.float32)
    values = rng.normal(size=(T, B)).astype(np.float32)
    next_values = rng.normal(size=(T, B)).astype(np.float32)
    terminated = rng.random((T, B)) < 0.1
    truncated = (rng.random((T, B)) < 0.1) & ~terminated
    assert terminated.any() and truncated.any()
    adv, ret = compute_gae(rewards, values, next_values, terminated, truncated, 0.97, 0.9)
    ref_adv, ref_ret = reference_gae(rewards, values, next_values, terminated, truncated, 0.97, 0.9)
    np.testing.assert_allclose(adv, ref_adv, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(ret, ref_ret, atol=1e-5, rtol=1e-5)


def test_truncation_bootstraps_and_termination_does_not():
    """One step each: truncated -> r + gamma V(s'), terminated -> r."""
    rewards = np.ones((1, 2), np.float32)
    values = np.zeros((1, 2), np.float32)
    next_values = np.full((1, 2), 10.0, np.float32)
    terminated = np.array([[True, False]])
    truncated = np.array([[False, True]])
    _, ret = compute_gae(rewards, values, next_values, terminated, truncated, 0.5, 1.0)
    np.testing.assert_allclose(ret, [[1.0, 1.0 + 0.5 * 10.0]])


def test_lambda_one_is_discounted_return_to_episode_end():
    T = 4
    rewards = np.arange(1, T + 1, dtype=np.float32)[:, None]
    zeros = np.zeros((T, 1), np.float32)
    terminated = np.zeros((T, 1), bool)
    terminated[-1] = True
    _, ret = compute_gae(rewards, zeros, zeros, terminated, np.zeros((T, 1), bool), 0.9, 1.0)
    expected = [sum(0.9**k * rewards[t + k, 0] for k in range(T - t)) for t in range(T)]
    np.testing.assert_allclose(ret[:, 0], expected, rtol=1e-6)


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match="same shape"):
        compute_gae(np.zeros((3, 2)), np.zeros((3, 2)), np.zeros((3, 1)), np.zeros((3, 2), bool),
                    np.zeros((3, 2), bool), 0.9, 0.9)

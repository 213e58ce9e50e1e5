import numpy as np

from evorl.rl.running_statistics import init_running_statistics, normalize, update_running_statistics


def test_running_statistics_equal_numpy_over_all_batches():
    rng = np.random.default_rng(0)
    batches = [rng.normal(loc=3.0, scale=2.0, size=(n, 3)).astype(np.float32) for n in (5, 17, 1, 64)]
    stats = init_running_statistics((3,))
    for b in batches:
        stats = update_running_statistics(stats, b)
    everything = np.concatenate(batches)
    np.testing.assert_allclose(stats.count, len(everything))
    np.testing.assert_allclose(stats.mean, everything.mean(0), rtol=1e-5)
    np.testing.assert_allclose(stats.var, everything.var(0), rtol=1e-4)
    x = everything[:4]
    np.testing.assert_allclose(
        normalize(stats, x), (x - everything.mean(0)) / np.sqrt(everything.var(0) + 1e-8), rtol=1e-4, atol=1e-5
    )


def test_normalize_is_identity_before_any_data():
    stats = init_running_statistics((2,))
    x = np.array([[5.0, -7.0]], np.float32)
    np.testing.assert_array_equal(normalize(stats, x), x)

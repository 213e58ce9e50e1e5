"""Evaluation renderings and learning-curve statistics."""

import jax
import numpy as np
import pytest

from evorl.plotting import mean_and_band, t95
from evorl.rendering import render_episode
from evorl.workflows import PPOWorkflow


@pytest.mark.parametrize("suffix", [".gif", ".mp4"])
def test_render_gymnax_episode(tmp_path, suffix):
    iio = pytest.importorskip("imageio.v3")
    if suffix == ".mp4":
        pytest.importorskip("imageio_ffmpeg")
    workflow = PPOWorkflow.build_from_config({
        "env": {"env_name": "Catch-bsuite", "env_type": "gymnax"},
        "agent": {"actor_hidden_layer_sizes": [8], "critic_hidden_layer_sizes": [8]},
    }, recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    path = render_episode(workflow, state, tmp_path / f"episode{suffix}", max_steps=30)
    frames = iio.imread(path)
    assert frames.ndim == 4 and frames.shape[-1] == 3 and len(frames) == 9  # Catch: the ball falls 9 rows


def test_mean_and_band_matches_student_t():
    xs = [np.array([0.0, 10.0]), np.array([0.0, 10.0]), np.array([0.0, 10.0])]
    ys = [np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.array([5.0, 9.0])]
    grid, mean, low, high = mean_and_band(xs, ys, points=2)
    np.testing.assert_allclose(grid, [0.0, 10.0])
    np.testing.assert_allclose(mean, [3.0, 5.0])
    # half width t_{0.975, 2} * s / sqrt(3), s = sample std (ddof 1)
    np.testing.assert_allclose(high - mean, 4.303 * np.std([1, 3, 5], ddof=1) / np.sqrt(3) * np.array([1, 0])
                               + 4.303 * np.std([2, 4, 9], ddof=1) / np.sqrt(3) * np.array([0, 1]), rtol=1e-6)
    np.testing.assert_allclose(mean - low, high - mean)
    assert t95(1) == 12.706 and abs(t95(30) - 2.042) < 0.01 and abs(t95(1000) - 1.96) < 0.01


def test_render_brax_episode_to_html(tmp_path):
    pytest.importorskip("brax")
    workflow = PPOWorkflow.build_from_config({
        "env": {"env_name": "inverted_pendulum", "env_type": "brax", "backend": "spring"},
        "agent": {"actor_hidden_layer_sizes": [8], "critic_hidden_layer_sizes": [8]},
    }, recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    path = render_episode(workflow, state, tmp_path / "episode.html", max_steps=20)
    page = path.read_text()
    assert "<title>brax visualizer</title>" in page.lower() and page.rstrip().endswith("</html>")
    assert len(page) > 1000
    with pytest.raises(ValueError, match=r"writes \.html files"):
        render_episode(workflow, state, tmp_path / "episode.gif", max_steps=5)

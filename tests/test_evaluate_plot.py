"""Evaluation renderings (learning curves: tests/test_plotting.py)."""

import jax
import pytest

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

"""Renderings of greedy episodes: gymnax environments to GIF / MP4 frames (imageio), host
environments (gymnasium, ``render_mode="rgb_array"``) to GIF / MP4 frames, brax environments
to brax's interactive HTML viewer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def greedy_episode(workflow: Any, agent_state: Any, key: jax.Array, max_steps: int):
    """One greedy episode in one environment: backend states ``[T]`` and returns so far ``[T]``,
    from the first observation to the last step before the episode ended."""
    env = workflow.env.with_num_envs(1)
    agent = workflow.agent

    def step(env_state, _):
        actions = agent.evaluate_actions(agent_state, env_state.obs)
        next_state = env.step(env_state, agent.to_env_action(actions))
        return next_state, (env_state.backend_state, env_state.episode_return, next_state.done)

    first = env.reset(key)
    _, (backend_states, returns, done) = jax.jit(lambda s: lax.scan(step, s, None, length=max_steps))(first)
    done = np.asarray(done[:, 0])
    length = int(np.argmax(done)) + 1 if done.any() else max_steps
    states = jax.tree.map(lambda x: np.asarray(x[:length, 0]), backend_states)  # [T, ...] of env 0
    return states, np.asarray(returns[:length, 0])


def gymnax_frames(env: Any, states: Any, returns: np.ndarray) -> list[np.ndarray]:
    """RGB frames ``[H, W, 3]`` drawn by gymnax's own visualiser."""
    import os

    import matplotlib

    matplotlib.use("Agg")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")  # classic-control frames come from pygame
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    from gymnax.visualize import Visualizer

    sequence = [jax.tree.map(lambda x, i=i: jnp.asarray(x[i]), states) for i in range(len(returns))]
    vis = Visualizer(env._env, env._params, sequence, returns)
    try:
        vis.init()
    except Exception as e:
        if type(e).__name__ == "DependencyNotInstalled":  # gymnasium's classic-control renderer
            raise ImportError(f"Rendering {env.env_name} needs pygame: pip install 'evorl[render]'.") from None
        raise
    frames = []
    for i in range(len(sequence)):
        vis.update(i)
        vis.fig.canvas.draw()
        frames.append(np.asarray(vis.fig.canvas.buffer_rgba())[..., :3].copy())
    import matplotlib.pyplot as plt

    plt.close(vis.fig)
    return frames


def host_frames(env: Any, agent: Any, agent_state: Any, seed: int, max_steps: int) -> list[np.ndarray]:
    """RGB frames ``[H, W, 3]`` of one greedy episode of the host env ``env``'s first copy,
    drawn by the env itself (``render_mode="rgb_array"``), from the first observation to the
    last step before the episode ended (at most ``max_steps`` frames)."""
    if not hasattr(env, "with_render_mode"):
        raise NotImplementedError(f"{type(env).__name__} ({env.env_name}) cannot draw frames; "
                                  f"render it with env_type 'gymnasium'.")
    env = env.with_num_envs(1).with_render_mode("rgb_array")
    greedy = jax.jit(lambda s, obs: agent.to_env_action(agent.evaluate_actions(s, obs)))
    try:
        env_state = env.reset(seed)
        frames = [env.render_frame(0)]
        while len(frames) < max_steps:
            env_state = env.step(np.asarray(greedy(agent_state, env_state.obs)))
            if env_state.done[0]:
                break
            frames.append(env.render_frame(0))
    finally:
        env.close()
    return frames


def write_frames(frames: list[np.ndarray], out_path: Path) -> None:
    """``frames`` to a ``.gif`` (50 ms a frame, looping) or ``.mp4`` (20 fps) file."""
    import imageio.v3 as iio

    if out_path.suffix.lower() == ".gif":
        iio.imwrite(out_path, frames, duration=50, loop=0)
    else:
        iio.imwrite(out_path, frames, fps=20)


def brax_html(env: Any, states: Any) -> str:
    """An interactive HTML page of the episode, drawn by brax's own renderer."""
    from brax.io import html

    pipeline_states = [jax.tree.map(lambda x, i=i: x[i], states.pipeline_state) for i in range(_length(states))]
    return html.render(env._env.sys, pipeline_states, colab=False)


def _length(states: Any) -> int:
    return int(jax.tree.leaves(states)[0].shape[0])


def render_episode(workflow: Any, state: Any, out_path: str | Path, max_steps: int = 500, seed: int = 0) -> Path:
    """Renders one greedy episode of ``state``'s policy to ``out_path``: ``.gif`` or ``.mp4``
    for gymnax environments (gymnax's visualiser) and host environments (their own
    ``rgb_array`` frames), ``.html`` for brax (brax's renderer)."""
    from evorl.envs.gymnax_env import GymnaxEnv

    out_path = Path(out_path)
    suffix = out_path.suffix.lower()
    is_brax = type(workflow.env).__name__ == "BraxEnv"
    on_host = getattr(workflow.env, "on_host", False)
    if not (isinstance(workflow.env, GymnaxEnv) or is_brax or on_host):
        raise NotImplementedError(f"{type(workflow.env).__name__} has no renderer (gymnax and brax environments do).")
    valid = (".html",) if is_brax else (".gif", ".mp4")
    if suffix not in valid:
        raise ValueError(f"Rendering {workflow.env.env_name} writes {' or '.join(valid)} files, not {out_path.name!r}.")
    max_steps = min(max_steps, workflow.env.episode_length)
    if on_host:
        frames = host_frames(workflow.env, workflow.agent, state.agent_state, seed, max_steps)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        write_frames(frames, out_path)
        return out_path
    states, returns = greedy_episode(workflow, state.agent_state, jax.random.PRNGKey(seed), max_steps)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    if is_brax:
        out_path.write_text(brax_html(workflow.env, states))
        return out_path
    write_frames(gymnax_frames(workflow.env, states, returns), out_path)
    return out_path

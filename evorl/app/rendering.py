"""Renderings of greedy episodes: gymnax and host environments (gymnasium,
``render_mode="rgb_array"``) to GIF (Pillow) or MP4 (imageio + ffmpeg) frames, brax
environments to brax's interactive HTML viewer. :func:`check_render` tells, before any work,
whether a rendering can be made (``evorl-eval`` asks it before its evaluation)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax import lax

from evorl.config.errors import install_hint


def greedy_episode(workflow: Any, agent_state: Any, key: jax.Array, max_steps: int):
    """One greedy episode in one environment: backend states ``[T]`` and returns so far ``[T]``,
    from the first observation to the last step before the episode ended."""
    env = workflow.env.with_num_envs(1)
    agent = workflow.agent

    def step(carry, _):
        env_state, policy_state = carry
        actions, _, policy_state = agent.policy_step(agent_state, policy_state, env_state.obs, None, greedy=True)
        next_state = env.step(env_state, agent.to_env_action(actions))
        return (next_state, policy_state), (env_state.backend_state, env_state.episode_return, next_state.done)

    first = (env.reset(key), agent.initial_policy_state(1))
    _, (backend_states, returns, done) = jax.jit(lambda s: lax.scan(step, s, None, length=max_steps))(first)
    done = np.asarray(done[:, 0])
    length = int(np.argmax(done)) + 1 if done.any() else max_steps
    states = jax.tree.map(lambda x: np.asarray(x[:length, 0]), backend_states)  # [T, ...] of env 0
    return states, np.asarray(returns[:length, 0])


#: gymnax's classic-control envs, which gymnasium's own renderer (pygame) draws.
CLASSIC_CONTROL = ("Acrobot-v1", "CartPole-v1", "Pendulum-v1", "MountainCar-v0", "MountainCarContinuous-v0")


@contextlib.contextmanager
def headless_pygame():
    """pygame (SDL) without a display or a sound card, for drawing into surfaces: SDL's
    ``dummy`` video and audio drivers unless the user chose others, and no support prompt.

    Without them, each ``pygame.init()`` on a headless machine probes Wayland (``error:
    XDG_RUNTIME_DIR is invalid or not set in the environment.`` on stderr, once per frame when
    gymnax's visualiser started pygame for each frame) and ALSA (a dozen ``ALSA lib`` lines).
    The variables are restored on exit."""
    defaults = {"SDL_VIDEODRIVER": "dummy", "SDL_AUDIODRIVER": "dummy", "PYGAME_HIDE_SUPPORT_PROMPT": "1"}
    added = [name for name in defaults if not os.environ.get(name)]
    os.environ.update({name: defaults[name] for name in added})
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


def require_pygame(env_name: str) -> None:
    """An ImportError naming the ``render`` extra when pygame, which draws ``env_name``, is missing."""
    with headless_pygame():
        try:
            import pygame  # noqa: F401
        except ImportError:
            raise ImportError(f"Rendering {env_name} needs pygame: {install_hint('render')}.") from None


def classic_control_frames(env: Any, states: Any, returns: np.ndarray) -> list[np.ndarray]:
    """RGB frames ``[H, W, 3]`` of a gymnax classic-control episode (``states``: host arrays
    ``[T, ...]``), drawn by gymnasium's renderer (as gymnax's visualiser does, but with one
    gymnasium env for the whole episode instead of one per frame) and captioned with the
    step and the return so far."""
    import gymnasium
    from gymnax.visualize.vis_gym import get_gym_state, set_gym_params

    name = env.env_name
    require_pygame(name)
    with headless_pygame():
        renderer = gymnasium.make(name, render_mode="rgb_array")
        try:
            renderer.reset(seed=0)
            unwrapped = renderer.unwrapped
            set_gym_params(unwrapped, name, env._params)
            frames = []
            for t in range(len(returns)):
                state = jax.tree.map(lambda x, t=t: x[t], states)
                unwrapped.state = get_gym_state(state, name)
                if name == "Pendulum-v1":
                    unwrapped.last_u = np.float64(state.last_u)
                frames.append(caption(renderer.render(), f"{name}  step {t + 1}  return {returns[t]:.1f}"))
        finally:
            renderer.close()
    return frames


def caption(frame: np.ndarray, text: str) -> np.ndarray:
    """``frame`` with ``text`` written in its top-left corner (Pillow's default font)."""
    from PIL import Image, ImageDraw

    image = Image.fromarray(frame)
    ImageDraw.Draw(image).text((8, 6), text, fill=(0, 0, 0))
    return np.asarray(image)


def gymnax_frames(env: Any, states: Any, returns: np.ndarray) -> list[np.ndarray]:
    """RGB frames ``[H, W, 3]`` of a gymnax episode (``states``: host arrays ``[T, ...]``):
    classic control by gymnasium's renderer, the others by gymnax's matplotlib visualiser."""
    if env.env_name in CLASSIC_CONTROL:
        return classic_control_frames(env, states, returns)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from gymnax.visualize import Visualizer

    sequence = [jax.tree.map(lambda x, t=t: x[t], states) for t in range(len(returns))]
    vis = Visualizer(env._env, env._params, sequence, returns)
    try:
        vis.init()
        frames = []
        for t in range(len(sequence)):
            vis.update(t)
            vis.fig.canvas.draw()
            frames.append(np.asarray(vis.fig.canvas.buffer_rgba())[..., :3].copy())
    finally:
        plt.close(vis.fig)
    return frames


def host_frames(env: Any, agent: Any, agent_state: Any, seed: int, max_steps: int) -> list[np.ndarray]:
    """RGB frames ``[H, W, 3]`` of one greedy episode of the host env ``env``'s first copy,
    drawn by the env itself (``render_mode="rgb_array"``), from the first observation to the
    last step before the episode ended (at most ``max_steps`` frames)."""
    env = _host_renderer(env)

    @jax.jit
    def greedy(agent_state, policy_state, obs):
        actions, _, policy_state = agent.policy_step(agent_state, policy_state, obs, None, greedy=True)
        return agent.to_env_action(actions), policy_state

    with headless_pygame():
        try:
            env_state = env.reset(seed)
            policy_state = agent.initial_policy_state(env.num_envs)
            frames = [env.render_frame(0)]
            while len(frames) < max_steps:
                actions, policy_state = greedy(agent_state, policy_state, env_state.obs)
                env_state = env.step(np.asarray(actions))
                if env_state.done[0]:
                    break
                frames.append(env.render_frame(0))
        finally:
            env.close()
    return frames


def _host_renderer(env: Any) -> Any:
    if not hasattr(env, "with_render_mode"):
        raise NotImplementedError(f"{type(env).__name__} ({env.env_name}) cannot draw frames; "
                                  f"render it with env_type 'gymnasium'.")
    return env.with_num_envs(1).with_render_mode("rgb_array")


#: imageio-ffmpeg's environment variable: set (not 0 or false), ffmpeg starts without a preexec_fn.
FFMPEG_PLAIN_START = "IMAGEIO_FFMPEG_NO_PREVENT_SIGINT"


def write_frames(frames: list[np.ndarray], out_path: Path) -> None:
    """``frames`` to a ``.gif`` (50 ms a frame, looping) or ``.mp4`` (20 fps) file."""
    if out_path.suffix.lower() == ".gif":
        write_gif(frames, out_path, frame_ms=50)
        return
    import imageio.v3 as iio

    # imageio-ffmpeg starts ffmpeg with preexec_fn=os.setpgrp (to keep Ctrl-C from it), which runs
    # Python in the forked child of a multithreaded process (JAX): a deadlock risk, and JAX's
    # "os.fork() was called" RuntimeWarning. Its own switch starts ffmpeg without it.
    previous = os.environ.get(FFMPEG_PLAIN_START)
    os.environ.setdefault(FFMPEG_PLAIN_START, "1")
    try:
        iio.imwrite(out_path, frames, fps=20)
    finally:
        if previous is None:
            os.environ.pop(FFMPEG_PLAIN_START, None)


def write_gif(frames: list[np.ndarray], out_path: Path, frame_ms: int) -> None:
    """``frames`` (RGB ``[H, W, 3]`` uint8) to a looping GIF with one palette for all frames.

    The palette: the 256 most frequent colours of up to 16 frames spread over the episode (a
    classic-control frame is a few flat colours and their anti-aliased edges), or Pillow's
    median cut of them when they have more than 65536 colours. Each pixel maps to its own
    colour when the palette has it, else to the palette colour nearest to its 5-bit-per-channel
    bin, without dithering (which on rendered frames only adds noise and size). Pillow's own
    mapping rounds every colour to its bin (white became (252, 252, 252)); quantising each
    frame to a palette of its own (what ``imageio`` does) took about a minute for a 500-frame
    CartPole GIF."""
    from PIL import Image

    sample = Image.fromarray(np.concatenate(frames[:: max(1, len(frames) // 16)], axis=0))
    colors = sample.getcolors(1 << 16)  # [(count, (r, g, b))], None if more
    if colors is None:
        palette = np.asarray(sample.quantize(256, Image.Quantize.MEDIANCUT).getpalette(), np.uint8).reshape(-1, 3)
    else:
        palette = np.asarray([rgb for _, rgb in sorted(colors, reverse=True)[:256]], np.uint8)  # [P, 3]
    lookup = _palette_lookup(palette)
    images = []
    for frame in frames:
        rgb = frame.astype(np.int32)
        image = Image.fromarray(lookup[(rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]])  # mode "L"
        image.putpalette(palette.reshape(-1).tolist())  # mode "P"
        images.append(image)
    # optimize=False: every frame keeps the one palette (Pillow would trim and remap each frame)
    images[0].save(out_path, save_all=True, append_images=images[1:], duration=frame_ms, loop=0, optimize=False)


def _palette_lookup(palette: np.ndarray) -> np.ndarray:
    """``[2**24]`` uint8: for each 24-bit colour ``r << 16 | g << 8 | b`` its index in
    ``palette`` ``[P, 3]`` if there, else the index of the colour nearest to its 5-bit bin."""
    centres = np.arange(32, dtype=np.float32) * 8 + 4
    bins = np.stack(np.meshgrid(centres, centres, centres, indexing="ij"), axis=-1).reshape(-1, 3)  # [32768, 3]
    colours = palette.astype(np.float32)  # [P, 3]
    distances = (bins**2).sum(1, keepdims=True) - 2 * bins @ colours.T + (colours**2).sum(1)  # [32768, P]
    nearest = np.argmin(distances, axis=1).astype(np.uint8)
    level = np.arange(256) >> 3
    lookup = nearest.reshape(32, 32, 32)[np.ix_(level, level, level)].reshape(-1)  # [2**24]
    keys = (palette[:, 0].astype(np.int32) << 16) | (palette[:, 1].astype(np.int32) << 8) | palette[:, 2]
    lookup[keys[::-1]] = np.arange(len(palette), dtype=np.uint8)[::-1]  # a repeated colour: its first index
    return lookup


def brax_html(env: Any, states: Any) -> str:
    """An interactive HTML page of the episode, drawn by brax's own renderer."""
    from brax.io import html

    pipeline_states = [jax.tree.map(lambda x, i=i: x[i], states.pipeline_state) for i in range(_length(states))]
    return html.render(env._env.sys, pipeline_states, colab=False)


def _length(states: Any) -> int:
    return int(jax.tree.leaves(states)[0].shape[0])


def check_render(env: Any, out_path: str | Path) -> None:
    """Raises the error :func:`render_episode` would meet rendering ``env`` to ``out_path``,
    cheaply and before any other work (``evorl-eval`` calls it before its evaluation): an env
    with no renderer, a file type its renderer does not write, a missing package of the
    ``render`` extra (pygame; imageio-ffmpeg for MP4). A host env draws one frame to tell."""
    from evorl.envs.gymnax_env import GymnaxEnv

    suffix = Path(out_path).suffix.lower()
    is_brax = type(env).__name__ == "BraxEnv"
    on_host = env.on_host
    if not (isinstance(env, GymnaxEnv) or is_brax or on_host):
        raise NotImplementedError(f"{type(env).__name__} has no renderer (gymnax, brax and gymnasium environments do).")
    valid = (".html",) if is_brax else (".gif", ".mp4")
    if suffix not in valid:
        raise ValueError(f"Rendering {env.env_name} writes {' or '.join(valid)} files, not {Path(out_path).name!r}.")
    if suffix == ".mp4" and not any(importlib.util.find_spec(m) for m in ("imageio_ffmpeg", "av")):
        raise ImportError(f"Writing {Path(out_path).name} needs ffmpeg: {install_hint('render')}.")
    if isinstance(env, GymnaxEnv) and env.env_name in CLASSIC_CONTROL:
        require_pygame(env.env_name)
    if on_host:
        renderer = _host_renderer(env)
        with headless_pygame():
            try:
                renderer.reset(0)
                renderer.render_frame(0)
            finally:
                renderer.close()


def render_episode(workflow: Any, state: Any, out_path: str | Path, max_steps: int = 500, seed: int = 0) -> Path:
    """Renders one greedy episode of ``state``'s policy to ``out_path``: ``.gif`` or ``.mp4``
    for gymnax environments (gymnasium's renderer for classic control, gymnax's visualiser
    for the others) and host environments (their own ``rgb_array`` frames), ``.html`` for
    brax (brax's renderer). Checks first what :func:`check_render` checks."""
    env = workflow.env
    out_path = Path(out_path)
    check_render(env, out_path)
    max_steps = min(max_steps, env.episode_length)
    if env.on_host:
        frames = host_frames(env, workflow.agent, state.agent_state, seed, max_steps)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        write_frames(frames, out_path)
        return out_path
    states, returns = greedy_episode(workflow, state.agent_state, jax.random.PRNGKey(seed), max_steps)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    if type(env).__name__ == "BraxEnv":
        out_path.write_text(brax_html(env, states))
        return out_path
    write_frames(gymnax_frames(env, env.game_states(states), returns), out_path)
    return out_path

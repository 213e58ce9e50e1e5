"""Time of a 500-frame CartPole-v1 GIF, the rendering ``evorl-eval --render x.gif`` makes.

A hand-written controller (push towards where the pole falls) balances CartPole for all 500
steps, so the episode is as long as a trained agent's; its states are drawn and written by
``evorl.app.rendering`` as ``render_episode`` does. Prints the wall and CPU seconds of drawing
the frames and of writing the GIF. Needs the render extra (``pip install -e ".[render]"``).

    python benchmarks/render_gif.py [--frames 500] [--out /tmp/cartpole.gif]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import jax
import numpy as np
from jax import lax

from evorl.envs.gymnax_env import GymnaxEnv
from evorl.app.rendering import check_render, gymnax_frames, write_frames


def balanced_episode(env: GymnaxEnv, steps: int):
    """CartPole states ``[T, ...]`` and returns so far ``[T]`` of a controller that balances."""
    gymnax_env, params = env._env, env._params

    def step(carry, key):
        state, ret = carry
        push_right = state.theta + 0.5 * state.theta_dot + 0.01 * state.x + 0.1 * state.x_dot > 0
        _, next_state, reward, _, _ = gymnax_env.step_env(key, state, push_right.astype(int), params)
        return (next_state, ret + reward), (state, ret + reward)

    _, first = gymnax_env.reset_env(jax.random.PRNGKey(0), params)
    _, (states, returns) = lax.scan(step, (first, 0.0), jax.random.split(jax.random.PRNGKey(1), steps))
    return jax.tree.map(np.asarray, states), np.asarray(returns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=500)
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp()) / "cartpole.gif")
    args = parser.parse_args()
    env = GymnaxEnv("CartPole-v1", num_envs=1)
    check_render(env, args.out)
    states, returns = balanced_episode(env, args.frames)
    assert abs(float(states.theta[-1])) < 0.2, "the controller let the pole fall"
    wall, cpu = time.perf_counter(), time.process_time()
    frames = gymnax_frames(env, states, returns)
    draw_wall, draw_cpu = time.perf_counter() - wall, time.process_time() - cpu
    wall, cpu = time.perf_counter(), time.process_time()
    write_frames(frames, args.out)
    write_wall, write_cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"{len(frames)} frames {frames[0].shape[1]}x{frames[0].shape[0]}: draw {draw_wall:.1f} s "
          f"(CPU {draw_cpu:.1f} s), write {write_wall:.1f} s (CPU {write_cpu:.1f} s), total "
          f"{draw_wall + write_wall:.1f} s; {args.out} ({args.out.stat().st_size / 1e3:.0f} kB)")


if __name__ == "__main__":
    main()

"""Freeway-MinAtar controls on the CPU: which difference from gymnax-blines, or from the chip,
moves PPO's return. ``ppo_minatar_freeway`` without sticky actions (gymnax-blines' terms),
32 greedy episodes every 153 iterations, one agent (``pop2``: two in one program), variants:

* ``base``: the config as shipped (but sticky actions 0);
* ``init``: every layer initialised as gymnax-blines' networks are (Flax's LeCun-normal
  weights, biases uniform in [0, 0.05]) instead of orthogonal weights and zero biases;
* ``term``: the 2,500-step end of an episode treated as terminal (gymnax-blines' gymnax did),
  instead of a time limit bootstrapped from;
* ``bf16``: every matmul's inputs rounded to bfloat16 and summed in float32, as a TPU's default
  float32 matmul does;
* ``pop2``: two agents in one program, as the chip's runs train eight.

The patches replace module globals before the workflow is built; they are controls, not
features. One JSON line per evaluation and one at the end::

    python benchmarks/freeway_cpu_controls.py base 7 [iterations] >> benchmarks/results/minatar/freeway_cpu_controls.jsonl
"""

import json
import sys
import time
from pathlib import Path
from typing import Any

import flax.linen as linen
import jax
import jax.numpy as jnp
from omegaconf import OmegaConf

import evorl.networks as nets
from evorl.envs import gymnax_env
from evorl.workflows import resolve_workflow_cls

ROOT = Path(__file__).resolve().parents[1]


class BlinesInit:
    """``flax.linen`` with ``Dense`` initialised as gymnax-blines' layers are."""

    def __getattr__(self, name):
        return getattr(linen, name)

    @staticmethod
    def Dense(*args, **kwargs):  # noqa: N802 (it stands for flax.linen.Dense)
        kwargs.update(kernel_init=linen.initializers.lecun_normal(), bias_init=linen.initializers.uniform(0.05))
        return linen.Dense(*args, **kwargs)


def rounded(a):
    return a.astype(jnp.bfloat16).astype(jnp.float32)


class BF16Dense(linen.Module):
    """A dense layer whose product rounds its inputs to bfloat16 and sums in float32 (a TPU's
    default float32 matmul)."""

    features: int
    kernel_init: Any = linen.initializers.lecun_normal()
    bias_init: Any = linen.initializers.zeros

    @linen.compact
    def __call__(self, x):
        kernel = self.param("kernel", self.kernel_init, (x.shape[-1], self.features))
        bias = self.param("bias", self.bias_init, (self.features,))
        return rounded(x) @ rounded(kernel) + bias


class BF16:
    """``flax.linen`` with ``Dense`` replaced by :class:`BF16Dense`."""

    Dense = BF16Dense

    def __getattr__(self, name):
        return getattr(linen, name)


def main() -> None:
    variant, seed = sys.argv[1], int(sys.argv[2])
    if "init" in variant:
        nets.nn = BlinesInit()
    if "bf16" in variant:
        nets.nn = BF16()
    if "term" in variant:
        step_one = gymnax_env.GymnaxEnv._step_one

        def terminal_at_the_limit(self, key, state, action):
            obs, state, reward, terminated = step_one(self, key, state, action)
            return obs, state, reward, jnp.logical_or(terminated, state.time >= self._params.max_steps_in_episode)

        gymnax_env.GymnaxEnv._step_one = terminal_at_the_limit
    cfg = OmegaConf.to_container(OmegaConf.load(ROOT / "configs" / "ppo_minatar_freeway.yaml"), resolve=True)
    cfg.pop("defaults", None)
    cfg["seed"] = seed
    cfg["env"]["repeat_action_probability"] = 0.0
    cfg["training"].update(num_seeds=2 if "pop2" in variant else 1, eval_interval=153, eval_episodes=32)
    if len(sys.argv) > 3:
        cfg["training"]["num_iterations"] = int(sys.argv[3])
    start = time.perf_counter()
    head = {"variant": variant, "seed": seed, "backend": jax.default_backend()}

    class Recorder:
        def init(self, config):
            pass

        def write(self, metrics, step):
            if "eval/episode_return" in metrics:
                per = workflow.last_metrics_per_agent.get("eval/episode_return")
                print(json.dumps({**head, "env_steps": int(step), "ret": float(metrics["eval/episode_return"]),
                                  "per_agent": None if per is None else [float(x) for x in per],
                                  "wall_s": round(time.perf_counter() - start)}), flush=True)

        def close(self):
            pass

    workflow = resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=[Recorder()])
    head["budget_env_steps"] = cfg["training"]["num_iterations"] * workflow.env_steps_per_iteration
    state = workflow.learn(workflow.init(jax.random.PRNGKey(seed)))
    final = workflow.evaluate(state)
    print(json.dumps({**head, "final": float(final["eval/episode_return"]), "wall_s": round(time.perf_counter() - start)}),
          flush=True)


if __name__ == "__main__":
    main()

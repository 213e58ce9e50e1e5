"""A gymnasium memory task, and a recurrent agent trained on it by the asynchronous
actor-learner (the runner host environments train with).

``MemoryCue-v0`` (bsuite's memory chain, written for gymnasium): the first observation shows
a cue, +1 or -1; the next ``memory_length - 1`` observations show only the time; the last one
asks for the cue. Answering it (action 1 for +1, 0 for -1) earns +1, the other answer -1, and
the episode terminates; every earlier step earns 0 whatever the action. Observations are
``[cue (shown at t = 0 only), t / memory_length, 1 at the question]``. A policy without
memory is at chance (expected return 0); one that remembers the cue returns 1.

Any module that registers a gymnasium env trains with evorl by naming it
``module:Id`` (evorl imports the module first)::

    PYTHONPATH=examples evorl-train env.env_type=gymnasium env.env_name=memory_cue:MemoryCue-v0 \\
        agent.core=gru agent.core_size=32 ...

Run this file to train a GRU and a feed-forward agent on it, side by side::

    python examples/memory_cue.py [--seeds 0 1 2] [--iterations 60]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import gymnasium
import numpy as np

ENV_ID = "MemoryCue-v0"


class MemoryCue(gymnasium.Env):
    """Remember the first observation's cue until the last step asks for it (module docstring)."""

    def __init__(self, memory_length: int = 5):
        if int(memory_length) < 1:
            raise ValueError(f"memory_length must be >= 1, got {memory_length}")
        self.memory_length = int(memory_length)
        self.observation_space = gymnasium.spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.action_space = gymnasium.spaces.Discrete(2)
        self._t, self._cue = 0, 1.0

    def _obs(self) -> np.ndarray:
        cue = self._cue if self._t == 0 else 0.0
        question = 1.0 if self._t == self.memory_length - 1 else 0.0
        return np.array([cue, self._t / self.memory_length, question], np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t, self._cue = 0, float(self.np_random.choice([-1.0, 1.0]))
        return self._obs(), {}

    def step(self, action):
        if self._t < self.memory_length - 1:
            self._t += 1
            return self._obs(), 0.0, False, False, {}
        correct = (int(action) == 1) == (self._cue > 0)
        return self._obs(), 1.0 if correct else -1.0, True, False, {}


if ENV_ID not in gymnasium.registry:
    gymnasium.register(id=ENV_ID, entry_point=MemoryCue, max_episode_steps=1000)  # a time limit never reached


def config(core: str, seed: int, iterations: int) -> dict:
    """Recurrent (``core='gru'``) or feed-forward (``core='none'``) PPO on MemoryCue-v0, trained by
    the actor-learner (2 actors of 8 envs, 16-step rollouts)."""
    return {
        "workflow_cls": "evorl.workflows.PPOWorkflow",
        "env": {"env_type": "gymnasium", "env_name": f"memory_cue:{ENV_ID}"},
        "agent": {"core": core, "core_size": 32, "actor_hidden_layer_sizes": [32], "critic_hidden_layer_sizes": [32],
                  "ent_coef": 0.01},
        "training": {"num_envs": 16, "rollout_length": 16, "num_iterations": iterations, "num_epochs": 4,
                     "num_minibatches": 2, "learning_rate": 3e-3, "eval_interval": iterations, "eval_episodes": 64},
        "seed": seed,
        "runner": {"mode": "async", "num_actors": 2},
        "logging": {"recorders": []},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--iterations", type=int, default=60)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # so that evorl imports memory_cue by name
    from evorl.app.experiment import run_experiment

    for core in ("gru", "none"):
        finals = [run_experiment(config(core, seed, args.iterations)).final_metrics["eval/episode_return"]
                  for seed in args.seeds]
        print(f"agent.core={core}: greedy return {', '.join(f'{r:.2f}' for r in finals)} (seeds {args.seeds}, "
              f"{args.iterations * 16 * 16} env steps each)", flush=True)


if __name__ == "__main__":
    main()

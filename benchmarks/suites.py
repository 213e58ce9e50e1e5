"""Named benchmark sets: which config runs with which overrides, seeds and target.

A :class:`Benchmark` names a file in ``configs/`` and optional dotted overrides (e.g. a
shorter run for the CPU). ``target`` is the evaluation return the issue asks for (higher
is better); ``None`` means the entry is only timed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Benchmark:
    config: str  # file name in configs/ without .yaml
    overrides: dict[str, Any] = field(default_factory=dict)  # {"training.num_iterations": 10}
    seeds: tuple[int, ...] = (0, 1)
    target: float | None = None

    @property
    def name(self) -> str:
        return self.config


MINATAR = ("breakout", "asterix", "freeway", "seaquest", "space_invaders")
BRAX = (
    "ant", "halfcheetah", "hopper", "humanoid", "humanoidstandup", "inverted_pendulum",
    "inverted_double_pendulum", "pusher", "reacher", "swimmer", "walker2d",
)
ALGORITHMS = ("ppo", "a2c", "impala")

_TINY = {"training.num_iterations": 2, "training.eval_interval": 1, "training.eval_episodes": 2}

SUITES: dict[str, list[Benchmark]] = {
    # Seconds per entry: checks that every kind of run builds, compiles and logs.
    "smoke": [
        Benchmark("ppo_cartpole", _TINY, seeds=(0,)),
        Benchmark("ppo_brax_inverted_pendulum", {**_TINY, "training.num_envs": 4}, seeds=(0,)),
        Benchmark("ppo_minatar_breakout", {**_TINY, "training.num_envs": 4}, seeds=(0,)),
        Benchmark("a2c_minatar_breakout", {**_TINY, "training.num_envs": 4}, seeds=(0,)),
        Benchmark("impala_minatar_breakout", {**_TINY, "training.num_envs": 4}, seeds=(0,)),
        Benchmark("impala_gymnasium_cartpole", _TINY, seeds=(0,)),
    ],
    # The CPU targets; the whole set fits in ~30 minutes on a 2-core CPU.
    "cpu": [
        Benchmark("ppo_acrobot", seeds=(0, 1), target=-100.0),
        Benchmark("ppo_brax_inverted_pendulum", seeds=(0, 1), target=900.0),
        Benchmark("ppo_brax_reacher", seeds=(0, 1), target=-10.0),
        # 4.9M of the config's 9.8M steps (the whole 9.8M for 3 seeds would take ~35 min here)
        Benchmark("ppo_minatar_breakout", {"training.num_iterations": 600}, seeds=(0, 1, 2), target=20.0),
    ],
    # Host environments (gymnasium, ALE) with actors and a learner: the targets.
    "host": [
        Benchmark("impala_gymnasium_cartpole", seeds=(0, 1, 2), target=475.0),
        Benchmark("ppo_gymnasium_inverted_pendulum", seeds=(0, 1, 2), target=950.0),
        # 1M frames; a random policy scores 1.6 +- 1.6 (benchmarks/atari_random.py)
        Benchmark("impala_atari_breakout", seeds=(0,), target=5.0),
    ],
    # Every config at full length: for a GPU (hours on a CPU).
    "full": [
        *(Benchmark(f"ppo_brax_{env}", seeds=(0, 1, 2)) for env in BRAX),
        *(Benchmark(f"{algo}_minatar_{game}", seeds=(0, 1, 2)) for algo in ALGORITHMS for game in MINATAR),
        Benchmark("ppo_acrobot", seeds=(0, 1, 2), target=-100.0),
        Benchmark("impala_atari_breakout_gpu", seeds=(0, 1, 2)),
    ],
}

"""The fragile configs on seeds nobody tuned on (slow set): a config that learns only on the
seeds it was tuned with, or that reaches its target and then collapses, fails here.

Each test runs the entry as ``benchmarks/run.py configs`` does (``run_benchmark``): every seed
from ``PRNGKey(seed)``, final greedy return against the target, collapse judged on the
normalised score (final < 0.9 x best), passing at >= 80% of the seeds.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from run import run_benchmark  # noqa: E402
from suites import HELD_OUT_SEEDS, Benchmark  # noqa: E402


def check(config: str, target: float, seeds: tuple[int, ...]) -> None:
    result = run_benchmark(Benchmark(config, target=target), seeds)
    assert result.ok, (f"{config}: {result.met} seeds passed; final {result.per_seed}, best "
                       f"{result.best_per_seed}, collapsed {result.collapsed}")


@pytest.mark.slow
def test_impala_cartpole_full_length_on_held_out_seeds():
    # 1000 iterations x 512 env steps, 5 seeds: ~1 min on 2 cores
    check("impala_cartpole", 475.0, HELD_OUT_SEEDS)


@pytest.mark.slow
def test_ppo_brax_inverted_pendulum_on_held_out_seeds():
    pytest.importorskip("brax")
    # 819k env steps per seed, ~40 s each on 2 cores: two of the held-out seeds
    check("ppo_brax_inverted_pendulum", 900.0, HELD_OUT_SEEDS[:2])


@pytest.mark.slow  # learning runs
@pytest.mark.parametrize("config", ["a2c_cartpole", "impala_cartpole", "es_openes_cartpole"])
def test_the_cheap_learning_check_of_each_algorithm_on_two_held_out_seeds(config):
    """The default set's learning check of A2C, IMPALA and ES (PPO's and DQN's are in
    test_learning.py and test_dqn.py): the shipped CartPole config at its own length on two
    held-out seeds, both at 475 without collapse (a few seconds per seed after compiling)."""
    check(config, 475.0, HELD_OUT_SEEDS[:2])

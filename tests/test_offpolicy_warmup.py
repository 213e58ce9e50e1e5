"""The iterations before an off-policy run's learning start, as a program of their own
(:func:`evorl.engine.off_policy_workflow.iterations_before_learning`, the executor's ``Warmup``):
the same state and metrics, bit for bit, as every iteration running the full program, for one
agent and a population, in one call or in calls that cross the learning start, and again after
the buffer restarts empty (a resume with ``checkpoint.save_buffer: false``)."""

import jax
import numpy as np
import pytest

from evorl.algorithms.sac import SACWorkflow
from evorl.engine.off_policy_workflow import iterations_before_learning

from test_td3_sac import tiny


class OneProgramSAC(SACWorkflow):
    """SAC with every iteration in the full program: the reference."""

    warmup_program = False


def run(workflow, state, lengths):
    """``state`` after calls of ``lengths`` iterations, and each call's metrics (aggregated, and
    per agent for a population)."""
    metrics = []
    for n in lengths:
        state, aggregated = workflow.run_iterations(state, n)
        metrics.append((aggregated, dict(getattr(workflow, "last_metrics_per_agent", {}))))
    return state, metrics


def assert_equal_trees(a, b):
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    assert jax.tree.structure(a) == jax.tree.structure(b) and len(leaves_a) == len(leaves_b)
    for x, y in zip(leaves_a, leaves_b):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.slow  # the warm-up and the full off-policy programs both compiled and run
@pytest.mark.parametrize("num_seeds", [2, 1])
def test_warmup_program_equals_the_full_program(num_seeds):
    # 16 transitions an iteration: the buffer holds 16, 32, 48 after iterations 1-3, so the
    # first two cannot learn (learning_starts 40) and the third does
    cfg = tiny(num_seeds=num_seeds, learning_starts=40, warmup_steps=40)
    split = SACWorkflow.build_from_config(cfg, recorders=[])
    reference = OneProgramSAC.build_from_config(cfg, recorders=[])
    assert reference.executor.warmup is None
    initial = split.init(jax.random.PRNGKey(5))
    assert iterations_before_learning(split.config.training, initial) == 2
    split.compile(initial)
    for lengths in ([6], [1, 2, 3]):  # one call; calls crossing the learning start
        ours, our_metrics = run(split, split.init(jax.random.PRNGKey(5)), lengths)
        theirs, their_metrics = run(reference, reference.init(jax.random.PRNGKey(5)), lengths)
        assert "warmup" in split.executor._timings and int(np.max(ours.gradient_steps)) == 4 * 3
        assert_equal_trees(ours, theirs)
        assert_equal_trees(our_metrics, their_metrics)
    # the buffer restarts empty at iteration 6: two more iterations that cannot learn
    empty = lambda: split.init(jax.random.PRNGKey(5))  # noqa: E731 (a fresh state's buffer; each run donates its own)
    ours, our_metrics = run(split, split.state_with_buffer_of(ours, empty()), [4])
    theirs, their_metrics = run(reference, reference.state_with_buffer_of(theirs, empty()), [4])
    assert int(np.max(ours.gradient_steps)) == (4 + 2) * 3
    assert_equal_trees(ours, theirs)
    assert_equal_trees(our_metrics, their_metrics)

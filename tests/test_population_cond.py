"""A population pays only for what it computes: ``population_cond`` takes a branch once for all
agents of a ``vmap`` (not a select that runs both branches for every agent), with each agent's
values those of its own ``lax.cond``; an off-policy population's gradient steps before the
learning start are skipped, not computed and thrown away."""

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
from jax import lax

from evorl.rl.collectives import population_cond
from evorl.rl.rollout import Trajectory
from evorl.workflows import SACWorkflow
from evorl.engine.execution import POPULATION_AXIS
from evorl.rl.off_policy import make_learner_update
from test_td3_sac import tiny


def branches(calls):
    def true_fn(x, y):
        jax.debug.callback(lambda: calls.append("true"))
        return {"a": x * 2.0 + y, "b": jnp.sum(x)}

    def false_fn(x, y):
        return {"a": x - y, "b": jnp.zeros(())}

    return true_fn, false_fn


def test_each_agent_gets_its_own_branch_as_a_loop_of_conds_gives():
    x = jnp.arange(12.0).reshape(4, 3)  # [N, 3]
    y = jnp.asarray([1.0, -2.0, 3.0, 0.5])  # [N]
    pred = jnp.asarray([True, False, False, True])
    true_fn, false_fn = branches([])
    got = jax.vmap(lambda p, a, b: population_cond(p, true_fn, false_fn, a, b, axis_name=POPULATION_AXIS),
                   axis_name=POPULATION_AXIS)(pred, x, y)
    for i in range(4):  # the reference: one plain cond per agent, outside any vmap
        want = lax.cond(pred[i], true_fn, false_fn, x[i], y[i])
        for key in ("a", "b"):
            np.testing.assert_array_equal(got[key][i], want[key])


def test_no_agent_computes_a_branch_that_none_takes():
    x, y = jnp.ones((4, 3)), jnp.zeros(4)
    calls = []
    true_fn, false_fn = branches(calls)

    def run(cond):
        calls.clear()
        jax.block_until_ready(jax.vmap(cond, axis_name=POPULATION_AXIS)(jnp.zeros(4, bool), x, y))
        return len(calls)

    # lax.cond under vmap becomes a select: the true branch runs though no agent takes it
    assert run(lambda p, a, b: lax.cond(p, true_fn, false_fn, a, b)) == 1
    assert run(lambda p, a, b: population_cond(p, true_fn, false_fn, a, b, axis_name=POPULATION_AXIS)) == 0
    assert run(lambda p, a, b: population_cond(p | (a[0] > 0), true_fn, false_fn, a, b,
                                               axis_name=POPULATION_AXIS)) == 1  # one agent's is enough


def top_level_dots(jaxpr) -> int:
    """Matrix products of ``jaxpr`` outside any ``cond`` branch (scans looked into)."""
    count = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            count += 1
        elif eqn.primitive.name != "cond":
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                count += top_level_dots(sub)
    return count


def test_an_off_policy_population_runs_its_gradient_steps_inside_a_branch():
    """The learner update of a 2-agent SAC population, traced: with the population axis every
    gradient step (every matrix product of the networks' backward passes) sits inside a cond;
    without it (the vmapped cond became a select) they are computed on every update."""
    workflow = SACWorkflow.build_from_config(tiny(num_seeds=2), recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    tc = workflow.config.training
    obs_dim, action_dim = workflow.env.obs_space.shape[0], workflow.agent.action_dim
    flags = jnp.zeros((2, tc.rollout_length, tc.num_envs), bool)
    example = Trajectory(obs=jnp.zeros(flags.shape + (obs_dim,)), actions=jnp.zeros(flags.shape + (action_dim,)),
                         rewards=jnp.zeros(flags.shape), terminated=flags, truncated=flags,
                         next_obs=jnp.zeros(flags.shape + (obs_dim,)), extras={})  # [N, T, B, ...]
    keys = jax.random.split(jax.random.PRNGKey(1), 2)

    def dots(population_axis):
        update = make_learner_update(workflow.agent, workflow.optimizer, tc, population_axis=population_axis)
        jaxpr = jax.make_jaxpr(jax.vmap(update, axis_name=POPULATION_AXIS))(state, example, keys)
        return top_level_dots(jaxpr.jaxpr)

    assert dots(POPULATION_AXIS) == 0
    assert dots(None) > 0

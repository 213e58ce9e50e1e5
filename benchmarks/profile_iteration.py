"""Where one training iteration's time goes: each part timed as its own compiled program.

An on-policy iteration (:func:`evorl.rl.on_policy.make_iteration`) is, in order: the
rollout (env stepping and the policy's forward pass), the observation statistics and the
targets (GAE: the value network over ``obs`` and ``next_obs``), ``num_epochs`` minibatch
shuffles, and ``num_epochs x num_minibatches`` gradient steps (the loss's forward and
backward pass, then the optimiser). Each part is compiled alone at the shapes of the
config and run ``--reps`` times inside one ``lax.scan`` on data that changes every repetition
(so XLA cannot hoist it out of the loop); the table gives milliseconds per iteration and
the share of the whole iteration, which is timed the same way. The rest (``other``) is what
the parts do not cover: reshapes between them, metrics, the learning-rate schedule and what
XLA fuses across the parts' boundaries (negative when fusion across them saves time).

    python benchmarks/profile_iteration.py [--config ppo_throughput] [--reps 50] [--set key=value ...] [--plain]

``--plain`` profiles with :mod:`evorl.hardware`'s fast paths off (JAX's own Threefry lowering and
``jax.random.permutation``): the same results, the "before" of the speed-ups.

``--config ppo_throughput`` (the default) is ``benchmarks/ppo_throughput.py``'s job; any
other name is a file in ``configs/``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


def time_program(fn, *args, repeats: int = 3) -> float:
    """Median wall seconds of the compiled ``fn(*args)`` (compiled and run once first)."""
    import jax

    compiled = jax.jit(fn).lower(*args).compile()
    jax.block_until_ready(compiled(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def profile(workflow, reps: int = 50, seed: int = 0) -> list[tuple[str, float]]:
    """``[(part, ms per iteration)]`` for a fused single-agent ``OnPolicyWorkflow``; the last
    row is the whole iteration."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    from evorl import hardware
    from evorl.envs.spaces import Discrete
    from evorl.rl.rollout import rollout
    from evorl.rl.on_policy import init_state, make_iteration, shuffled_minibatches

    env, agent, optimizer, tc = workflow.env, workflow.agent, workflow.optimizer, workflow.config.training
    if workflow.num_agents != 1 or workflow.asynchronous:
        raise ValueError("profile a fused run of one agent (num_seeds 1, runner.mode fused)")
    key = jax.random.PRNGKey(seed)
    state = init_state(env, agent, optimizer, tc, key, agent.default_hparams(), tc.learning_rate)
    T, E, M = tc.rollout_length, tc.num_epochs, tc.num_minibatches
    keys = jax.random.split(key, reps)

    # Whole iterations, and one rollout per repetition (the data the later parts reuse).
    iteration = make_iteration(env, agent, optimizer, tc)

    def iterations(state, keys):
        final = lax.scan(lambda s, k: iteration(s.replace(key=k)), state, keys)[0]
        return final.agent_state.params, final.env_state  # everything the iterations compute feeds these

    def rollouts(state, keys):
        def one(env_state, k):
            env_state, traj, _ = rollout(env, agent, state.agent_state, env_state, k, T)
            return env_state, traj
        return lax.scan(one, state.env_state, keys)[1]  # [reps, T, B, ...]

    trajs = jax.jit(rollouts)(state, keys)
    num_envs = trajs.rewards.shape[2]

    # Env stepping alone: the same env steps with uniformly random actions.
    def random_actions(k):  # [B, *action_shape], uniform over the env's action space
        space = env.action_space
        if isinstance(space, Discrete):
            return jax.random.randint(k, (num_envs,), 0, space.n)
        return jax.random.uniform(k, (num_envs,) + space.shape, minval=space.low, maxval=space.high)

    def env_only(env_state, keys):
        def step(env_state, k):
            return env.step(env_state, random_actions(k)), ()
        # the whole final state: a constant reward (brax's inverted pendulum: 1 every step) would
        # let XLA drop the physics that only the state depends on
        return lax.scan(step, env_state, jax.random.split(hardware.fast_key(keys[0]), reps * T))[0]

    def targets(agent_state, trajs):
        def one(_, traj):
            s = agent.update_obs_statistics(agent_state, traj.obs)
            return (), agent.compute_targets(s, traj).extras["advantages"]
        return lax.scan(one, (), trajs)[1]

    with_targets = jax.jit(lambda s, t: jax.vmap(lambda x: agent.compute_targets(s, x))(t))(state.agent_state, trajs)

    def shuffles(traj_with_targets, keys):
        def one(_, k):
            return (), shuffled_minibatches(traj_with_targets, k, M, agent.sequence_minibatches)
        return lax.scan(one, (), jax.random.split(keys[0], reps * E))[1]

    minibatches = jax.jit(shuffles)(jax.tree.map(lambda x: x[0], with_targets), keys)  # [reps E, M, ...]
    minibatches = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), minibatches)  # [reps E M, ...]

    def loss_grads(agent_state, minibatches):
        grad = jax.grad(lambda p, b, k: agent.loss(agent_state.replace(params=p), b, k)[0])
        def one(_, inputs):
            batch, k = inputs
            return (), grad(agent_state.params, batch, k)
        n = minibatches.rewards.shape[0]
        return lax.scan(one, (), (minibatches, jax.random.split(key, n)))[1]

    grads = jax.jit(loss_grads)(state.agent_state, jax.tree.map(lambda x: x[:1], minibatches))
    grads = jax.tree.map(lambda g: jnp.broadcast_to(g[0], (reps * E * M,) + g.shape[1:]), grads)

    def optimizer_steps(params, opt_state, grads):
        import optax

        def one(carry, g):
            params, opt_state = carry
            updates, opt_state = optimizer.update(g, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), ()
        return lax.scan(one, (params, opt_state), grads)[0][0]

    seconds = {
        "env stepping (random actions)": time_program(env_only, state.env_state, keys),
        "rollout (env + policy forward + sampling)": time_program(rollouts, state, keys),
        "obs statistics + targets (GAE)": time_program(targets, state.agent_state, trajs),
        f"minibatch shuffles ({E} per iteration)": time_program(shuffles, jax.tree.map(lambda x: x[0], with_targets), keys),
        f"loss forward + backward ({E * M} per iteration)": time_program(loss_grads, state.agent_state, minibatches),
        f"optimiser ({E * M} per iteration)": time_program(optimizer_steps, state.agent_state.params, state.opt_state, grads),
        "whole iteration": time_program(iterations, state, keys),
    }
    ms = {k: 1e3 * v / reps for k, v in seconds.items()}
    rollout_ms = ms.pop("rollout (env + policy forward + sampling)")
    env_ms = ms["env stepping (random actions)"]
    rows = [("env stepping (random actions)", env_ms),
            ("policy forward + sampling in the rollout", rollout_ms - env_ms)]
    rows += [(k, v) for k, v in ms.items() if k not in ("env stepping (random actions)", "whole iteration")]
    rows.append(("other (whole - parts)", ms["whole iteration"] - sum(v for _, v in rows)))
    rows.append(("whole iteration", ms["whole iteration"]))
    return rows


def table(rows: list[tuple[str, float]], title: str) -> str:
    whole = rows[-1][1]
    lines = [f"{title}", "", "| part | ms / iteration | share |", "|---|---:|---:|"]
    lines += [f"| {name} | {ms:.3f} | {100 * ms / whole:.0f}% |" for name, ms in rows]
    return "\n".join(lines)


def throughput_config() -> dict:
    from ppo_throughput import framework_config

    return framework_config(seed=0)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="ppo_throughput")
    parser.add_argument("--reps", type=int, default=50, help="iterations per timed program")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="dotted overrides")
    parser.add_argument("--plain", action="store_true", help="evorl.hardware's fast paths off")
    args = parser.parse_args(argv)
    from _common import apply_overrides

    from evorl import hardware

    from evorl.workflows import resolve_workflow_cls

    if args.config == "ppo_throughput":
        cfg = throughput_config()
    else:
        from run import load_config

        cfg = load_config(args.config, {})
    apply_overrides(cfg, args.set)
    with hardware.use_fast_paths(not args.plain):
        workflow = resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=[])
        rows = profile(workflow, args.reps)
    tc = workflow.config.training
    print(table(rows, f"{args.config} {' '.join(args.set)}{' (plain)' if args.plain else ''}: {tc.num_envs} envs x "
                      f"{tc.rollout_length} steps, {tc.num_epochs} x {tc.num_minibatches} minibatches, "
                      f"{args.reps} iterations per program"))


if __name__ == "__main__":
    main()

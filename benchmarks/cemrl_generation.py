"""CEM-RL: one generation is one compiled program, and where its time goes.

Builds a :class:`~evorl.algorithms.cemrl.CEMRLWorkflow` from ``configs/<config>.yaml`` (default
``cemrl_brax_hopper``) with the command line's smaller settings, runs one generation to fill the
replay buffer (``cemrl.learning_starts`` is one generation's transitions and there is no
warm-up, so every later generation learns), then times, each as the median of ``--repeats``
calls after one untimed call, with ``jax.block_until_ready``:

- ``generation``: the executor's compiled chunk run for one generation (``Executor.run(state,
  1)``): sampling, the critic and actor updates, the episodes, the buffer, the CEM update. The
  chunk is compiled ahead of time (``Executor.compile``) while JAX logs compilations
  (``jax.log_compiles``): the script prints the XLA programs compiled then and while the timed
  generations ran (none: one generation is one call of one program);
- ``episodes``: the ``N`` actors' rollouts alone, ``episode_length`` steps each, vmapped over
  the actors (:func:`evorl.rl.rollout.rollout_with_policy_state` with the generation's behaviour
  policy), as their own compiled program;
- ``updates``: the critic and actor updates alone (:func:`evorl.algorithms.cemrl.make_learn` on
  the filled buffer: ``num_updates`` critic steps on ``K = N / 2`` batches, every
  ``policy_delay``-th step an Adam step of each learning actor), as their own compiled program;
- ``other``: generation - episodes - updates (the CEM sampling and update, the buffer's
  insertion, the metrics; negative when XLA overlaps or fuses across the parts).

    python benchmarks/cemrl_generation.py [--config cemrl_brax_hopper] [--env-name hopper] [--backend mjx]
        [--episode-length 1000] [--population 10] [--num-updates 1000] [--batch-size 100]
        [--hidden 400 300] [--buffer-size 100000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

COMPILED = "Finished XLA compilation of "


def generation_config(args) -> dict:
    """``configs/<args.config>.yaml`` with the command line's settings; learning from the second
    generation on (``learning_starts`` = one generation's transitions, no random warm-up)."""
    from _common import load_config

    cfg = load_config(args.config)
    cfg["env"].update(env_name=args.env_name, episode_length=args.episode_length)
    if args.backend is not None:
        cfg["env"]["backend"] = args.backend
    cfg["agent"].update(actor_hidden_layer_sizes=args.hidden, critic_hidden_layer_sizes=args.hidden)
    cfg["cemrl"].update(population_size=args.population, num_elites=args.population // 2,
                        num_updates=args.num_updates, batch_size=args.batch_size, buffer_size=args.buffer_size,
                        learning_starts=args.population * args.episode_length, warmup_steps=0)
    cfg["logging"] = {"recorders": [], "plot": False}
    return cfg


class CompileLog(logging.Handler):
    """The names of the XLA programs compiled while attached to JAX's logger."""

    def __init__(self):
        super().__init__()
        self.programs: list[str] = []

    def emit(self, record):
        message = record.getMessage()
        if message.startswith(COMPILED):
            self.programs.append(message[len(COMPILED):].split(" in ")[0])


def median_seconds(call, repeats: int) -> float:
    """Median wall seconds of ``call()`` (blocked on its result) over ``repeats`` calls, after one
    untimed call."""
    import jax

    jax.block_until_ready(call())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(call())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def make_episodes(workflow, unravel):
    """``episodes(agent_state, population [N, D], key)``: each actor's rollout of
    ``episode_length`` steps, vmapped over the ``N`` actors, as a generation plays them."""
    import jax

    from evorl.rl.continuous_control import ExploringActor
    from evorl.rl.rollout import rollout_with_policy_state

    env, agent = workflow.env, workflow.agent
    behaviour = ExploringActor(agent, jax.numpy.asarray(False))

    def episodes(agent_state, population, key):
        def play(x, k):
            reset_key, rollout_key = jax.random.split(k)
            member = agent_state.replace(params={**agent_state.params, "actor": unravel(x)})
            return rollout_with_policy_state(env, behaviour, member, env.reset(reset_key), None, rollout_key,
                                             env.episode_length)[2:]  # trajectory [T, E, ...], stats
        return jax.vmap(play)(population, jax.random.split(key, population.shape[0]))

    return episodes


def measure(workflow, repeats: int) -> dict:
    """Seconds of the generation, the episodes and the updates (module docstring), the
    compilation and the programs compiled."""
    import jax
    from jax.flatten_util import ravel_pytree

    from evorl.algorithms.cemrl import cem_sample, make_learn

    executor, cfg = workflow.executor, workflow.config.cemrl
    state = workflow.init(jax.random.PRNGKey(0))
    log = CompileLog()
    jax_logger = logging.getLogger("jax")
    jax_logger.addHandler(log)
    jax_logger.propagate = False  # counted here, not printed
    try:
        with jax.log_compiles(True):
            compile_s = executor.compile(state)
            compiled = list(log.programs)
            state, _ = executor.run(state, 1)  # fills the buffer: one generation's transitions
            after_fill = len(log.programs)
            box = {"state": state, "learned": []}

            def generation():  # the state is donated to the call: keep the returned one
                box["state"], metrics = executor.run(box["state"], 1)
                box["learned"].append(float(metrics["learning"]))
                return box["state"]

            generation_s = median_seconds(generation, repeats)
            during_generations = log.programs[after_fill:]
    finally:
        jax_logger.removeHandler(log)
        jax_logger.propagate = True
    state = box["state"]
    assert box["learned"] == [1.0] * (repeats + 1), f"not every timed generation learned: {box['learned']}"
    _, unravel = ravel_pytree(state.agent_state.params["actor"])
    population = cem_sample(state.cem, jax.random.PRNGKey(1), cfg.population_size)  # [N, D]
    episodes = jax.jit(make_episodes(workflow, unravel))
    episodes_s = median_seconds(lambda: episodes(state.agent_state, population, jax.random.PRNGKey(2)), repeats)
    learn = jax.jit(lambda s, p, k: make_learn(workflow.agent, workflow.optimizer, cfg)(s, p, unravel, k))
    updates_s = median_seconds(lambda: learn(state, population, jax.random.PRNGKey(3)), repeats)
    return {"compile_s": compile_s, "compiled": compiled, "during_generations": during_generations,
            "generation": generation_s, "episodes": episodes_s, "updates": updates_s}


def report(args, workflow, result: dict) -> str:
    """The settings, the programs compiled and the table of seconds and fractions."""
    import jax

    env, cfg = workflow.env, workflow.config.cemrl
    hidden = workflow.config.agent.actor_hidden_layer_sizes
    lines = [
        f"CEM-RL generation on {jax.devices()[0].platform}: {workflow.config.env.env_type} {args.env_name} "
        f"(backend {workflow.config.env.backend}), episode_length {env.episode_length}, "
        f"population {cfg.population_size} ({cfg.learners} learning), num_updates {cfg.num_updates}, batch "
        f"{cfg.batch_size}, actor and critic {list(hidden)}, median of {args.repeats} calls",
        f"compiled ahead of time in {result['compile_s']:.1f} s: {len(result['compiled'])} XLA program(s) "
        f"{result['compiled']}; compiled while the timed generations ran: {result['during_generations'] or 'none'}",
        "",
        f"{'part':<12}{'seconds':>10}{'fraction':>10}",
    ]
    whole = result["generation"]
    parts = {"generation": whole, "episodes": result["episodes"], "updates": result["updates"],
             "other": whole - result["episodes"] - result["updates"]}
    lines += [f"{name:<12}{seconds:>10.3f}{seconds / whole:>10.1%}" for name, seconds in parts.items()]
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="cemrl_brax_hopper")
    parser.add_argument("--env-name", default="hopper")
    parser.add_argument("--backend", default=None, help="brax backend (default: the config's)")
    parser.add_argument("--episode-length", type=int, default=1000)
    parser.add_argument("--population", type=int, default=10)
    parser.add_argument("--num-updates", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--hidden", type=int, nargs="+", default=[400, 300])
    parser.add_argument("--buffer-size", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    from _common import build

    workflow = build(generation_config(args), recorders=[])
    print(report(args, workflow, measure(workflow, args.repeats)), flush=True)


if __name__ == "__main__":
    main()

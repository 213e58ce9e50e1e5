"""``evorl-eval RUN_DIR``: evaluation of a run's checkpoint (greedy actions, or sampled ones where
the run evaluated with ``training.eval_deterministic: false`` or ``--actions sampled`` says so),
optionally rendered."""

from __future__ import annotations

import argparse
import sys


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from evorl.app.cli_help import plain

    parser = argparse.ArgumentParser(prog="evorl-eval", description=plain(__doc__))
    parser.add_argument("run_dir", help="a run folder (holds config.yaml and checkpoints/)")
    parser.add_argument("--episodes", type=int, default=100, help="episodes (default: 100)")
    parser.add_argument("--actions", choices=("greedy", "sampled"), default=None,
                        help="the policy's mode (greedy) or actions sampled from it (default: as the run "
                             "evaluated, training.eval_deterministic)")
    parser.add_argument("--checkpoint", type=int, default=None, help="iteration of the checkpoint (default: newest)")
    parser.add_argument("--render", default=None, metavar="PATH",
                        help="also render one greedy episode to PATH (.gif or .mp4; .html for brax envs); "
                             "checked before the evaluation")
    parser.add_argument("--max-frames", type=int, default=500, help="longest rendering, in steps")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    evaluate(parse_args(argv))


def evaluate(args: argparse.Namespace) -> dict[str, float]:
    """Prints (and returns) the evaluation metrics; renders if asked."""
    from evorl.log_noise import quiet_third_party_logs

    quiet_third_party_logs()  # absl's orbax lines, MJX's and brax's (evorl.log_noise)
    workflow, state, iteration = load_checkpoint(args)
    if args.render:  # a missing package or a wrong file type is known now, not after the evaluation
        check_renderable(workflow, args.render)
    check_finite(workflow, state, iteration, args.run_dir)
    metrics = workflow.evaluate(state)
    print_evaluation(workflow, metrics, iteration, args.episodes)
    if args.render:
        from evorl.app.rendering import render_episode

        path = render_episode(workflow, state, args.render, max_steps=args.max_frames)
        print(f"rendering: {path}")
    return metrics


def load_checkpoint(args: argparse.Namespace):
    """``(workflow, state, iteration)`` of the run's checkpoint, evaluated as ``args`` ask; an
    ``--episodes`` below 1, a missing run or checkpoint, or ``--actions`` on a run that evaluates
    greedy actions exits 2."""
    from evorl.app.checkpoint import CheckpointError
    from evorl.app.errors import ArgumentError
    from evorl.app.experiment import load_run
    from evorl.config import ConfigError

    if args.episodes < 1:
        print(f"evorl-eval: --episodes must be >= 1, got {args.episodes}", file=sys.stderr)
        sys.exit(2)
    try:
        overrides = {"eval_episodes": args.episodes}
        if args.actions is not None:
            overrides["eval_deterministic"] = args.actions == "greedy"
        try:
            return load_run(args.run_dir, args.checkpoint, overrides)
        except ConfigError:
            if args.actions is None:
                raise
            workflow, _, _ = load_run(args.run_dir, args.checkpoint, {"eval_episodes": args.episodes})
            raise ArgumentError(f"--actions applies to runs that evaluate a stochastic policy's mode or samples "
                              f"(training.eval_deterministic: PPO, A2C, IMPALA, REINFORCE); {workflow.name()} "
                              f"evaluates its greedy actions: leave --actions out.") from None
    except (CheckpointError, ConfigError) as e:
        print(f"evorl-eval: {e}", file=sys.stderr)
        sys.exit(2)


def check_renderable(workflow, path: str) -> None:
    """Exits 2 where ``path`` cannot be rendered (a missing package, a wrong file type)."""
    from evorl.app.rendering import check_render

    try:
        check_render(workflow.env, path)
    except (ImportError, NotImplementedError, ValueError) as e:
        print(f"evorl-eval: cannot render: {e}", file=sys.stderr)
        sys.exit(2)


def check_finite(workflow, state, iteration: int, run_dir: str) -> None:
    """Exits 2 where an agent's parameters are not finite (its training diverged)."""
    labels = workflow.agent_labels()
    nonfinite = [labels[i] for i, finite in enumerate(workflow.params_finite(state)) if not finite]
    if nonfinite:
        print(f"evorl-eval: checkpoint {iteration} of {run_dir} has non-finite parameters "
              f"({', '.join(nonfinite)}): the training that wrote it diverged; evaluate an earlier "
              f"checkpoint (--checkpoint).", file=sys.stderr)
        sys.exit(2)


def print_evaluation(workflow, metrics: dict, iteration: int, episodes: int) -> None:
    """One line of returns; a population's spread across agents, then each agent's line."""
    labels = workflow.agent_labels()
    actions = "greedy" if workflow.evaluator.deterministic else "sampled-action"
    head = f"{workflow.name()} {workflow.config.env.env_name}, checkpoint {iteration}, {episodes} {actions} episodes"
    if "eval/episode_return/std" in metrics:  # a population: the spread across agents, then each agent's episodes
        print(f"{head} per agent, {len(labels)} agents: mean return {metrics['eval/episode_return']:.2f} +- "
              f"{metrics['eval/episode_return/std']:.2f} across agents (agents' min "
              f"{metrics['eval/episode_return/min']:.2f}, max {metrics['eval/episode_return/max']:.2f})", flush=True)
        for i, label in enumerate(labels):
            print(f"  {label}: " + episode_summary({k: v[i] for k, v in workflow.last_metrics_per_agent.items()}),
                  flush=True)
    else:
        print(f"{head}: {episode_summary(metrics)}", flush=True)


def episode_summary(metrics: dict) -> str:
    """One agent's evaluation: the mean, std, min and max return over its episodes."""
    return (f"return mean {float(metrics['eval/episode_return']):.2f} std {float(metrics['eval/episode_return_std']):.2f} "
            f"min {float(metrics['eval/episode_return_min']):.2f} max {float(metrics['eval/episode_return_max']):.2f}")


if __name__ == "__main__":
    main()

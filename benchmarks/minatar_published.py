"""PPO (A2C, IMPALA) on MinAtar by MinAtar's rules at the published budget, many fresh seeds in
one program.

Each game's shipped config (``configs/<algo>_minatar_<game>.yaml``, ``--algo`` default ``ppo``:
sticky actions 0.1 in training
and evaluation, 10M env steps, 128 greedy evaluation episodes per agent) trains ``--seeds``
agents side by side (``training.num_seeds``) in one process, one game after another (a TPU is
held by one process at a time). Every finished game appends one JSON line to ``--out``:
settings, seeds, machine, wall and compile time, each agent's final greedy return, the
evaluation's standard error and the learning curve (mean, min and max over agents).

``--render FILE`` prints the table: per game the interquartile mean over seeds of the final
greedy return with its 95% bootstrap interval (:mod:`benchmarks.rl_stats`), beside
gymnax-blines' published PPO figure at the same budget (PPO's rows only).

    python benchmarks/minatar_published.py --seeds 8 --first-seed 66001            # a TPU/GPU
    python benchmarks/minatar_published.py --games breakout --seeds 2 --iterations 4  # a smoke run
    python benchmarks/minatar_published.py --algo a2c --seeds 8                       # A2C's configs
    python benchmarks/minatar_published.py --render benchmarks/results/minatar/published.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import children  # noqa: E402
from rl_stats import iqm, iqm_interval  # noqa: E402
from run import COLLAPSE_FRACTION, MARGIN_FRACTION, commit_hash  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GAMES = ("breakout", "asterix", "freeway", "space_invaders", "seaquest")
ALGOS = ("ppo", "a2c", "impala")

#: gymnax-blines' PPO at 10M env steps (the gymnax README's MinAtar table; its evaluation has
#: no sticky actions). Seaquest has no published PPO figure there.
PUBLISHED = {"asterix": 15.0, "breakout": 28.0, "freeway": 58.0, "space_invaders": 131.0}
PUBLISHED_SOURCE = "gymnax-blines PPO, 10M env steps (gymnax README)"


def config_name(algo: str, game: str) -> str:
    return f"{algo}_minatar_{game}"


def algo(row: dict) -> str:
    """The row's algorithm (rows that do not record it ran PPO)."""
    return row.get("algo", "ppo")


def run_game(game: str, args) -> dict:
    """Train one game's config for ``args.seeds`` agents in a child process (killed with its
    group at ``--game-timeout``); what it printed before a timeout is kept."""
    cmd = ([sys.executable, os.path.abspath(__file__), "--child", game, "--algo", args.algo, "--seeds", str(args.seeds),
           "--first-seed", str(args.first_seed), "--iterations", str(args.iterations),
           "--eval-episodes", str(args.eval_episodes)] + ([] if args.sticky is None else ["--sticky", str(args.sticky)])
           + (["--sampled-eval"] if args.sampled_eval else [])
           + ([] if args.value_clip is None else ["--value-clip", str(args.value_clip)])
           + ["--matmul-precision", args.matmul_precision])
    start = time.perf_counter()
    code, stdout, stderr = children.run(cmd, timeout=args.game_timeout or None, cwd=ROOT)
    wall = time.perf_counter() - start
    lines = [json.loads(x) for x in stdout.splitlines() if x.startswith("{")]
    head = next((x for x in lines if "compile_s" in x), {})
    curve = [x for x in lines if "per_agent" in x]
    end = next((x for x in lines if "final_returns" in x), None)
    row = {"game": game, "algo": args.algo, "config": config_name(args.algo, game), "seed": args.first_seed, "agents": args.seeds,
           "wall_s": wall, "git_commit": commit_hash(), "fast_paths": os.environ.get("EVORL_FAST_PATHS", "auto"),
           **head, "curve": curve}
    if code != 0 or end is None:  # a timeout keeps the evaluations it logged
        return {**row, "error": f"did not finish in {args.game_timeout:.0f} s" if code is None else (stderr or stdout)[-2000:]}
    return {**row, **end}


def child(game: str, args) -> None:
    """In the child: train, printing one JSON line at the start, one per periodic evaluation
    (every agent's greedy return) and one at the end (every agent's final greedy return)."""
    import jax
    from omegaconf import OmegaConf

    from evorl.workflows import resolve_workflow_cls
    from suites import CONFIG_DIR, config_target

    name = config_name(args.algo, game)
    cfg = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / f"{name}.yaml"), resolve=True)
    cfg.pop("defaults", None)
    cfg["seed"] = args.first_seed
    cfg["training"]["num_seeds"] = args.seeds
    if args.iterations:
        cfg["training"].update(num_iterations=args.iterations, eval_interval=max(1, args.iterations // 2))
    if args.eval_episodes:
        cfg["training"]["eval_episodes"] = args.eval_episodes
    if args.sticky is not None:
        cfg["env"]["repeat_action_probability"] = args.sticky
    if args.sampled_eval:
        cfg["training"]["eval_deterministic"] = False
    if args.value_clip is not None:
        cfg["agent"]["value_clip_epsilon"] = args.value_clip
    if args.matmul_precision != "default":
        jax.config.update("jax_default_matmul_precision", args.matmul_precision)
    start = time.perf_counter()

    def returns_per_agent(metrics: dict) -> list:
        # one agent is not a population: its metrics are its own (no per-agent copy is kept)
        if not workflow.population:
            return [metrics["eval/episode_return"]]
        return workflow.last_metrics_per_agent["eval/episode_return"]

    class PerAgent:  # a recorder: each periodic evaluation, every agent's return
        def init(self, config):
            pass

        def write(self, metrics, step):
            if "eval/episode_return" in metrics:
                per_agent = returns_per_agent(metrics)
                print(json.dumps({"env_steps": int(step), "wall_s": round(time.perf_counter() - start, 2),
                                  "per_agent": [float(x) for x in per_agent]}), flush=True)

        def close(self):
            pass

    workflow = resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=[PerAgent()])
    state = workflow.init(jax.random.PRNGKey(args.first_seed))
    compile_s = workflow.compile(state)
    target = config_target(CONFIG_DIR / f"{name}.yaml")
    print(json.dumps({"compile_s": compile_s, "env": cfg["env"]["env_name"], "backend": jax.default_backend(),
                      "device": jax.devices()[0].device_kind, "target": target.value if target else None,
                      "eval_episodes": cfg["training"]["eval_episodes"],
                      "repeat_action_probability": cfg["env"]["repeat_action_probability"],
                      "eval_deterministic": cfg["training"].get("eval_deterministic", True),
                      "value_clip_epsilon": cfg["agent"].get("value_clip_epsilon"),
                      "matmul_precision": args.matmul_precision, "observations": OBSERVATIONS,
                      "budget_env_steps": cfg["training"]["num_iterations"] * workflow.env_steps_per_iteration,
                      "config": cfg}), flush=True)
    start = time.perf_counter()
    state = workflow.learn(state)
    final = workflow.evaluate(state)
    std = final.get("eval/episode_return_std")
    print(json.dumps({"final_returns": [float(x) for x in returns_per_agent(final)],
                      "eval_standard_error": None if std is None else std / math.sqrt(cfg["training"]["eval_episodes"]),
                      "train_s": time.perf_counter() - start}), flush=True)


def verdicts(row: dict) -> list[dict]:
    """Per agent, ``benchmarks/run.py``'s rule on raw returns (a random policy scores ~0 on
    MinAtar): the final return reaches the target, is at least 0.9 x the agent's best, and a
    periodic evaluation first reached the target within 70% of the env steps."""
    target, budget = row.get("target"), row.get("budget_env_steps")
    out = []
    for i, final in enumerate(row["final_returns"]):
        seen = [(c["env_steps"], c["per_agent"][i]) for c in row["curve"]]
        first = next((steps for steps, r in seen if target is not None and r >= target), None)
        best = max([final, *(r for _, r in seen)])
        ok = (target is not None and final >= target and final >= COLLAPSE_FRACTION * best
              and first is not None and first <= MARGIN_FRACTION * budget)
        out.append({"final": final, "best": best, "first_reach": None if first is None else first / budget, "passed": ok})
    return out


#: MinAtar's own sticky-action probability, what every shipped MinAtar config trains and
#: evaluates with; a row run with another (``--sticky``) is a control and says so.
STICKY = 0.1


def sticky(row: dict) -> float:
    """The row's sticky-action probability (rows that do not record it ran the config's)."""
    p = row.get("repeat_action_probability")
    return STICKY if p is None else float(p)


def greedy(row: dict) -> bool:
    """Whether the row evaluated the greedy policy (the config's way; rows that do not record it did)."""
    return bool(row.get("eval_deterministic", True))


def value_clip(row: dict) -> float | None:
    """The row's PPO value clipping (None: the config's unclipped value loss)."""
    return row.get("value_clip_epsilon")


def precision(row: dict) -> str:
    """The row's float32 matmul precision (``default``: the backend's own; on a TPU, products of
    bfloat16-rounded inputs summed in float32; rows that do not record it ran the default)."""
    return row.get("matmul_precision", "default")


def own_terms(row: dict) -> bool:
    """Whether the row ran its config as shipped: MinAtar's sticky actions, greedy evaluation,
    the config's value loss, the backend's default matmul precision, on a game computed right
    (not :func:`miscomputed`). Any other row is a control."""
    return sticky(row) == STICKY and greedy(row) and value_clip(row) is None and precision(row) == "default" \
        and not miscomputed(row)


#: How the rows' MinAtar observations were built: evorl draws Breakout's, Freeway's and
#: SpaceInvaders' planes without gymnax's boolean scatters (:mod:`evorl.envs.minatar_obs`).
OBSERVATIONS = "scatter-free"


def miscomputed(row: dict) -> bool:
    """Whether the row's game was miscomputed: Freeway on a TPU with gymnax's boolean-scatter
    observations (rows that do not record ``observations``), which a TPU computes wrongly at a
    population's batch (``benchmarks/backend_agreement.py``: 8 x 128 envs lose set cells). Its
    agents trained and were scored on a wrong game: shown as such, never judged."""
    return row.get("backend") == "tpu" and row["game"] == "freeway" and row.get("observations") != OBSERVATIONS


#: The seed whose runs the MinAtar configs' targets were read from: a run that judges them takes another.
TARGETS_SEED = 66001


def render(path: str) -> str:
    """The markdown table of ``path``: per game, terms, backend and seed, its last finished row (a
    run that set a target and the run on fresh seeds that judged it both show)."""
    rows = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if "final_returns" in r:
                rows[(algo(r), r["game"], sticky(r), greedy(r), value_clip(r) or 0.0, precision(r), miscomputed(r),
                      r.get("backend", ""), r["seed"])] = r
    lines = ["| game | agents | env steps / agent | IQM final greedy return [95% CI] | min - max | eval s.e. | "
             "target: passed (first reach, % of budget) | published PPO | where, wall s (compile s) |",
             "|---|---:|---:|---|---|---:|---|---:|---|"]
    seeds = {r["seed"] for r in rows.values()}
    mixed = len(seeds) > 1
    for key in sorted(rows, key=lambda k: (ALGOS.index(k[0]), GAMES.index(k[1]), k[6], -k[2], not k[3], k[4],
                                           k[5] != "default", k[8] != TARGETS_SEED, k[8], k[7])):
        game, r = key[1], rows[key]
        x = np.asarray(r["final_returns"], dtype=float)
        point, lo, hi = iqm_interval([x])
        pub = PUBLISHED.get(game) if key[0] == "ppo" else None
        steps = r.get("env_steps_per_agent") or r["budget_env_steps"]
        if key[6]:
            verdict = "not judged: the game was miscomputed"
        elif r["curve"] and "per_agent" in r["curve"][0] and r.get("target") is not None:
            v = verdicts(r)
            reach = [x["first_reach"] for x in v if x["first_reach"] is not None]
            verdict = (f">= {r['target']:g}: {sum(x['passed'] for x in v)}/{len(v)}"
                       + (f" ({100 * min(reach):.0f}-{100 * max(reach):.0f}%)" if reach else " (never)"))
        elif not (r["curve"] and "per_agent" in r["curve"][0]):
            verdict = "not judged: evaluations logged as mean, min and max over agents"
        else:
            verdict = "not judged: the config had no target when it ran"
        rules = (("" if key[0] == "ppo" else f" ({key[0].upper()})") + ("" if key[2] == STICKY else f" (sticky actions {key[2]:g})")
                 + ("" if key[3] else " (sampled actions in evaluation)")
                 + (f" (value clipping {key[4]:g})" if key[4] else "")
                 + ("" if key[5] == "default" else f" ({key[5]} matmul precision)")
                 + (" (observations miscomputed: gymnax's boolean scatters on the TPU)" if key[6] else ""))
        seed_cell = f", seed {r['seed']}" if mixed else ""
        lines.append(
            f"| {r['env']}{rules} | {r['agents']} | {steps / 1e6:.1f}M | {point:.1f} [{lo:.1f}, {hi:.1f}] | "
            f"{x.min():.1f} - {x.max():.1f} | {r['eval_standard_error']:.2f} | {verdict} | {pub if pub is not None else '-'} | "
            f"{r['machine']}, {r['wall_s']:.0f} ({r['compile_s']:.0f}){seed_cell} |")
    if rows:
        said = "the seed its row names" if mixed else f"seed {seeds.pop()}"
        lines.append(f"\nEach run's agents' keys are split from {said}, never used for tuning the settings (the "
                     f"MinAtar targets in the configs' headers were read from seed {TARGETS_SEED}'s runs); "
                     f"published: {PUBLISHED_SOURCE}.")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--games", nargs="+", choices=GAMES, default=["breakout", "asterix", "freeway", "space_invaders"])
    p.add_argument("--algo", choices=ALGOS, default="ppo", help="which configs: <algo>_minatar_<game>")
    p.add_argument("--seeds", type=int, default=8, help="agents per game, trained in one program")
    p.add_argument("--first-seed", type=int, default=66001, help="the run's seed: the agents' keys are split from it")
    p.add_argument("--iterations", type=int, default=0, help="override the budget (0: the config's 10M env steps)")
    p.add_argument("--eval-episodes", type=int, default=0, help="override the evaluation episodes (0: the config's)")
    p.add_argument("--sticky", type=float, default=None,
                   help="a control: this sticky-action probability instead of the config's MinAtar 0.1 "
                        "(0: the rules of gymnax-blines' published evaluation)")
    p.add_argument("--sampled-eval", action="store_true",
                   help="a control: evaluate with sampled actions instead of the config's greedy policy "
                        "(gymnax-blines' published evaluation samples from the policy)")
    p.add_argument("--value-clip", type=float, default=None,
                   help="a control (PPO): clip the value loss to this distance from the old values "
                        "(agent.value_clip_epsilon; gymnax-blines clips at its clip_eps, 0.2)")
    p.add_argument("--matmul-precision", choices=["default", "highest"], default="default",
                   help="a control: float32 matmuls at this precision (jax_default_matmul_precision; a TPU's "
                        "default rounds their inputs to bfloat16, a CPU's is float32)")
    p.add_argument("--game-timeout", type=float, default=0,
                   help="stop a game's run after this many seconds, keeping its evaluations so far (0: none)")
    p.add_argument("--budget-s", type=float, default=0, help="start no game after this many seconds (0: no limit)")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "minatar", "published.jsonl"))
    p.add_argument("--machine", default=platform.node(), help="the machine's name in the results")
    p.add_argument("--render", metavar="FILE", help="print the table of FILE and exit")
    p.add_argument("--child", metavar="GAME", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.render:
        print(render(args.render))
        return
    if args.child:
        child(args.child, args)
        return
    if args.seeds < 1:
        p.error(f"--seeds must be >= 1, got {args.seeds}")
    if args.value_clip is not None and (args.algo != "ppo" or not args.value_clip > 0):
        p.error(f"--value-clip is PPO's and must be > 0, got {args.value_clip} with --algo {args.algo}")
    if args.sticky is not None and not 0.0 <= args.sticky < 1.0:
        p.error(f"--sticky is a probability in [0, 1), got {args.sticky}")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    start = time.perf_counter()
    for game in args.games:
        if args.budget_s and time.perf_counter() - start > args.budget_s:
            print(f"{game}: not started (past --budget-s {args.budget_s:.0f})", flush=True)
            continue
        row = run_game(game, args)
        row.update(machine=args.machine, load=os.getloadavg(), cpus=os.cpu_count(),
                   time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")
        if "error" in row:
            last = row["curve"][-1] if row["curve"] else None
            print(f"{game}: FAILED after {row['wall_s']:.0f} s: {row['error'][-500:]}"
                  + (f" (last evaluation at {last['env_steps']:,} env steps: {last['per_agent']})" if last else ""), flush=True)
        else:
            x = np.asarray(row["final_returns"])
            print(f"{game}: IQM {iqm(x):.1f} over {len(x)} seeds (min {x.min():.1f}, max {x.max():.1f}); "
                  f"s.e. {row['eval_standard_error']:.2f}; {row['wall_s']:.0f} s, compile {row['compile_s']:.0f} s", flush=True)
    if os.path.exists(args.out):
        print(render(args.out))


if __name__ == "__main__":
    main()

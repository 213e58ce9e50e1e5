"""PPO throughput on one accelerator as the population grows, evorl beside PureJaxRL.

Each row trains PPO on gymnax CartPole-v1 with PureJaxRL's settings (4 envs x 128 steps per
seed, 4 epochs x 4 minibatches, [64, 64] tanh actor and critic, Adam 2.5e-4 annealed, GAE
0.99/0.95) for ``S`` seeds in one compiled program, and reports the aggregate env steps/s
(every seed's steps, timed after compilation and a warm-up) and the compile seconds:

* ``evorl``: ``PPOWorkflow`` with ``training.num_seeds = S`` ;
* ``purejaxrl``: PureJaxRL's own ``purejaxrl/ppo.py``, unchanged, from the folder given by
  ``--purejaxrl`` (a checkout of luchris429/purejaxrl, or a folder with its ``ppo.py`` and
  ``wrappers.py``), run as its README runs many seeds: ``jax.jit(jax.vmap(make_train(config)))``.
  Its wrappers expect gymnax's five-value ``step`` (gymnax 0.0.9; gymnax 1.0 adds
  ``truncated``): ``pip install --no-deps --target FOLDER/site gymnax==0.0.9`` puts it first on
  its path. Imports it makes but CartPole never uses (distrax, brax, navix) fall back to
  ``benchmarks/peers/purejaxrl_imports`` when not installed.

Rows are ``SIDE:S[:ENVS[:ITERATIONS[:PATHS]]]``, e.g. ``evorl:1024`` or ``purejaxrl:1024:4:20``;
``PATHS`` (evorl only) is ``auto`` (:mod:`evorl.hardware`'s choice for the backend) or ``plain``
(every fast path off: what the code did before the backend-specific paths).
Every row of a side runs in one child process (a TPU can be held by one process at a time,
and each process that opens it pays ~15 s), the sides one after the other; this process
never imports JAX. ``--profile SIDE:S`` traces one compiled call with ``jax.profiler`` and
prints where the device time goes (by XLA op, and by the source file that emitted it).
Results go to ``--out`` as JSON lines, each as soon as it is measured::

    python benchmarks/tpu_scale.py --purejaxrl ~/purejaxrl --out tpu.jsonl \
        --rows evorl:1 evorl:1024 purejaxrl:1 purejaxrl:1024 --profile evorl:1024
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHIMS = HERE / "peers" / "purejaxrl_imports"
sys.path.insert(0, str(HERE))
import children  # noqa: E402

#: PureJaxRL's CartPole settings (its ppo.py's ``__main__``), the same on both sides.
PPO = {"lr": 2.5e-4, "envs": 4, "steps": 128, "epochs": 4, "minibatches": 4, "gamma": 0.99, "gae_lambda": 0.95,
       "clip": 0.2, "ent": 0.01, "vf": 0.5, "max_grad_norm": 0.5, "activation": "tanh", "hidden": 64}


def default_iterations(seeds: int, envs: int) -> int:
    """Enough iterations for a few seconds of timed work at ~3-30M env steps/s."""
    per_iteration = seeds * envs * PPO["steps"]
    return int(min(200, max(4, 2e7 // per_iteration)))


def parse_row(text: str) -> dict:
    side, *rest = text.split(":")
    if side not in ("evorl", "purejaxrl"):
        raise SystemExit(f"row {text!r}: the side must be evorl or purejaxrl")
    seeds = int(rest[0])
    envs = int(rest[1]) if len(rest) > 1 and rest[1] else PPO["envs"]
    iterations = int(rest[2]) if len(rest) > 2 and rest[2] else default_iterations(seeds, envs)
    paths = rest[3] if len(rest) > 3 else "auto"
    if paths not in ("auto", "plain"):
        raise SystemExit(f"row {text!r}: PATHS must be auto or plain")
    return {"side": side, "seeds": seeds, "envs": envs, "iterations": iterations, "paths": paths}


# --- evorl ---------------------------------------------------------------------------------
def evorl_config(seeds: int, envs: int, iterations: int) -> dict:
    cfg = {
        "workflow_cls": "evorl.workflows.PPOWorkflow",
        "env": {"env_name": "CartPole-v1", "env_type": "gymnax"},
        "agent": {"actor_hidden_layer_sizes": [PPO["hidden"]] * 2, "critic_hidden_layer_sizes": [PPO["hidden"]] * 2,
                  "activation": PPO["activation"], "clip_epsilon": PPO["clip"], "vf_coef": PPO["vf"],
                  "ent_coef": PPO["ent"], "normalize_obs": False, "normalize_gae": True},
        "training": {"rollout_length": PPO["steps"], "num_epochs": PPO["epochs"],
                     "num_minibatches": PPO["minibatches"], "learning_rate": PPO["lr"], "anneal_lr": True,
                     "max_grad_norm": PPO["max_grad_norm"], "gamma": PPO["gamma"], "gae_lambda": PPO["gae_lambda"],
                     "num_envs": envs, "num_seeds": seeds, "num_iterations": iterations + 1,
                     "eval_interval": iterations + 1, "eval_episodes": 1},
    }
    return cfg


def build_evorl(row: dict):
    import jax

    from evorl import hardware
    from evorl.workflows import PPOWorkflow

    cfg = evorl_config(row["seeds"], row["envs"], row["iterations"])
    with hardware.use_fast_paths(False if row["paths"] == "plain" else None):  # programs take it when traced
        workflow = PPOWorkflow.build_from_config(cfg, recorders=[])
        state = workflow.init(jax.random.PRNGKey(0))
        compile_s = workflow.executor.compile(state)
        state, _ = workflow.run_iterations(state, 1)  # warm-up, not timed
    jax.block_until_ready(state)
    return workflow, state, compile_s, {p: hardware.is_fast(p) for p in hardware.FAST_ON}


def run_evorl(row: dict) -> dict:
    import jax
    import numpy as np

    workflow, state, compile_s, fast = build_evorl(row)
    start = time.perf_counter()
    state, metrics = workflow.run_iterations(state, row["iterations"])
    jax.block_until_ready(state)
    run_s = time.perf_counter() - start
    steps = row["seeds"] * row["iterations"] * row["envs"] * PPO["steps"]
    ret = np.asarray(metrics.get("train/episode_return", np.nan), np.float64)
    return {"compile_s": compile_s, "run_s": run_s, "env_steps": steps, "steps_per_s": steps / run_s,
            "train_return": float(np.nanmean(ret)), "fast_paths": [p for p, on in fast.items() if on]}


# --- PureJaxRL -----------------------------------------------------------------------------
def purejaxrl_module(folder: str):
    import importlib.util

    src = Path(folder).expanduser()
    src = src / "purejaxrl" if (src / "purejaxrl" / "ppo.py").exists() else src
    sys.path.insert(0, str(src))  # its ppo.py imports `wrappers` from beside it
    if (Path(folder).expanduser() / "site").is_dir():  # its own dependencies first (gymnax 0.0.9)
        sys.path.insert(0, str(Path(folder).expanduser() / "site"))
    sys.path.append(str(SHIMS))  # last: installed packages win
    spec = importlib.util.spec_from_file_location("purejaxrl_ppo", src / "ppo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def purejaxrl_config(row: dict) -> dict:
    return {"LR": PPO["lr"], "NUM_ENVS": row["envs"], "NUM_STEPS": PPO["steps"],
            "TOTAL_TIMESTEPS": row["iterations"] * row["envs"] * PPO["steps"], "UPDATE_EPOCHS": PPO["epochs"],
            "NUM_MINIBATCHES": PPO["minibatches"], "GAMMA": PPO["gamma"], "GAE_LAMBDA": PPO["gae_lambda"],
            "CLIP_EPS": PPO["clip"], "ENT_COEF": PPO["ent"], "VF_COEF": PPO["vf"],
            "MAX_GRAD_NORM": PPO["max_grad_norm"], "ACTIVATION": PPO["activation"], "ENV_NAME": "CartPole-v1",
            "ANNEAL_LR": True, "DEBUG": False}


def run_purejaxrl(row: dict, folder: str) -> dict:
    import jax
    import numpy as np

    module = purejaxrl_module(folder)
    train = module.make_train(purejaxrl_config(row))
    keys = jax.random.split(jax.random.PRNGKey(0), row["seeds"])
    start = time.perf_counter()
    compiled = jax.jit(jax.vmap(train)).lower(keys).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    out = jax.block_until_ready(compiled(keys))
    run_s = time.perf_counter() - start
    steps = row["seeds"] * row["iterations"] * row["envs"] * PPO["steps"]
    info = out["metrics"]
    done = np.asarray(info["returned_episode"])[:, -1]  # the last update's episodes
    ret = np.asarray(info["returned_episode_returns"])[:, -1]
    return {"compile_s": compile_s, "run_s": run_s, "env_steps": steps, "steps_per_s": steps / run_s,
            "train_return": float(ret[done].mean()) if done.any() else float("nan")}


# --- the profile ---------------------------------------------------------------------------
def profile_evorl(row: dict, out_dir: str, top: int = 25) -> dict:
    """Traces one compiled call of ``row['iterations']`` iterations and sums the device time
    per XLA op; each op is named with the source line (and the JAX op name) that emitted it,
    read from the compiled program's metadata."""
    import glob
    import re

    import jax
    from jax.profiler import ProfileData

    workflow, state, _, _ = build_evorl(row)
    trace_dir = os.path.join(out_dir, "trace")
    jax.profiler.start_trace(trace_dir)
    start = time.perf_counter()
    state, _ = workflow.run_iterations(state, row["iterations"])
    jax.block_until_ready(state)
    wall = time.perf_counter() - start
    jax.profiler.stop_trace()
    hlo = workflow.executor._chunks["step"].as_text()
    where = {}
    for line in hlo.splitlines():
        m = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = (\S+) .*?metadata=\{([^}]*)\}", line)
        if m:
            meta = dict(re.findall(r'(\w+)="?([^"\s]*)"?', m.group(3)))
            where[m.group(1)] = (m.group(2), meta.get("op_name", ""), f"{meta.get('source_file', '?')}:{meta.get('source_line', '?')}")
    per_op, per_file, total = {}, {}, 0.0
    for path in glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True):
        for plane in ProfileData.from_file(path).planes:
            if not plane.name.startswith("/device:"):
                continue
            for line in plane.lines:
                if line.name != "XLA Ops":
                    continue
                for ev in line.events:
                    name, _, text = ev.name.partition(" = ")
                    name = name.strip().lstrip("%")
                    if re.search(r" (while|conditional|call)\(", text):  # containers: their ops are counted
                        continue
                    total += ev.duration_ns
                    per_op[name] = per_op.get(name, 0.0) + ev.duration_ns
                    src = where.get(name, ("", "", "?"))[2]
                    key = "/".join(src.split("/")[-2:]).split(":")[0]
                    per_file[key] = per_file.get(key, 0.0) + ev.duration_ns
    rows = sorted(per_op.items(), key=lambda kv: -kv[1])[:top]
    report = {
        "wall_s": wall, "device_op_s": total / 1e9, "iterations": row["iterations"],
        "ops": [{"op": name, "share": ns / max(total, 1), "ms_per_iteration": ns / 1e6 / row["iterations"],
                 "shape": where.get(name, ("", "", ""))[0], "op_name": where.get(name, ("", "", ""))[1][-90:],
                 "source": where.get(name, ("", "", ""))[2]} for name, ns in rows],
        "files": {k: v / max(total, 1) for k, v in sorted(per_file.items(), key=lambda kv: -kv[1])},
    }
    with open(os.path.join(out_dir, "hlo.txt"), "w") as f:
        f.write(hlo)
    return report


# --- the docs table, from the data -----------------------------------------------------------
#: Columns of the rendered table: (title, which evorl records fill it).
COLUMNS = (
    ("evorl", lambda r: r.get("paths") == "auto" and r["code"].startswith("gather path, every column")),
    ("evorl, first gather path (same run as PureJaxRL)", lambda r: r.get("paths") == "auto"
     and r["code"].startswith("gather path, one")),
    ("evorl with XLA's gathers", lambda r: r.get("paths") == "plain" or r["code"].startswith("before")),
)


def render_table(path: str) -> str:
    """The Markdown table of ``--render FILE``: per population shape, evorl's env steps/s on
    each code path and PureJaxRL's, the last record of each; then each profile's top ops."""
    records = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    rows = [r for r in records if r.get("side") in ("evorl", "purejaxrl") and "steps_per_s" in r]
    shapes = sorted({(r["seeds"], r["envs"]) for r in rows}, key=lambda s: (s[1], s[0]))

    def last(side, keep, shape):
        found = [r for r in rows if r["side"] == side and (r["seeds"], r["envs"]) == shape and keep(r)]
        return found[-1] if found else None

    def cell(r):
        return f"{r['steps_per_s'] / 1e6:.2f}M ({r['compile_s']:.0f} s)" if r else "-"

    lines = ["| seeds x envs per seed | " + " | ".join(title for title, _ in COLUMNS)
             + " | PureJaxRL | evorl / PureJaxRL |", "|---" + "|---:" * (len(COLUMNS) + 2) + "|"]
    for shape in shapes:
        ours = [last("evorl", keep, shape) for _, keep in COLUMNS]
        peer = last("purejaxrl", lambda r: True, shape)
        best = ours[0] or ours[1]
        ratio = f"x{best['steps_per_s'] / peer['steps_per_s']:.2f}" if best and peer else "-"
        lines.append(f"| {shape[0]} x {shape[1]} | " + " | ".join(cell(r) for r in ours) + f" | {cell(peer)} | {ratio} |")
    lines += ["", "Env steps/s of every seed together (compile seconds in brackets). The profiles, by the "
              "share of the device time of one iteration:", ""]
    for r in (r for r in records if "profile" in r):
        top = ", ".join(f"{o['op']} {o['share']:.0%}" for o in r["ops"][:3])
        kinds = {kind: sum(o["share"] for o in r["ops"] if o["op"].startswith(kind)) for kind in ("gather", "sort")}
        lines.append(f"- {r['code']}, {r['profile']['seeds']} seeds: {r['device_op_s'] / r['iterations'] * 1e3:.0f} ms "
                     f"of device time per iteration; gathers {kinds['gather']:.0%}, sorts {kinds['sort']:.0%}; "
                     f"top ops {top}")
    return "\n".join(lines) + "\n"


# --- processes -----------------------------------------------------------------------------
def child(args) -> None:
    """One side's rows (and profile) in this process, a JSON line each as it is measured."""
    import jax

    print(json.dumps({"header": True, "pid": os.getpid(), "backend": jax.default_backend(), "device": jax.devices()[0].device_kind,
                      "jax": jax.__version__}), flush=True)
    if args.profile:  # first: the rows after it may run out of time
        row = parse_row(args.profile)
        print(json.dumps({"profile": row, **profile_evorl(row, args.profile_dir)}), flush=True)
    for text in args.rows:
        row = parse_row(text)
        try:
            result = run_evorl(row) if row["side"] == "evorl" else run_purejaxrl(row, args.purejaxrl)
        except Exception as e:  # noqa: BLE001 - a row that fails (memory, ...) is a result too
            result = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
        print(json.dumps({**row, **result}), flush=True)



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", nargs="*", default=[])
    parser.add_argument("--purejaxrl", help="PureJaxRL's checkout (or the folder of its ppo.py)")
    parser.add_argument("--profile", help="SIDE:S[:ENVS[:ITERATIONS]] to trace (evorl only)")
    parser.add_argument("--profile-dir", default="/tmp/evorl_profile")
    parser.add_argument("--out", default="tpu_scale.jsonl")
    parser.add_argument("--timeout", type=float, default=540, help="seconds per side's process")
    parser.add_argument("--render", metavar="FILE", help="print the docs table of FILE's records and exit")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.render:
        print(render_table(args.render), end="")
        return
    if args.child:
        child(args)
        return
    rows = [parse_row(r) for r in args.rows]
    if any(r["side"] == "purejaxrl" for r in rows) and not args.purejaxrl:
        raise SystemExit("purejaxrl rows need --purejaxrl PATH (a checkout of luchris429/purejaxrl)")
    header = {"machine": platform.node(), "cpus": os.cpu_count(), "load": os.getloadavg()[0],
              "date": time.strftime("%Y-%m-%d %H:%M:%S"), "settings": PPO}
    results = []
    with open(args.out, "a") as out:
        out.write(json.dumps(header) + "\n")
        for side in ("evorl", "purejaxrl"):
            side_rows = [r for r in args.rows if r.startswith(side + ":")]
            profile = args.profile if args.profile and args.profile.startswith(side + ":") else None
            if not side_rows and not profile:
                continue
            cmd = [sys.executable, __file__, "--child", "--rows", *side_rows, "--profile-dir", args.profile_dir]
            cmd += (["--purejaxrl", args.purejaxrl] if args.purejaxrl else []) + (["--profile", profile] if profile else [])
            proc = children.popen(cmd, stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))})  # dies with this process
            timer = threading.Timer(args.timeout, children.kill, (proc,))  # a row can hang in compile: the side stops
            timer.start()
            for line in proc.stdout:
                if line.startswith("{"):
                    record = json.loads(line)
                    out.write(json.dumps(record) + "\n")
                    out.flush()
                    results.append(record)
                    print(describe(record), flush=True)
            proc.wait()
            children.finish(proc)
            if not timer.is_alive():
                print(f"{side}: stopped at {args.timeout:.0f} s", flush=True)
            timer.cancel()
    print_table(results)


def describe(r: dict) -> str:
    if r.get("header"):
        return f"# {r['backend']} {r['device']} jax {r['jax']}"
    if "profile" in r:
        lines = [f"profile {r['profile']}: wall {r['wall_s']:.2f} s, device ops {r['device_op_s']:.2f} s"]
        lines += [f"  {k:40s} {v:6.1%}" for k, v in list(r["files"].items())[:12]]
        lines += [f"  {o['share']:6.1%} {o['ms_per_iteration']:8.3f} ms/it  {o['op']:28s} {o['shape'][:40]:40s} "
                  f"{o['source']}  {o['op_name']}" for o in r["ops"]]
        return "\n".join(lines)
    if "error" in r:
        return f"{r['side']:9s} S={r['seeds']:<6d} B={r['envs']:<4d} FAILED {r['error']}"
    return (f"{r['side']:9s} S={r['seeds']:<6d} B={r['envs']:<4d} {r.get('paths', ''):6s} {r['steps_per_s']:>14,.0f} env steps/s"
            f"  compile {r['compile_s']:5.1f} s  run {r['run_s']:6.2f} s  return {r['train_return']:.1f}")


def print_table(results: list[dict]) -> None:
    rows = [r for r in results if "side" in r and "error" not in r]
    print("\n| seeds | envs/seed | paths | evorl env steps/s | PureJaxRL env steps/s | ratio | compile s (evorl / PureJaxRL) |")
    print("|---:|---:|---|---:|---:|---:|---:|")
    for r in rows:
        if r["side"] != "evorl":
            continue
        peer = next((p for p in rows if p["side"] == "purejaxrl" and p["seeds"] == r["seeds"] and p["envs"] == r["envs"]), None)
        ratio = f"x{r['steps_per_s'] / peer['steps_per_s']:.2f}" if peer else "-"
        peer_speed = f"{peer['steps_per_s']:,.0f}" if peer else "-"
        peer_compile = f"{peer['compile_s']:.1f}" if peer else "-"
        print(f"| {r['seeds']} | {r['envs']} | {r['paths']} | {r['steps_per_s']:,.0f} | {peer_speed} | {ratio} | "
              f"{r['compile_s']:.1f} / {peer_compile} |")


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# One GPU session's checks in one command, for a machine lent for minutes:
# every part runs with its own time limit and writes as it goes, so a cut-short run keeps what
# it measured. Parts, side by side on one GPU (their figures say so):
#   sac, td3   SAC and TD3 on brax hopper (mjx), configs/{sac,td3}_brax_hopper.yaml with
#              5 seeds in one program (training.num_seeds=5, seed 2026: not a tuning seed) in
#              the GPU shape 32 envs x 1 step with 32 gradient steps per iteration (the
#              configs' one gradient step per env step), 1M env steps, evaluated every 50k
#   check      benchmarks/device_check.sh: PPO CartPole with 1 and 1024 seeds, MinAtar CNN,
#              brax ant; evorl's plain and fast paths against the single-function reference
#   atari      benchmarks/host_env_fraction.py breakout_gymnasium: IMPALA on ALE/Breakout-v5
#              (gymnasium + ale-py) with 8 actor threads x 64 envs; training frames/s against
#              the env alone's
#   atari_processes  the same with runner.actor_processes=true: 8 actor processes (ALE's step
#              holds the GIL, so 8 threads step no faster than one: benchmarks/ale_threads.py)
#   atari_envpool  benchmarks/host_env_fraction.py breakout_envpool in impala_atari_breakout_gpu's
#              shape (4 actor threads x 64 envs): training frames/s against envpool's alone.
#              Not in the default parts: envpool needs its own carry, .whl-envpool/ (see below)
#
#   OUT=/some/folder benchmarks/gpu_session.sh [SECONDS]    # SECONDS: whole budget, default 480
#   PARTS="sac td3" benchmarks/gpu_session.sh 540             # some parts only (default: all five)
#
# Wheels for what the machine lacks sit in .whl/ and .whl-envpool/ (python benchmarks/gpu_wheels.py
# base|envpool; each under the 64 MiB a call carries, so one per call), installed into /tmp/site:
#   PARTS=atari_envpool OUT=$OUT benchmarks/gpu_session.sh 420    # with carry [".whl-envpool"]
set -u
cd "$(dirname "$0")/.."
budget="${1:-480}"
out="${OUT:-benchmarks/results/gpu_session}"
mkdir -p "$out" /tmp/runs
start=$(date +%s)
left() { echo $(( budget - ($(date +%s) - start) )); }
if compgen -G ".whl*/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl*/*.whl \
    2>&1 | grep -v -i warning | tail -3
  export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MUJOCO_GL=egl
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.2  # four programs share the GPU
{
  date -u; uptime; nproc
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
  python3 -c "
import importlib, sys, jax
print(sys.version.split()[0], jax.devices())
for m in ('jax', 'flax', 'optax', 'brax', 'mujoco', 'gymnasium', 'ale_py', 'envpool'):
    try:
        print(m, importlib.import_module(m).__version__)
    except Exception as e:
        print(m, 'not importable:', type(e).__name__)
" 2>&1 | tail -12
} > "$out/env.log" 2>&1
cat "$out/env.log"

offpolicy() {  # name config
  rm -rf "/tmp/runs/$1"
  timeout -k 5 "$(( $(left) - 10 ))" python3 scripts/train.py --config-name "$2" seed=2026 training.num_seeds=5 \
    training.num_envs=32 training.rollout_length=1 training.num_updates=32 training.num_iterations=31250 \
    training.eval_interval=1563 training.eval_episodes=10 logging.plot=false hydra.run.dir="/tmp/runs/$1" \
    > "$out/$1.log" 2>&1
  echo "$1 exit $? after $(( $(date +%s) - start )) s" >> "$out/$1.log"
}
parts=" ${PARTS:-sac td3 check atari atari_processes} "
has() { [[ "$parts" == *" $1 "* ]]; }
sac="" td3=""
if has sac; then offpolicy sac sac_brax_hopper & sac=$!; fi
if has td3; then offpolicy td3 td3_brax_hopper & td3=$!; fi
runs=$(for r in sac td3; do has $r && echo $r; done)
( while sleep 15; do for r in $runs; do cp -f /tmp/runs/$r/metrics.jsonl "$out/${r}_metrics.jsonl" 2>/dev/null; done; done ) &
copier=$!

if has check; then
  reserve=10  # seconds left for what follows
  if has atari; then reserve=150; fi
  if has atari_processes; then reserve=$(( reserve + 150 )); fi
  if has atari_envpool; then reserve=$(( reserve + 150 )); fi
  OUT="$out" DEVICE_CHECK_TIMEOUT=$(( $(left) - reserve )) benchmarks/device_check.sh --timeout 110 --cases cartpole-seeds ant minatar-cnn cartpole > "$out/device_check.log" 2>&1
  echo "device check exit $? after $(( $(date +%s) - start )) s" >> "$out/device_check.log"
fi
atari() {  # name processes
  timeout -k 5 "$(( $(left) - 10 ))" python3 benchmarks/host_env_fraction.py --cases breakout_gymnasium --iterations 20 \
    --seconds 5 --rounds 1 --set runner.num_actors=8 training.num_envs=64 runner.actor_processes="$2" \
    > "$out/$1.log" 2>&1
  echo "$1 exit $? after $(( $(date +%s) - start )) s" >> "$out/$1.log"
}
if has atari; then atari atari false; fi
if has atari_processes; then atari atari_processes true; fi
if has atari_envpool; then
  timeout -k 5 "$(( $(left) - 10 ))" python3 benchmarks/host_env_fraction.py --cases breakout_envpool --iterations 20 \
    --seconds 5 --rounds 1 --set runner.num_actors=4 training.num_envs=256 > "$out/atari_envpool.log" 2>&1
  echo "atari_envpool exit $? after $(( $(date +%s) - start )) s" >> "$out/atari_envpool.log"
fi

[ -n "$sac$td3" ] && wait $sac $td3
kill "$copier" 2>/dev/null
for r in $runs; do cp -f /tmp/runs/$r/metrics.jsonl "$out/${r}_metrics.jsonl" 2>/dev/null; done
for f in "$out"/*.log; do echo "== $f"; grep -v "^Using JAX\|UserWarning\|warnings.warn" "$f" | tail -25; done

#!/usr/bin/env bash
# One TPU call's checks in one command, for a chip lent for minutes (one process at a time may
# hold it, so the parts run one after another). Each part has its own time limit and writes as
# it goes, so a cut-short call keeps what it measured. Parts:
#   minatar_<game>  benchmarks/minatar_published.py: PPO, MinAtar's rules, 10M env steps, 8 agents
#                   of seed $FIRST_SEED (default 66001, the seed the MinAtar targets were read from;
#                   a run that judges them takes another) in one program (game: breakout asterix
#                   freeway space_invaders seaquest); a2c_minatar_<game>, impala_minatar_<game>: the
#                   same with A2C's, IMPALA's configs
#   check           benchmarks/device_check.sh --cases $CHECK_CASES (default: minatar-cnn ant; the
#                   CartPole cases ran), $CHECK_TIMEOUT s per process (default 200)
#   ant_phases      benchmarks/brax_phases.py: ppo_brax_ant's build, compile and step, phase by phase
#   ant_4096        the same at Brax's own 4096 envs (its published ant figure's)
#   populations     benchmarks/config_speed.py: ES (CartPole, brax hopper) and PBT populations
#   scale           benchmarks/tpu_scale.py: 16384 seeds, and the shipped path at 256 and 4096
#   heldout_<config> benchmarks/run.py configs --only <config>: the held-out seeds 100-104 of a
#                   config too slow for the 2-core CPU (its data: $OUT/configs.jsonl, to be appended
#                   to benchmarks/results/configs.jsonl)
#   minatar_freeway_sticky0  the Freeway control: as minatar_freeway without sticky actions
#   agreement       benchmarks/backend_agreement.py against the CPU's figures: the MinAtar games
#                   bit for bit, and ppo_minatar_freeway's first iterations at both precisions
#   agreement_freeway  the same, Freeway only: its observations at [8, 128] as gymnax and as evorl draw
#                   them (a minute, where agreement takes six)
#   minatar_<game>_f32  a control: as minatar_<game> with float32 matmuls (the chip's default
#                   rounds their inputs to bfloat16; one agent on the CPU, float32, reached 58
#                   on Freeway where the chip's 8 agents stopped at 51-53)
#   blines_<game>   PPO by the terms of gymnax-blines' published figure: no sticky actions, an
#                   evaluation that samples from the policy (its batch_evaluate) and the value loss
#                   clipped at 0.2 (its clip_eps), 8 agents of seed 66001
#   minatar_paths   benchmarks/config_speed.py: ppo_minatar_asterix, 8 agents x 30 iterations, with the
#                   backend's own paths (auto: narrow leaves sorted, the 400-column observation
#                   gathered by rows) and with none (EVORL_FAST_PATHS=none: every gather XLA's)
#
#   PARTS="minatar_asterix ant_phases" OUT=$OUT benchmarks/tpu_session.sh 560
#
# Wheels the chip's machine lacks: .whl-tpu/ (evorl's dependencies, evosax and dotmap for ES;
# benchmarks/tpu_wheels.sh downloads them) and, for the brax parts, .whl-brax/ (brax, MJX and
# their dependencies), carried with the call and installed into /tmp/site (see docs/tpu.md).
set -u
cd "$(dirname "$0")/.."
budget="${1:-560}"
out="${OUT:-benchmarks/results/tpu_session}"
mkdir -p "$out"
start=$(date +%s)
left() { echo $(( budget - ($(date +%s) - start) )); }
if [ -d /opt/pypi/simple ]; then  # the chip's machine's own index: what evorl's plots and checkpoints need
  PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --only-binary=:all: --index-url file:///opt/pypi/simple \
    --target /tmp/site0 matplotlib pandas tensorstore msgpack pyyaml pillow protobuf psutil >/dev/null 2>&1
  export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}/tmp/site0"
fi
if compgen -G ".whl*/*.whl" >/dev/null; then
  PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/site .whl*/*.whl >/dev/null 2>&1
  export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}/tmp/site"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
parts=" ${PARTS:-minatar_asterix} "
has() { [[ "$parts" == *" $1 "* ]]; }
limit() { local l=$(( $(left) - ${1:-5} )); (( l > 0 )) && echo "$l" || echo 1; }
cap() { local l; l=$(limit); (( l < $1 )) && echo "$l" || echo "$1"; }  # a part's own ceiling
for game in breakout asterix freeway space_invaders seaquest; do
  for algo in ppo a2c impala; do
    part="${algo}_minatar_$game"; [[ $algo == ppo ]] && part="minatar_$game"
    if has "$part"; then
      timeout -k 5 "$(limit)" python3 benchmarks/minatar_published.py --algo "$algo" --games "$game" --seeds 8 \
        --first-seed "${FIRST_SEED:-66001}" --game-timeout "$(limit 15)" --machine "tpu-v5e (1 chip)" --out "$out/minatar_published.jsonl"
    fi
  done
done
for part in $parts; do
  if [[ "$part" == heldout_* ]]; then
    timeout -k 5 "$(limit)" python3 benchmarks/run.py configs --only "${part#heldout_}" --data "$out/configs.jsonl" \
      --out "$out/heldout_${part#heldout_}"
  fi
done
if has minatar_freeway_sticky0; then
  timeout -k 5 "$(limit)" python3 benchmarks/minatar_published.py --games freeway --sticky 0 --seeds "${AGENTS:-8}" \
    --first-seed "${FIRST_SEED:-66001}" \
    --game-timeout "$(limit 15)" --machine "tpu-v5e (1 chip)" --out "$out/minatar_published.jsonl"
fi
if has agreement; then
  timeout -k 5 "$(cap 480)" python3 benchmarks/backend_agreement.py --against benchmarks/results/tpu/agreement_cpu.json \
    --out "$out/agreement_tpu.json"
fi
if has agreement_freeway; then
  timeout -k 5 "$(cap 120)" python3 benchmarks/backend_agreement.py --against benchmarks/results/tpu/agreement_cpu.json \
    --sections games_population_shape games_population_shape_evorl --games Freeway-MinAtar \
    --out "$out/agreement_freeway_tpu.json"
fi
for game in breakout asterix freeway space_invaders seaquest; do
  if has "minatar_${game}_f32"; then
    timeout -k 5 "$(limit)" python3 benchmarks/minatar_published.py --games "$game" --matmul-precision highest --seeds 8 \
      --first-seed 66001 --game-timeout "$(limit 15)" --machine "tpu-v5e (1 chip)" --out "$out/minatar_published.jsonl"
  fi
done
for game in breakout asterix freeway space_invaders; do
  if has "blines_$game"; then
    timeout -k 5 "$(limit)" python3 benchmarks/minatar_published.py --games "$game" --sticky 0 --sampled-eval --value-clip 0.2 --seeds 8 \
      --first-seed 66001 --game-timeout "$(limit 15)" --machine "tpu-v5e (1 chip)" --out "$out/minatar_published.jsonl"
  fi
done
if has ant_phases; then
  timeout -k 5 "$(cap 120)" python3 benchmarks/brax_phases.py --config ppo_brax_ant --out "$out/brax_phases.jsonl"
fi
if has ant_4096; then
  timeout -k 5 "$(cap 300)" python3 benchmarks/brax_phases.py --config ppo_brax_ant --num-envs 4096 --out "$out/brax_phases.jsonl"
fi
if has check; then
  OUT="$out" DEVICE_CHECK_TIMEOUT="$(limit)" benchmarks/device_check.sh --cases ${CHECK_CASES:-minatar-cnn ant} --timeout "${CHECK_TIMEOUT:-200}"
fi
if has populations; then
  timeout -k 5 "$(limit)" python3 benchmarks/config_speed.py --timeout 150 --out "$out/config_speed.jsonl" \
    es_openes_cartpole es_openes_hopper pbt_ppo_cartpole
fi
if has minatar_paths; then
  for paths in auto none; do
    EVORL_FAST_PATHS="$paths" timeout -k 5 "$(limit)" python3 benchmarks/config_speed.py --timeout 200 \
      --out "$out/config_speed.jsonl" ppo_minatar_asterix:training.num_iterations=30,training.num_seeds=8,training.eval_interval=30
  done
fi
if has scale; then
  timeout -k 5 "$(limit)" python3 benchmarks/tpu_scale.py --out "$out/v5e.jsonl" --rows evorl:16384 evorl:256 evorl:4096
fi
echo "tpu session: $(( $(date +%s) - start )) s of $budget"

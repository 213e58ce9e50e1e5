#!/usr/bin/env bash
# evorl's plain and fast paths (evorl.hardware) against the single-function PPO reference, on
# the backend JAX finds: PPO CartPole with 1 and 1024 seeds, MinAtar Breakout with the CNN,
# brax ant (benchmarks/device_check.py has the cases). Under 8 minutes on one GPU; run it
# whenever one is at hand (earlier tables: `git show dc471e3:benchmarks/README.md`, "Device check").
#
#   benchmarks/device_check.sh            # on a GPU/TPU: the full sizes
#   benchmarks/device_check.sh --quick    # on a CPU: the same cases, CPU-sized
#   benchmarks/device_check.sh --cases cartpole minatar-cnn
#
# Results: printed, and appended as JSON lines to $OUT/device_check_<time>.jsonl
# ($OUT: a folder, default benchmarks/results). The whole run stops at 470 s (--quick: 1800 s;
# DEVICE_CHECK_TIMEOUT sets it).
set -euo pipefail
cd "$(dirname "$0")/.."
out_dir="${OUT:-benchmarks/results}"
mkdir -p "$out_dir"
# No process here opens the backend (a TPU is held by one process at a time): the measuring
# children name it in the results.
out="$out_dir/device_check_$(date -u +%Y%m%dT%H%M%SZ).jsonl"
echo "device check: $(uptime)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,utilization.gpu --format=csv,noheader || true
limit="${DEVICE_CHECK_TIMEOUT:-470}"
case " $* " in *" --quick "*) limit="${DEVICE_CHECK_TIMEOUT:-1800}";; esac  # a CPU takes longer
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # the checkout's evorl, installed or not
timeout -k 5 "$limit" python3 benchmarks/device_check.py --out "$out" "$@"
echo "results: $out"

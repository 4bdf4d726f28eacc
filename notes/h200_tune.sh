#!/usr/bin/env bash
# H200 steps of 2026-11-30 (issues 19 and 20). After `notes/h200_heads.sh unpack1` (carry .gpu/p1):
#   step check : core packages (carry .gpu/p2); GPU test suite (on 2 GPUs: the several-GPU tests too);
#                then the committed tuned table's winners against the hopper default, quick grid, twice
# The tune itself: `mlagate tune --grid quick --config-family hopper --jobs 16 --max-minutes 7` (README, Tuning).
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v -e Warning -e "TileLang begins" -e "TileLang completes"; }
timed() { local t0=$SECONDS; "$@"; local rc=$?; echo "[$* -> exit $rc, $((SECONDS - t0)) s]"; return $rc; }
DEFAULT=tilelang-hopper@N64.H64.split0.t256.stages2.FullCol  # kernels/mla_decode.py's HOPPER, as a candidate
case "$1" in
check)
  [ -d /tmp/site/tilelang ] || cat /tmp/core.part-aa .gpu/p2/core.part-ab .gpu/p2/core.part-ac | tar -C /tmp/site -xJ
  nvidia-smi -L
  timed timeout 300 python3 -m pytest tests -m gpu -n 8 -q -p no:cacheprovider --benchmark-disable -rs 2>&1 \
    | tee "$OUT/pytest_gpu.log" | tail -8
  for run in 1 2; do
    timed timeout 120 python3 -m mlagate.cli bench --grid quick --impl tilelang-hopper --impl "$DEFAULT" \
      --impl flash_mla --out "$OUT/bench_tuned_$run.json" 2>&1 | quiet | tee "$OUT/bench_tuned_$run.log" | tail -12
  done
  ;;
esac

#!/usr/bin/env bash
# H200 steps of 2026-11-30 (issue 17: serving workloads). After `notes/h200_heads.sh unpack1`:
#   step tests : core packages (carry .gpu/p2); the GPU test suite (TESTS=paths for a part: the paged kernel,
#                every implementation on the workloads); compute-sanitizer memcheck on one ragged-4k batch
#   step bench : `mlagate bench --grid quick`: every implementation, the dense points and both workloads
#   step record: a full-grid `mlagate record` with the workloads (notes/h200_truth.sh record)
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v -e Warning -e "TileLang begins" -e "TileLang completes" -e "^ *asv: skipped" -e "For parameters"; }
timed() { local t0=$SECONDS; "$@"; local rc=$?; echo "[$* -> exit $rc, $((SECONDS - t0)) s]"; return $rc; }
case "$1" in
tests)
  [ -d /tmp/site/tilelang ] || cat /tmp/core.part-aa .gpu/p2/core.part-ab .gpu/p2/core.part-ac | tar -C /tmp/site -xJ
  git log --oneline -1
  timed timeout 330 python3 -m pytest ${TESTS:-tests} -m gpu -n 8 -q -p no:cacheprovider --benchmark-disable 2>&1 \
    | tee "$OUT/pytest_gpu.log" | tail -15
  CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  echo "compute-sanitizer: $CS"
  timed timeout 200 "$CS" --tool memcheck --error-exitcode 9 python3 notes/sanitize_paged.py --batch 64 2>&1 \
    | quiet | tee "$OUT/memcheck.log" | tail -8
  ;;
bench)
  timed timeout 500 python3 -m mlagate.cli bench --grid quick --out "$OUT/bench_quick.json" 2>&1 | quiet \
    | tee "$OUT/bench.log" | tail -60
  ;;
record)
  bash notes/h200_truth.sh record
  ;;
esac

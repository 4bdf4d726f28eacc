#!/usr/bin/env bash
# H200 steps of 2026-12-01, third session (issue 16: the seesaw gated). After `notes/h200_heads.sh unpack1`:
#   step splits  : core packages (carry .gpu/p2); notes/seesaw_splits.py (forced splits at 128 heads vs FlashMLA),
#                  then the compose bench command on the bare host, quick grid, a comment-only head (both
#                  records and the gate, with the seesaw gated)
#   step tests   : the GPU tests that read perf.yml's gated configs (gpu_check, impls, ladder, measure)
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v -e Warning -e "TileLang begins" -e "TileLang completes" -e "^ *asv: skipped" -e "For parameters"; }
timed() { local t0=$SECONDS; "$@"; local rc=$?; echo "[$* -> exit $rc, $((SECONDS - t0)) s]"; return $rc; }
case "$1" in
splits)
  [ -d /tmp/site/tilelang ] || cat /tmp/core.part-aa .gpu/p2/core.part-ab .gpu/p2/core.part-ac | tar -C /tmp/site -xJ
  timed timeout 200 python3 notes/seesaw_splits.py --jobs 15 --out "$OUT/splits.json" 2>&1 | quiet \
    | tee "$OUT/splits.log" | tail -8
  git add -A -- . ":!.gpu" && git -c user.name=h200 -c user.email=h200@localhost commit -qm "this tree" \
    && echo "# comment" >> kernels/mla_decode.py \
    && git -c user.name=h200 -c user.email=h200@localhost commit -qam "a comment-only change" && git log --oneline -3
  export MLAGATE_RESULTS=/tmp/res
  timed timeout 380 python3 -m mlagate.cli gate --base HEAD~1 --head HEAD --machine h200 --grid quick --confirm \
    --record-missing --out out/gate 2>&1 | quiet | tee "$OUT/gate.log" | tail -30
  tar -C out -czf "$OUT/gate.tgz" gate; tar -C /tmp -czf "$OUT/results.tgz" res
  ;;
tests)
  timed timeout 400 python3 -m pytest tests/test_gpu_check.py tests/test_impls_gpu.py tests/test_ladder.py \
    tests/test_measure_gpu.py -m gpu -n 8 -q -p no:cacheprovider --benchmark-disable 2>&1 \
    | tee "$OUT/pytest_gpu_gated.log" | tail -12
  ;;
esac

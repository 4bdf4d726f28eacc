#!/usr/bin/env bash
# The H200 runs behind the README's numbers, in steps (each under the device's
# 10-minute limit). Source tree on PYTHONPATH, tilelang etc. unpacked in /tmp/site;
# /tmp/res (the results store) lives while the machine stays warm between steps.
#   step measure : asv record probe (quick), full grid `mlagate bench`, spread across the grid
#   step record  : the full grid through asv for BASE, GPU tests (`mlagate report` runs here, on the results)
#   step service : the compose `bench` service's command, as is, for HEAD against BASE
#   step gate    : (earlier) base / slowed / docs-only commits gated against BASE
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BASE=${BASE:?commit to gate against}
quiet() { grep -v -e Warning -e "TileLang begins" -e "TileLang completes"; }
timed() { local t0=$SECONDS; "$@"; local rc=$?; echo "[$* -> exit $rc, $((SECONDS - t0)) s]"; return $rc; }
case "$1" in
measure)
  timed timeout 90 python3 -m mlagate.cli record --rev HEAD --machine probe --grid quick --impl tilelang-hopper \
    --results /tmp/res-probe 2>&1 | quiet | tail -12
  timed timeout 330 python3 -m mlagate.cli bench --grid full --dtype float16 --out "$OUT/bench_full.json" \
    2>&1 | quiet | tail -16
  timed timeout 180 python3 notes/grid_spread.py "$OUT/grid_spread.json" 2>&1 | quiet | tail -24
  ;;
record)
  timed timeout 420 python3 -m mlagate.cli record --rev "$BASE" --machine h200 --grid full --dtype float16 \
    --results /tmp/res 2>&1 | quiet | tail -30
  tar -C /tmp -czf "$OUT/results-base.tgz" res
  timed timeout 120 python3 -m pytest tests -m gpu -n 8 -q -p no:cacheprovider --benchmark-disable 2>&1 \
    | tee "$OUT/pytest_gpu.log" | tail -6
  ;;
service)  # docker-compose.yml's `bench` command with MLAGATE_MACHINE=h200, store in /tmp/res
  export MLAGATE_RESULTS=/tmp/res
  timed timeout 560 python3 -m mlagate.cli gate --base "$BASE" --head HEAD --machine h200 --grid full --confirm \
    --record-missing --out out/gate 2>&1 | quiet | tail -60
  cp -r out/gate "$OUT/gate"; tar -C /tmp -czf "$OUT/results.tgz" res
  ;;
gate)
  rec() { python3 -m mlagate.cli record --rev "$1" --machine h200 --grid quick --impl tilelang-hopper \
            --impl flash_mla --dtype float16 --results /tmp/res 2>&1 | quiet | tail -3; }
  rec "$BASE"; rec demo/slow-split; rec demo/docs-only
  for head in demo/slow-split demo/docs-only; do
    python3 -m mlagate.cli gate --base "$BASE" --head "$head" --machine h200 --results /tmp/res --confirm \
      --out "$OUT/gate-${head#demo/}" 2>&1 | quiet | tail -30
    echo "gate $head exit code: ${PIPESTATUS[0]}"
  done
  tar -C /tmp -czf "$OUT/results-gate.tgz" res
  ;;
esac

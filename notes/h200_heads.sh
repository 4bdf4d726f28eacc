#!/usr/bin/env bash
# H200 steps of 2026-11-30 (issue 13: heads as a grid axis). Source tree on PYTHONPATH, packages in
# /tmp/site (offline bundles, split to fit the device tool's 64 MiB per call).
#   step unpack1 : baselines + first part of core (carry .gpu/p1)
#   step tests   : rest of core (carry .gpu/p2), GPU test suite, TileLang kernels of the full grid precompiled
#   step bench   : full grid with the heads axis, fp16, tilelang configs + vendor kernels
#   step service : the compose bench command on the bare host, quick grid, base = HEAD~1
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v -e Warning -e "TileLang begins" -e "TileLang completes"; }
timed() { local t0=$SECONDS; "$@"; local rc=$?; echo "[$* -> exit $rc, $((SECONDS - t0)) s]"; return $rc; }
case "$1" in
unpack1)
  mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu/p1/baselines.tar.xz && cp .gpu/p1/core.part-aa /tmp/
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv
  python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name(0))"
  ;;
tests)
  cat /tmp/core.part-aa .gpu/p2/core.part-ab .gpu/p2/core.part-ac | tar -C /tmp/site -xJ || exit 1
  git log --oneline -1
  timed timeout 420 python3 -m pytest tests -m gpu -n 8 -q -p no:cacheprovider --benchmark-disable 2>&1 \
    | tee "$OUT/pytest_gpu.log" | tail -8
  ;;
bench)
  git log --oneline -3; git status --short | head -5
  timed timeout 150 python3 notes/precompile.py --grid full --dtype float16 --config hopper --jobs 14 2>&1 | quiet | tail -3
  timed timeout 440 python3 -m mlagate.cli bench --grid full --dtype float16 --impl tilelang-hopper \
    --impl flash_mla --impl flashinfer --out "$OUT/bench_heads_fp16.json" 2>&1 | quiet \
    | tee "$OUT/bench.log" | tail -175
  ;;
service)  # the device's .git is the session's first snapshot: commit the tree there, then a comment-only head
  [ -d /tmp/site/tilelang ] || cat /tmp/core.part-aa .gpu/p2/core.part-ab .gpu/p2/core.part-ac | tar -C /tmp/site -xJ
  git add -A -- . ":!.gpu" && git -c user.name=h200 -c user.email=h200@localhost commit -qm "this tree" && echo "# comment" >> kernels/mla_decode.py \
    && git -c user.name=h200 -c user.email=h200@localhost commit -qam "a comment-only change" && git log --oneline -3
  export MLAGATE_RESULTS=/tmp/res
  timed timeout 560 python3 -m mlagate.cli gate --base HEAD~1 --head HEAD --machine h200 --grid quick --confirm \
    --record-missing --out out/gate 2>&1 | quiet | tail -40
  cp -r out/gate "$OUT/gate"; tar -C /tmp -czf "$OUT/results.tgz" res
  ;;
esac

#!/usr/bin/env bash
# H200 steps of 2026-11-30 (issue 15: one clock, a record budget, the ladder). After `notes/h200_heads.sh unpack1`:
#   step tests  : core packages (carry .gpu/p2); GPU test suite; every TileLang kernel of the full grid precompiled
#   step record : a full-grid `mlagate record` of this tree (all implementations, perf.yml's dtypes), timed
#                 (unpacks core when /tmp/site lacks it: carry .gpu/p2)
#   step ladder : `mlagate ladder` on the quick grid, 3 repetitions (resumable: carry out/ladder back in)
#   step study  : notes/compile_beside_study.py, the gated cases timed with and without a compile pool beside
#   step interleave : notes/interleave_study.py, one point's cases recorded window by window against case by case
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
RES=${RES:-/tmp/res}  # the record step's store
quiet() { grep -v -e Warning -e "TileLang begins" -e "TileLang completes" -e "^ *asv: skipped" -e "For parameters"; }
timed() { local t0=$SECONDS; "$@"; local rc=$?; echo "[$* -> exit $rc, $((SECONDS - t0)) s]"; return $rc; }
core() {  # the rest of the core bundle, on a fresh machine (after notes/h200_heads.sh unpack1; carry .gpu/p2)
  [ -d /tmp/site/tilelang ] || cat /tmp/core.part-aa .gpu/p2/core.part-ab .gpu/p2/core.part-ac | tar -C /tmp/site -xJ
}
this_tree() {  # the device's .git is the session's first snapshot: commit the tree there once
  git log -1 --format=%s | grep -q "^h200: this tree" && return
  git add -A -- . ":!.gpu" ":!out" && GIT_AUTHOR_DATE=2026-11-30T12:00:00Z GIT_COMMITTER_DATE=2026-11-30T12:00:00Z \
    git -c user.name=h200 -c user.email=h200@localhost commit -qm "h200: this tree"
}
case "$1" in
tests)
  core
  this_tree; git log --oneline -1
  python3 -c "import pynvml; print('nvidia-ml-py', pynvml.__file__)"
  timed timeout 300 python3 -m pytest tests -m gpu -n 8 -q -p no:cacheprovider --benchmark-disable 2>&1 \
    | tee "$OUT/pytest_gpu.log" | tail -12
  timed timeout 250 python3 notes/precompile.py --grid full --jobs 15 2>&1 | quiet | tail -3
  ;;
record)  # on a fresh machine: TileLang's cache is cold, so the record's parallel compile is timed too
  core
  this_tree; git log --oneline -1
  find ~/.tilelang/cache -mindepth 2 -maxdepth 2 2>/dev/null | wc -l | sed 's/^/TileLang cache entries before: /'
  t0=$(date +%s.%N)
  timed timeout "${LIMIT:-580}" python3 -m mlagate.cli record --rev HEAD --machine h200 --results "$RES" --grid full 2>&1 \
    | quiet > "$OUT/record.log"; tail -5 "$OUT/record.log"; grep -A3 "TileLang kernels" "$OUT/record.log"
  python3 notes/record_summary.py "$RES" "$(python3 -c "import sys, time; print(time.time() - float(sys.argv[1]))" "$t0")" \
    | tee "$OUT/record_summary.txt"
  tar -C "$(dirname "$RES")" -czf "$OUT/results.tgz" "$(basename "$RES")"
  ;;
study)
  core
  timed timeout "${LIMIT:-400}" python3 notes/compile_beside_study.py 2>&1 | quiet | tee "$OUT/compile_beside.log" | tail -15
  ;;
interleave)
  core
  timed timeout "${LIMIT:-300}" python3 notes/interleave_study.py 2>&1 | quiet | tee "$OUT/interleave.log" | tail -12
  ;;
ladder)
  core
  this_tree; git log --oneline -1
  timed timeout "${LIMIT:-550}" python3 -m mlagate.cli ladder --base HEAD --reps 3 --grid quick --machine h200 --out out/ladder \
    2>&1 | quiet | grep -v "^\[\|^ *[0-9.]*%\]" > "$OUT/ladder.log"; tail -60 "$OUT/ladder.log"
  tar -czf "$OUT/ladder.tgz" out/ladder
  ;;
esac

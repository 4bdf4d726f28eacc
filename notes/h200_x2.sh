#!/usr/bin/env bash
# nvidia-h200-x2 steps of 2026-11-30 (issue 20: several GPUs). After `notes/h200_heads.sh unpack1` and
# `notes/h200_truth.sh tests` (core packages, GPU suite, full grid precompiled):
#   step records : a full-grid `mlagate record` of this tree on GPU 0 alone, then on both GPUs, timed
#   step gate    : a comment-only commit recorded on both GPUs, gated against this tree with --confirm
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v -e Warning -e "TileLang begins" -e "TileLang completes" -e "^ *asv: skipped" -e "For parameters"; }
timed() { local t0=$SECONDS; "$@"; local rc=$?; echo "[$* -> exit $rc, $((SECONDS - t0)) s]"; return $rc; }
summary() {  # $1 results dir, $2 start time
  python3 - "$1" "$2" <<'PY'
import collections, json, statistics, sys, time, glob
res, wall = sys.argv[1], time.time() - float(sys.argv[2])
cases = json.load(open(glob.glob(f"{res}/h200/*-cases.sidecar")[-1]))["results"]
env = json.load(open(glob.glob(f"{res}/h200/*-env.sidecar")[-1]))
print(f"{res}: record wall time {wall:.0f} s (asv included); {len(cases)} cases;",
      dict(collections.Counter(r["status"] for r in cases)))
for r in cases:
    if r["status"] != "ok":
        print(" ", r["status"], r["impl"], r["batch"], r["seqlen"], r["heads"], (r.get("reason") or "")[:120])
ws = [w for r in cases if r.get("samples") for w in r["samples"]["windows"]]
print(f"windows {len(ws)}, dropped {sum(not w['kept'] for w in ws)}")
print("cases per GPU:", dict(collections.Counter((r.get("samples") or {}).get("uuid", "")[:13] for r in cases)))
points = collections.defaultdict(set)
for r in cases:
    if r.get("samples"):
        points[(r["batch"], r["seqlen"], r["heads"], r["dtype"])].add(r["samples"].get("uuid"))
print("grid points measured on more than one GPU:", sum(len(u) > 1 for u in points.values()))
print("gpu_consistency:", json.dumps(env.get("gpu_consistency"), indent=1))
PY
}
git log -1 --format=%s | grep -q "^h200: this tree" || { git add -A -- . ":!.gpu" ":!out" && GIT_AUTHOR_DATE=2026-11-30T12:00:00Z \
  GIT_COMMITTER_DATE=2026-11-30T12:00:00Z git -c user.name=h200 -c user.email=h200@localhost commit -qm "h200: this tree"; }
case "$1" in
records)
  git log --oneline -1; nvidia-smi --query-gpu=index,name,uuid,clocks.sm,power.draw,temperature.gpu --format=csv
  t0=$(date +%s.%N)
  CUDA_VISIBLE_DEVICES=0 timed timeout 290 python3 -m mlagate.cli record --rev HEAD --machine h200 --results /tmp/res1 \
    --grid full 2>&1 | quiet > "$OUT/record_1gpu.log"; tail -3 "$OUT/record_1gpu.log"; summary /tmp/res1 "$t0"
  t0=$(date +%s.%N)
  timed timeout 280 python3 -m mlagate.cli record --rev HEAD --machine h200 --results /tmp/res2 --grid full --gpus all \
    2>&1 | quiet > "$OUT/record_2gpu.log"; grep -A3 "consistency" "$OUT/record_2gpu.log"; tail -3 "$OUT/record_2gpu.log"
  summary /tmp/res2 "$t0"
  tar -C /tmp -czf "$OUT/results.tgz" res1 res2
  ;;
gate)
  git log -1 --format=%s | grep -q "comment-only" || { echo "# a comment-only change" >> kernels/mla_decode.py && \
    GIT_AUTHOR_DATE=2026-11-30T12:01:00Z GIT_COMMITTER_DATE=2026-11-30T12:01:00Z \
    git -c user.name=h200 -c user.email=h200@localhost commit -qam "h200: a comment-only change"; }
  git log --oneline -2
  t0=$(date +%s.%N)
  timed timeout 280 python3 -m mlagate.cli record --rev HEAD --machine h200 --results /tmp/res2 --grid full --gpus all \
    2>&1 | quiet > "$OUT/record_2gpu_head.log"; grep -A3 "consistency" "$OUT/record_2gpu_head.log"; summary /tmp/res2 "$t0"
  timed timeout 280 python3 -m mlagate.cli gate --base HEAD~1 --head HEAD --machine h200 --results /tmp/res2 --grid full \
    --confirm --out "$OUT/gate" 2>&1 | quiet > "$OUT/gate.log"; tail -30 "$OUT/gate.log"
  tar -C /tmp -czf "$OUT/results.tgz" res1 res2
  ;;
esac

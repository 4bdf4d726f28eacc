#!/usr/bin/env bash
# H200 steps of 2026-12-01 (issue 16: the seesaw kernel). After `notes/h200_heads.sh unpack1` (carry .gpu/p1):
#   step tests : core packages (carry .gpu/p2); the GPU tests' seesaw kernels and the full grid's hopper kernels
#                (fp16, bf16) precompiled; the GPU test suite
#   step bench : both configs' kernels precompiled (the tree's seesaw may be new), then `mlagate bench` over the full grid, fp16 and bf16: tilelang-seesaw, tilelang-hopper, FlashMLA
#   step speed : notes/seesaw_probe.py speed (a quick A/B; SPEED_ARGS narrows it, e.g. "--heads 128")
#   step variant : the seesaw with each patch in VARIANT (space-separated; default notes/seesaw_variants/prefetch.diff)
#                compiled and timed beside the committed one and FlashMLA, 128 heads (VARIANT_ARGS overrides that)
#   step profile : notes/launch_profile.py, b64 h128 bf16: each call's kernels (CUPTI) against its event time
#   step ncu : notes/ncu_probe.py under Nsight Compute (full set, cold caches), b64 s4096 h128 bf16: one launch of
#                the seesaw and one of FlashMLA's main kernel; details and per-instruction SASS as CSV
#   step fixed : notes/seesaw_fixed_cost.py, the seesaw, hopper and FlashMLA from 512 to 16384 tokens at b64 h128:
#                fixed cost per launch against cost per token
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v -e Warning -e "TileLang begins" -e "TileLang completes"; }
timed() { local t0=$SECONDS; "$@"; local rc=$?; echo "[$* -> exit $rc, $((SECONDS - t0)) s]"; return $rc; }
core() {  # the rest of the core bundle (carry .gpu/p2), once per machine
  [ -d /tmp/site/tilelang ] || cat /tmp/core.part-aa .gpu/p2/core.part-ab .gpu/p2/core.part-ac | tar -C /tmp/site -xJ
}
case "$1" in
tests)
  core
  timed timeout 200 python3 notes/seesaw_probe.py compile --jobs 15 2>&1 | quiet | tail -4
  timed timeout 100 python3 notes/precompile.py --grid full --config hopper --dtype float16 --dtype bfloat16 \
    --jobs 15 2>&1 | quiet | tail -2
  timed timeout 280 python3 -m pytest tests -m gpu -n 8 -q -p no:cacheprovider --benchmark-disable 2>&1 \
    | tee "$OUT/pytest_gpu.log" | tail -15
  ;;
bench)
  timed timeout 200 python3 notes/precompile.py --grid full --config seesaw --config hopper --dtype float16 \
    --dtype bfloat16 --jobs 15 2>&1 | quiet | tail -2
  timed timeout 290 python3 -m mlagate.cli bench --grid full --dtype float16 --dtype bfloat16 \
    --impl tilelang-seesaw --impl tilelang-hopper --impl flash_mla --out "$OUT/bench_seesaw.json" 2>&1 | quiet \
    | tee "$OUT/bench.log" | tail -100
  ;;
variant)
  core
  narrow=${VARIANT_ARGS:---heads 128}
  for v in ${VARIANT:-notes/seesaw_variants/prefetch.diff}; do  # one or more patches, each its own A/B
    n=$(basename "$v" .diff)
    timed timeout 180 python3 notes/seesaw_probe.py compile --variant "$v" $narrow --dtype float16 --dtype bfloat16 \
      --jobs 15 2>&1 | quiet | tail -3
    timed timeout 120 python3 notes/seesaw_probe.py speed --variant "$v" $narrow --impl flash_mla \
      --out "$OUT/variant_$n.json" 2>&1 | quiet | tee "$OUT/variant_$n.log" | tail -40
  done
  ;;
profile)  # is the seesaw's extra fixed cost inside its kernel or around it (launch latency; FlashMLA uses PDL)
  core
  timed timeout 200 python3 notes/launch_profile.py --seqlen 1024 --seqlen 4096 --seqlen 16384 2>&1 | quiet \
    | tee "$OUT/launch_profile.log" | tail -10
  ;;
fixed)
  core
  timed timeout 300 python3 notes/seesaw_fixed_cost.py 2>&1 | quiet | tee "$OUT/fixed_cost.log" | tail -20
  ;;
ncu)
  core
  ncu --version | tail -1
  for k in main_no_split flash_fwd_splitkv_mla; do
    timed timeout 220 ncu --clock-control none -k regex:$k --launch-skip 3 --launch-count 1 --set full \
      --import-source yes -o "$OUT/$k" python3 notes/ncu_probe.py ${NCU_ARGS:-} 2>&1 | quiet | tail -5
    ncu -i "$OUT/$k.ncu-rep" --page details --csv > "$OUT/$k.details.csv" 2>&1
    ncu -i "$OUT/$k.ncu-rep" --page source --csv --print-source sass 2>&1 | xz > "$OUT/$k.sass.csv.xz"
  done
  ls -la "$OUT"
  ;;
speed)
  timed timeout 500 python3 notes/seesaw_probe.py speed ${SPEED_ARGS:-} --out "$OUT/speed.json" 2>&1 | quiet \
    | tee "$OUT/speed.log" | tail -90
  ;;
esac

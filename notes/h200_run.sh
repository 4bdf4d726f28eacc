#!/usr/bin/env bash
# The H200 runs behind the README's numbers, in steps (each under the device's
# 10-minute limit). Source tree on PYTHONPATH, tilelang etc. unpacked in /tmp/site.
#   step tests : GPU test suite (+ pytest-benchmark host costs) and the noise study
#   step gate  : record base / slowed / docs-only commits, gate each against base
#   step full  : the full grid through asv, then asv publish
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BASE=${BASE:?commit the demo branches start from}
quiet() { grep -v -e Warning -e "TileLang begins" -e "TileLang completes"; }
case "$1" in
tests)
  timeout 300 python3 -m pytest tests -m gpu -n 8 -q -p no:cacheprovider --benchmark-disable 2>&1 | tee "$OUT/pytest.log" | tail -15
  timeout 60 python3 -m pytest tests/test_host_overhead.py -m gpu -q -p no:cacheprovider \
    --benchmark-json="$OUT/host_overhead.json" 2>&1 | tail -12
  timeout 200 python3 notes/noise_study.py "$OUT/noise.json" 2>&1 | quiet | tail -14
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
full)
  timeout 560 python3 -m mlagate.cli record --rev HEAD --machine h200 --grid full --dtype float16 \
    --results /tmp/res-full 2>&1 | quiet | tail -25
  python3 -c "import json;c=json.load(open('asv.conf.json'));c.update(results_dir='/tmp/res-full',html_dir='/tmp/html');json.dump(c,open('/tmp/asv.json','w'))"
  python3 -m asv publish --config /tmp/asv.json 2>&1 | tail -3
  tar -C /tmp -czf "$OUT/results-full.tgz" res-full html
  ;;
esac

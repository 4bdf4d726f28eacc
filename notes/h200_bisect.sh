#!/usr/bin/env bash
# H200 steps of 2026-11-30 (issue 22): `mlagate bisect` on a real series. After `notes/h200_heads.sh unpack1`:
#   step series : core packages (carry .gpu/p2); on top of this tree, 8 commits: 3 comment-only, one that adds
#                 a GPU spin of 20000 cycles after every TileLang decode call (>= 5% at these sizes), 4 comment-
#                 only; records the good and the bad end (tilelang-hopper, latency only)
#   step bisect : bisect good..bad (names the culprit?), then slow..bad (no slowdown: names none?)
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MLAGATE_RESULTS=/tmp/res
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v -e Warning -e "TileLang begins" -e "TileLang completes" -e "^ *asv: skipped" -e "For parameters"; }
timed() { local t0=$SECONDS; "$@"; local rc=$?; echo "[$* -> exit $rc, $((SECONDS - t0)) s]"; return $rc; }
commit() { git -c user.name=h200 -c user.email=h200@localhost commit -qam "$1"; }
record() { timed timeout 200 python3 -m mlagate.cli record --rev "$1" --machine h200 --grid quick \
  --impl tilelang-hopper --bench TimeDecode 2>&1 | quiet | tail -3; }
case "$1" in
series)
  [ -d /tmp/site/tilelang ] || cat /tmp/core.part-aa .gpu/p2/core.part-ab .gpu/p2/core.part-ac | tar -C /tmp/site -xJ
  git add -A -- . ":!.gpu" && commit "good: this tree"
  for i in 1 2 3; do echo "# comment $i" >> kernels/mla_decode.py && commit "comment-only $i"; done
  cat >> kernels/mla_decode.py <<'PY'
_decode_call = CompiledDecode.__call__


def _spun(self, *args):  # injected slowdown: a GPU spin after the kernel, inside the timed region
    import torch

    result = _decode_call(self, *args)
    torch.cuda._sleep(20000)
    return result


CompiledDecode.__call__ = _spun
PY
  commit "slower: 20000 GPU cycles after each call"
  for i in 5 6 7 8; do echo "# comment $i" >> kernels/mla_decode.py && commit "comment-only $i"; done
  git log --oneline -9 | tee "$OUT/series.txt"
  record HEAD~8; record HEAD
  ;;
bisect)
  timed timeout 560 python3 -m mlagate.cli bisect --good HEAD~8 --bad HEAD --machine h200 --out "$OUT/bisect-step" \
    2>&1 | quiet | grep -v "^\[" | tail -30
  timed python3 -m mlagate.cli bisect --good HEAD~4 --bad HEAD --machine h200 --out "$OUT/bisect-flat" 2>&1 | tail -8
  ls /tmp/res/h200 | grep -c "existing" | sed 's/^/results files (records) in the store: /'
  ;;
esac

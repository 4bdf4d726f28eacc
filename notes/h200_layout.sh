#!/usr/bin/env bash
# H200 step of 2026-11-30 (issues 18 and 21), after `notes/h200_heads.sh unpack1` and `tests`:
# the compose bench command on the bare host (quick grid; base = this tree, head = a comment-only
# commit), then a head that adds a GPU spin of 4000 cycles after every TileLang decode call, gated
# with --confirm: two real gate runs and their comparison pages.
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MLAGATE_RESULTS=/tmp/res
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v -e Warning -e "TileLang begins" -e "TileLang completes"; }
timed() { local t0=$SECONDS; "$@"; local rc=$?; echo "[$* -> exit $rc, $((SECONDS - t0)) s]"; return $rc; }
commit() { git -c user.name=h200 -c user.email=h200@localhost commit -qam "$1"; }
gate() {  # the compose bench service's command
  timed timeout 400 python3 -m mlagate.cli gate --base HEAD~1 --head HEAD --machine h200 --grid quick --confirm \
    --record-missing --out "out/$1" 2>&1 | quiet | tail -25
  cp -r "out/$1" "$OUT/$1"
}
git add -A -- . ":!.gpu" && commit "this tree" && echo "# comment" >> kernels/mla_decode.py && commit "a comment-only change"
gate gate-comment-only
cat >> kernels/mla_decode.py <<'PY'
_decode_call = CompiledDecode.__call__


def _spun(self, *args):  # injected slowdown: a GPU spin after the kernel, inside the timed region
    import torch

    result = _decode_call(self, *args)
    torch.cuda._sleep(4000)
    return result


CompiledDecode.__call__ = _spun
PY
commit "a slower kernel: 4000 GPU cycles after each call"
gate gate-slower
tar -C /tmp -czf "$OUT/results.tgz" res

"""`mlagate demo`: the gate and the report on recorded H200 results, on any machine (no GPU needed).

Replays a pair the repository keeps (tests/fixtures/h200/results, quick grid, recorded on an NVIDIA
H200 on 2026-11-29: a base, and a head that forces 4 KV splits in the hopper config) through the same
gate and report code a GPU host runs, with perf.yml as it then was for CUDA (tilelang-hopper's vendor
ratios; the seesaw, gated since, is not in them). Nothing is measured here; every page says which GPU measured
what, and when.
"""

import dataclasses
import shutil
import tempfile
from pathlib import Path

from mlagate import exits
from mlagate.config import ROOT
from mlagate.report.text import FAILING

HISTORY = ROOT / "tests" / "fixtures" / "h200" / "results"
MACHINE = "h200"
BASE = "b292e89299146d730f39171c242883358dbebc06"  # recorded 2026-11-29T10:47Z
HEAD = "22e8a671f5b457b3f9725be37186cfdd3af3605a"  # the hopper config forced to 4 KV splits, 10:48Z
RECORDED_WITH = "tilelang-hopper"  # the CUDA platform's TileLang config (its vendor ratio) when they were recorded


def as_recorded(cfg):
    """``cfg`` as the kept history was gated: its vendor ratios are tilelang-hopper's (there is no seesaw in it).
    Its ``digest`` still names perf.yml as committed."""
    cuda = dataclasses.replace(cfg.platform("cuda"), tilelang=RECORDED_WITH)
    return dataclasses.replace(cfg, platforms={**cfg.platforms, "cuda": cuda})


def add_parser(sub):
    p = sub.add_parser("demo", help="gate and report recorded H200 results (no GPU needed)")
    p.add_argument("--out", default="out/demo", help="folder for gate/ (the verdict, comparison.html) and report/")
    p.set_defaults(func=run)


def run(args, cfg) -> int:
    from mlagate import gate
    from mlagate.report import site

    out, cfg = Path(args.out), as_recorded(cfg)
    with tempfile.TemporaryDirectory(prefix="mlagate-demo-") as tmp:
        results = Path(tmp) / "results"
        shutil.copytree(HISTORY, results)  # the gate and asv publish read a copy: the history stays as kept
        verdict = gate.run_gate(cfg, base_rev=BASE, head_rev=HEAD, results=results, out_dir=out / "gate",
                                machine=MACHINE).verdict
        site.build(cfg, results=results, out=out / "report", machine=MACHINE, last=cfg.gate.drift_lookback)
    failing = [c.label for c in verdict.cases if c.status in FAILING]
    print(f"recorded H200 results of 2026-11-29 ({HISTORY.relative_to(ROOT)}), base {BASE[:8]}, head {HEAD[:8]}, "
          f"gated as then ({RECORDED_WITH} held to the vendor ratio):")
    print(f"verdict: {verdict.outcome} (a gate run would exit {verdict.exit_code})"
          + (f"; {', '.join(failing)}" if failing else ""))
    print(f"open {out / 'gate' / 'comparison.html'} (this pair) and {out / 'report' / 'index.html'} (the history); "
          f"serve with `python -m http.server {site.PORT} --directory {out}`")
    return exits.OK

"""Real asv results recorded on an H200 (2026-11-29) and ways to alter copies of them.

Three commits, quick grid (tilelang-hopper and flash_mla, batch 64/128, seqlen
4096, fp16): BASE; SLOW, which forces 4 KV splits in the hopper config (a real
22-31% slowdown); DOCS, a documentation-only change.
"""

import dataclasses
import json
import math
import shutil
from pathlib import Path

import yaml

from mlagate import config
from mlagate.decide import verdict
from mlagate.store.results import Store
from mlagate.store.results_file import BENCH_RATIO, BENCH_TFLOPS, BENCH_TIME, case_keys

FIXTURES = Path(__file__).parent / "fixtures" / "h200"
RESULTS = FIXTURES / "results"
MACHINE = "h200"
BASE = "b292e89299146d730f39171c242883358dbebc06"
SLOW = "22e8a671f5b457b3f9725be37186cfdd3af3605a"
DOCS = "fbc171ef793131d07af88223d8346cf4900799fd"
HOPPER_64 = ("tilelang-hopper", 64, 4096, "float16", 128, 1, "float16", "dense")
RECORDED_WITH = "tilelang-hopper"  # the CUDA platform's TileLang config (its vendor ratio) when they were recorded


def as_recorded(cfg):
    """``cfg`` as these fixtures were gated: their vendor ratios are tilelang-hopper's (there is no seesaw in
    them). Its ``digest`` still names perf.yml as committed."""
    cuda = dataclasses.replace(cfg.platform("cuda"), tilelang=RECORDED_WITH)
    return dataclasses.replace(cfg, platforms={**cfg.platforms, "cuda": cuda})


def recorded_raw() -> dict:
    """perf.yml, parsed but not checked, as the fixtures were gated: tilelang-hopper's vendor ratios."""
    raw = yaml.safe_load(config.DEFAULT_PATH.read_text())
    raw["platforms"]["cuda"]["tilelang"] = RECORDED_WITH
    return raw


def recorded_perf_yml(folder) -> Path:
    path = Path(folder) / "perf-as-recorded.yml"
    path.write_text(yaml.safe_dump(recorded_raw()))
    return path


def copy_store(tmp_path) -> Path:
    root = Path(tmp_path) / "results"
    shutil.copytree(RESULTS, root)
    return root


def results_file(root, commit) -> Path:
    return next((Path(root) / MACHINE).glob(f"{commit[:8]}-*.json"))


def edit(root, commit, bench, case, change):
    """Rewrite one case of one benchmark in a copied results file.
    change(value, samples) -> (value, samples); value None = failed, NaN = skipped."""
    path = results_file(root, commit)
    data = json.loads(path.read_text())
    cols = data["result_columns"]
    row = data["results"][bench]
    i = case_keys(row[cols.index("params")]).index(case)
    s_i = cols.index("samples")
    samples = row[s_i] if s_i < len(row) else None  # track_* rows stop before the samples column
    value, new_samples = change(row[0][i], samples[i] if samples else None)
    row[0][i] = value
    if samples:
        samples[i] = new_samples
    path.write_text(json.dumps(data))


def slow_down(factor):
    return lambda value, samples: (value * factor, [s * factor for s in samples] if samples else samples)


def slow_case(root, commit, case, factor):
    """One case measured ``factor`` times slower: its latency and TFLOPs together, as one measurement
    records them (the store refuses a case whose two disagree)."""
    edit(root, commit, BENCH_TIME, case, slow_down(factor))
    edit(root, commit, BENCH_TFLOPS, case, lambda value, samples: (value / factor, samples))


def fail(value, samples):
    return None, None


def skip(value, samples):
    return math.nan, None


def evaluate(root, base=BASE, head=DOCS, cfg=None, **kwargs):
    store = Store(root)
    cfg = cfg or as_recorded(config.load())
    return verdict.evaluate(store.load(MACHINE, base), store.load(MACHINE, head), cfg, "cuda", **kwargs)


def decide_full_grid():
    """The gate's decision over the full recorded fp16 grid (70 cases), base = head."""
    data = json.loads((FIXTURES / "bench_full_fp16_2026-11-29.json").read_text())
    from mlagate.store.results import CommitResults
    from mlagate.store.results_file import Entry

    def key(r):  # a fixture of one query token per sequence, dense
        return r["impl"], r["batch"], r["seqlen"], r["dtype"], r["heads"], 1, "dense"

    entries = {key(r): Entry("ok", r["median_ms"] / 1e3, tuple(t / 1e3 for t in r["samples"]["times_ms"]))
               for r in data["results"] if r["status"] == "ok"}
    ratios = {key(r): Entry("ok", r["vendor_ratio"]) for r in data["results"] if r.get("vendor_ratio")}
    results = CommitResults(MACHINE, BASE, 0, [], {BENCH_TIME: entries, BENCH_RATIO: ratios})
    return verdict.evaluate(results, results, as_recorded(config.load()), "cuda")


def drop_batch(root, commit, batch):
    """Remove every case of one batch size from a copied results file (a grid change)."""
    path = results_file(root, commit)
    data = json.loads(path.read_text())
    cols = data["result_columns"]
    p_i = cols.index("params")
    per_case = [i for i, c in enumerate(cols) if c not in ("params", "version", "started_at", "duration")]
    for row in data["results"].values():
        params = row[p_i]
        keep = [i for i, k in enumerate(case_keys(params)) if k[1] != batch]
        for c in per_case:
            if c < len(row) and isinstance(row[c], list):
                row[c] = [row[c][i] for i in keep]
        params[1] = [v for v in params[1] if v != str(batch)]
    path.write_text(json.dumps(data))

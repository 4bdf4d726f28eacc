"""What one `mlagate record` measured and the spread it leaves: cases by status and skip reason, the windows and
clocks, and per implementation the 99% interval of a case's median and the samples' interquartile range (both
as a share of the median; the median case and the widest).

    PYTHONPATH=$PWD python notes/record_summary.py STORE_OR_CASES_SIDECAR [SECONDS_FROM_START_TO_END]
    (a store as `mlagate record --results` writes it, or its *-cases.sidecar, gzipped or not)
"""

import collections
import glob
import gzip
import json
import statistics
import sys
from pathlib import Path


def load(path: str):
    """(cases, env or None) from a store folder or a cases sidecar."""
    if Path(path).is_dir():
        [cases] = glob.glob(f"{path}/*/*-cases.sidecar")
        env = glob.glob(f"{path}/*/*-env.sidecar")
        return json.loads(Path(cases).read_text())["results"], json.loads(Path(env[0]).read_text()) if env else None
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)["results"], None


def skip_class(reason: str) -> str:
    if "time budget" in reason:
        return "the time budget"
    return reason.split(":")[0][:60]


def main(path: str, wall: str | None = None) -> None:
    cases, env = load(path)
    if wall:
        print(f"record wall time {float(wall):.0f} s (asv included)")
    print(f"{len(cases)} cases:", dict(collections.Counter(r["status"] for r in cases)))
    skips = collections.Counter((skip_class(r["reason"] or ""), r["impl"], r["workload"] != "dense")
                                for r in cases if r["status"] == "skipped")
    for (why, impl, paged), n in sorted(skips.items()):
        print(f"  skipped by {why}: {impl}{' (paged or ragged batches)' if paged else ''}: {n}")
    windows = [w for r in cases if r.get("samples") for w in r["samples"]["windows"]]
    mhz = [w["sm_mhz"] for w in windows if w["sm_mhz"]]
    if mhz:
        print(f"windows {len(windows)}, dropped {sum(not w['kept'] for w in windows)}, SM clock {min(mhz):.0f}-"
              f"{max(mhz):.0f} MHz, median {statistics.median(mhz):.0f}; throttle reasons seen "
              f"{sorted({t for w in windows for t in w['throttle']})}")
    if env:
        print("clock control:", env["start"].get("clock_control"))
    by = collections.defaultdict(list)
    for r in cases:
        if r["status"] == "ok":
            lo, hi = r["ci99_ms"]
            by[(r["samples"]["budget"], r["impl"])].append((50 * (hi - lo) / r["median_ms"],
                                                            100 * r["iqr_ms"] / r["median_ms"]))
    print("spread, % of the case's median: the 99% interval's half-width, the samples' IQR (median case, widest)")
    for (budget, impl), rows in sorted(by.items()):
        ci, iqr = [c for c, _ in rows], [q for _, q in rows]
        print(f"  {budget:8s} {impl:16s} n={len(rows):3d}  99% interval ±{statistics.median(ci):.2f} (±{max(ci):.2f})"
              f"  IQR {statistics.median(iqr):.2f} ({max(iqr):.2f})")


if __name__ == "__main__":
    main(*sys.argv[1:3])

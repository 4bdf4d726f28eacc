"""What one `mlagate record` measured and the spread it leaves (CPU).

Cases by status and skip reason, the sampling windows and SM clocks, and per budget and implementation the 99%
interval of a case's median and the samples' interquartile range, both as a share of the median (the median
case and the widest). Reads a store as `mlagate record --results` writes it (the machine folder's one
``*-cases.sidecar``), or a cases sidecar itself, gzipped or not.

    python -m lab.record_summary STORE_OR_CASES_SIDECAR [--wall SECONDS]
"""

import argparse
import collections
import glob
import gzip
import json
import statistics
from pathlib import Path

from mlagate.json_reader import JSONFileError
from mlagate.json_reader import load as load_json
from mlagate.store.env import EnvRecordError, parse_env
from mlagate.store.results import cases_problem


def load(path: str):
    """(cases, env or None) from a store folder (one commit's cases sidecar in it) or a cases sidecar."""
    if Path(path).is_dir():
        found = glob.glob(f"{path}/*/*-cases.sidecar")
        if len(found) != 1:
            raise SystemExit(f"{path}: {len(found)} cases sidecars (*/*-cases.sidecar); give one sidecar instead")
        env = glob.glob(f"{path}/*/*-env.sidecar")
        try:
            cases = load_json(found[0], "a cases sidecar", cases_problem)["results"]
            return cases, parse_env(load_json(env[0], "an env sidecar")) if env else None
        except JSONFileError as e:  # a sidecar the gate refuses too: named, no traceback
            raise SystemExit(str(e)) from None
        except EnvRecordError as e:
            raise SystemExit(f"{env[0]}: {e}") from None
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)["results"], None


def skip_class(reason: str) -> str:
    if "time budget" in reason:
        return "the time budget"
    return reason.split(":")[0][:60]


def summarise(path: str, wall: float | None = None) -> None:
    cases, env = load(path)
    if wall:
        print(f"record wall time {wall:.0f} s (asv included)")
    print(f"{len(cases)} cases:", dict(collections.Counter(r["status"] for r in cases)))
    skips = collections.Counter((skip_class(r["reason"] or ""), r["impl"], r["workload"] != "dense")
                                for r in cases if r["status"] == "skipped")
    for (why, impl, paged), n in sorted(skips.items()):
        print(f"  skipped by {why}: {impl}{' (paged or ragged batches)' if paged else ''}: {n}")
    windows = [w for r in cases if r.get("samples") for w in r["samples"]["windows"]]
    mhz = [w["sm_mhz"] for w in windows if w.get("sm_mhz")]
    if mhz:
        print(f"windows {len(windows)}, dropped {sum(not w['kept'] for w in windows)}, SM clock {min(mhz):.0f}-"
              f"{max(mhz):.0f} MHz, median {statistics.median(mhz):.0f}; throttle reasons seen "
              f"{sorted({t for w in windows for t in w['throttle']})}")
    if env:
        print("clock control:", env.clock_control)
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


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", help="a store folder or a *-cases.sidecar (.gz too)")
    p.add_argument("--wall", type=float, help="the record's wall time in seconds, to print beside")
    args = p.parse_args(argv)
    summarise(args.path, args.wall)


if __name__ == "__main__":
    main()

"""Two records of one commit, case by case: the medians of every case measured in both, per budget and
implementation; then the second record's record-budget cases in quarters of their measuring order (asv_suite:
record budget first, by grid point), to show whether what ran beside the first quarter (a compile) moved them.

    PYTHONPATH=$PWD python notes/compare_records.py STORE_A STORE_B   (stores as `mlagate record --results` writes)
"""

import statistics
import sys

from mlagate.case import Case
from mlagate.measure.shards import point
from record_summary import load  # notes/: a store's cases sidecar

KEY = ("impl", "batch", "seqlen", "dtype", "heads", "workload")


def measured(store: str) -> list:
    return [r for r in load(store)[0] if r["status"] == "ok"]


def key(row) -> tuple:
    return tuple(row[k] for k in KEY)


def main(a: str, b: str) -> None:
    first, second = {key(r): r for r in measured(a)}, measured(b)
    both = [r for r in second if key(r) in first]
    print(f"{len(both)} cases in both ({len(first)} and {len(second)} measured)")
    change = {key(r): r["median_ms"] / first[key(r)]["median_ms"] - 1 for r in both}
    groups = {}
    for r in both:
        groups.setdefault((r["samples"]["budget"], r["impl"]), []).append((change[key(r)], key(r)))
    for (budget, impl), changes in sorted(groups.items()):
        values = [c for c, _ in changes]
        worst = max(changes, key=lambda c: abs(c[0]))
        print(f"{budget:8s} {impl:16s} n={len(values):3d}  median {100 * statistics.median(values):+.2f}%  "
              f"median |change| {100 * statistics.median(map(abs, values)):.2f}%  "
              f"worst {100 * worst[0]:+.2f}% at b{worst[1][1]} s{worst[1][2]} h{worst[1][4]} {worst[1][5]}")
    order = sorted((r for r in both if r["samples"]["budget"] == "record"),
                   key=lambda r: point(Case(*key(r), r["page_size"], tuple(r["lengths"]))))
    quarter = len(order) // 4
    for q in range(4):
        rows = order[q * quarter:(q + 1) * quarter]
        per_impl = {}
        for r in rows:
            per_impl.setdefault(r["impl"], []).append(100 * change[key(r)])
        text = ", ".join(f"{impl} {statistics.median(v):+.2f}% (sd {statistics.pstdev(v):.2f})"
                         for impl, v in sorted(per_impl.items()))
        lead = sum(r["samples"]["dropped"] for r in rows)
        print(f"quarter {q + 1} of the measuring order: {text}; calls not timed for the host's lead {lead}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(*sys.argv[1:3])

"""Two records of one commit, case by case: how far apart do they land, and where in the measuring order (CPU)?

Open question (a ladder within ±0.5 pp needs records that repeat within ~0.15 pp). Prints, per budget and
implementation, the median change of every case measured in both records, its median size and the worst case; then
the second record's record-budget cases in quarters of their measuring order (asv_suite: record budget first, by
grid point), to show whether what ran beside one quarter (a compile) moved it, with the calls not timed because the
host fell behind. Stores as `mlagate record --results` writes them.

    python -m lab.compare_records STORE_A STORE_B
"""

import argparse
import statistics

from lab.record_summary import load


def measured(store: str) -> list:
    return [r for r in load(store)[0] if r["status"] == "ok"]


def key(row):
    """The row's case: every axis a case keys on (q_len and kv_dtype included), its layout not."""
    from mlagate.case import Case
    return Case.from_dict(row)


def compare(a: str, b: str) -> None:
    from mlagate.measure.shards import point

    first, second = {key(r): r for r in measured(a)}, measured(b)
    both = [r for r in second if key(r) in first]
    print(f"{len(both)} cases in both ({len(first)} and {len(second)} measured)")
    if not both:
        return
    change = {key(r): r["median_ms"] / first[key(r)]["median_ms"] - 1 for r in both}
    groups = {}
    for r in both:
        groups.setdefault((r["samples"]["budget"], r["impl"]), []).append((change[key(r)], key(r)))
    for (budget, impl), changes in sorted(groups.items()):
        values = [c for c, _ in changes]
        worst = max(changes, key=lambda c: abs(c[0]))
        print(f"{budget:8s} {impl:16s} n={len(values):3d}  median {100 * statistics.median(values):+.2f}%  "
              f"median |change| {100 * statistics.median(map(abs, values)):.2f}%  "
              f"worst {100 * worst[0]:+.2f}% at {worst[1].label()}")
    order = sorted((r for r in both if r["samples"]["budget"] == "record"),
                   key=lambda r: point(key(r)))
    quarter = len(order) // 4
    for q in range(4 if quarter else 0):
        rows = order[q * quarter:(q + 1) * quarter]
        per_impl = {}
        for r in rows:
            per_impl.setdefault(r["impl"], []).append(100 * change[key(r)])
        text = ", ".join(f"{impl} {statistics.median(v):+.2f}% (sd {statistics.pstdev(v):.2f})"
                         for impl, v in sorted(per_impl.items()))
        lead = sum(r["samples"]["dropped"] for r in rows)
        print(f"quarter {q + 1} of the measuring order: {text}; calls not timed for the host's lead {lead}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("store_a", help="the first record's store (or its cases sidecar)")
    p.add_argument("store_b", help="the second record's")
    args = p.parse_args(argv)
    compare(args.store_a, args.store_b)


if __name__ == "__main__":
    main()

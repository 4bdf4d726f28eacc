"""Two records of one commit on one GPU, case by case: the medians of every case measured in both, per budget
and implementation (e.g. a cold record, compiling its kernels beside the timing, against a warm one).

    python notes/compare_records.py STORE_A STORE_B     (stores as `mlagate record --results` writes them)
"""

import glob
import json
import statistics
import sys


def medians(store: str) -> dict:
    [path] = glob.glob(f"{store}/*/*-cases.sidecar")
    rows = json.load(open(path))["results"]
    return {(r["impl"], r["batch"], r["seqlen"], r["dtype"], r["heads"], r["workload"]): (r["median_ms"], r["samples"]["budget"])
            for r in rows if r["status"] == "ok"}


def main(a: str, b: str) -> None:
    first, second = medians(a), medians(b)
    both = sorted(set(first) & set(second), key=str)
    print(f"{len(both)} cases in both ({len(first)} and {len(second)} measured)")
    groups = {}
    for key in both:
        change = second[key][0] / first[key][0] - 1
        groups.setdefault((first[key][1], key[0]), []).append((change, key))
    for (budget, impl), changes in sorted(groups.items()):
        values = [c for c, _ in changes]
        worst = max(changes, key=lambda c: abs(c[0]))
        print(f"{budget:8s} {impl:16s} n={len(values):3d}  median {100 * statistics.median(values):+.2f}%  "
              f"median |change| {100 * statistics.median(map(abs, values)):.2f}%  "
              f"worst {100 * worst[0]:+.2f}% at b{worst[1][1]} s{worst[1][2]} h{worst[1][4]} {worst[1][5]}")


if __name__ == "__main__":
    main(*sys.argv[1:3])

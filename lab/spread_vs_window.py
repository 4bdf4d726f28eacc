"""Does a longer sampling window shrink the spread of repeated medians, and is the rest the SM clock? (CPU)

Open question (repeated medians within 1% over the whole grid). Reads the rounds that lab/grid_spread.py or
lab/noise_study.py wrote on a GPU (.json or .json.xz: per case, each round's median and samples; grid_spread also
each round's wall-clock start and end).
1. Paired: each round's median over only its first T ms of samples (sample time + ~40 µs flush), for several
   T, against the whole window: the same GPU state, only the window differs. Spread = (max - min) / median.
2. With an `nvidia-smi -lms 50 --query-gpu=timestamp,clocks.sm --format=csv` log recorded beside grid_spread:
   the correlation between each round's deviation from its case's median latency and the mean SM clock over
   the round, relative likewise (slope -1: fully clock-bound).

    python -m lab.spread_vs_window tests/fixtures/h200/noise_study_2026-11-29.json
    python -m lab.spread_vs_window SPREAD.json.xz --smi SMI.csv.xz
"""

import argparse
import bisect
import datetime
import itertools
import json
import lzma
import statistics

FLUSH_MS = 0.04  # 2 x 60 MB written at ~3 TB/s


def read(path):
    return (lzma.open if path.endswith(".xz") else open)(path, "rt")


def spread(values):
    return (max(values) - min(values)) / statistics.median(values)


def summary(spreads):
    return (f"median spread {statistics.median(spreads):.2%}, worst {max(spreads):.2%}, "
            f"{sum(s <= 0.01 for s in spreads)} of {len(spreads)} cases <= 1%")


def prefix_median(samples, window_ms):
    elapsed = itertools.accumulate(t + FLUSH_MS for t in samples)
    n = sum(1 for e in elapsed if e <= window_ms)
    return statistics.median(samples[:max(n, 1)])


def sm_clock_log(path) -> list:
    """[(unix time, SM MHz)] from nvidia-smi's CSV (timestamp, clocks.sm [MHz]); the header is skipped."""
    clock = []
    for line in read(path):
        fields = [f.strip() for f in line.split(",")]
        try:
            t = datetime.datetime.strptime(fields[0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc)
            clock.append((t.timestamp(), float(fields[1].split()[0])))
        except (ValueError, IndexError):
            continue
    return clock


def clock_correlation(results, clock) -> None:
    times = [t for t, _ in clock]
    latency_dev, clock_dev = [], []
    for r in results.values():
        means = [statistics.mean(mhz for _, mhz in clock[bisect.bisect_left(times, a):bisect.bisect_right(times, b)])
                 for a, b in r["wall"]]
        mid_latency, mid_clock = statistics.median(r["mlagate"]), statistics.median(means)
        latency_dev += [m / mid_latency - 1 for m in r["mlagate"]]
        clock_dev += [c / mid_clock - 1 for c in means]
    fit = statistics.linear_regression(clock_dev, latency_dev)
    print(f"{len(latency_dev)} measurements: correlation of latency with SM clock "
          f"{statistics.correlation(clock_dev, latency_dev):+.2f}, slope {fit.slope:+.2f} (-1 = fully clock-bound)")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("rounds", help="lab/grid_spread.py's or lab/noise_study.py's output (.json, .json.xz)")
    p.add_argument("--smi", help="an nvidia-smi -lms clock log of the same run (.csv, .csv.xz); needs grid_spread's "
                   "wall-clock times")
    args = p.parse_args(argv)
    results = json.load(read(args.rounds))
    longest = max(sum(s) + FLUSH_MS * len(s) for r in results.values() for s in r["samples"])
    for window_ms in (100, 200, 300, 500, 700, 1000, 2000):
        if window_ms > longest * 1.05:
            break
        spreads = [spread([prefix_median(s, window_ms) for s in r["samples"]]) for r in results.values()]
        print(f"first {window_ms:4d} ms of each window: {summary(spreads)}")
    print(f"whole window:                {summary([spread(r['mlagate']) for r in results.values()])}")
    if args.smi:
        if not all("wall" in r for r in results.values()):
            p.error(f"{args.rounds}: no wall-clock times per round (lab/grid_spread.py writes them)")
        clock_correlation(results, sm_clock_log(args.smi))


if __name__ == "__main__":
    main()

"""Does a longer sampling window shrink the spread of repeated medians, and is
the rest the SM clock? Reads a notes/grid_spread.py output (.json or .json.xz).

1. Paired: each measurement's median over only its first T ms of samples
   (sample time + ~40 µs flush), for several T, against the whole window:
   the same GPU state, only the window differs.
2. With an `nvidia-smi -lms` log (timestamp, clocks.sm, ...): the correlation
   between each measurement's deviation from its case's median and the mean SM
   clock reading over the measurement (warm-up included), relative likewise.
Run: python notes/spread_vs_window.py docs/h200-2026-11-29/window_1s/spread.json.xz [smi.csv.xz]
"""
import bisect
import datetime
import itertools
import json
import lzma
import statistics
import sys

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


results = json.load(read(sys.argv[1]))
longest = max(sum(s) + FLUSH_MS * len(s) for r in results.values() for s in r["samples"])
for window_ms in (100, 200, 300, 500, 700, 1000, 2000):
    if window_ms > longest * 1.05:
        break
    spreads = [spread([prefix_median(s, window_ms) for s in r["samples"]]) for r in results.values()]
    print(f"first {window_ms:4d} ms of each window: {summary(spreads)}")
print(f"whole window:                {summary([spread(r['mlagate']) for r in results.values()])}")

if len(sys.argv) > 2:
    clock = []  # (unix time, SM MHz)
    for line in read(sys.argv[2]):
        fields = [f.strip() for f in line.split(",")]
        try:
            t = datetime.datetime.strptime(fields[0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc)
            clock.append((t.timestamp(), float(fields[1].split()[0])))
        except (ValueError, IndexError):
            continue
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

"""Does the spread of repeated medians depend on how long each measurement sampled?
Reads a notes/grid_spread.py output; the window is n samples x (median + ~40 µs flush).
Run: python notes/spread_vs_window.py docs/h200-2026-11-29/grid_spread.json"""
import json
import statistics
import sys

FLUSH_MS = 0.04  # 2 x 60 MB written at ~3 TB/s
rows = []
for label, r in json.load(open(sys.argv[1])).items():
    meds = r["mlagate"]
    mid = statistics.median(meds)
    window_ms = statistics.mean(len(s) for s in r["samples"]) * (mid + FLUSH_MS)
    rows.append((window_ms, (max(meds) - min(meds)) / mid, statistics.stdev(meds) / mid, label))
for window_ms, spread, sd, label in sorted(rows):
    print(f"window {window_ms:5.0f} ms  spread {spread:6.2%}  stdev {sd:6.2%}  {label}")
for name, part in (("< 250 ms", [r for r in rows if r[0] < 250]), (">= 250 ms", [r for r in rows if r[0] >= 250])):
    print(f"window {name}: {sum(r[1] <= 0.01 for r in part)} of {len(part)} cases <= 1%, "
          f"median spread {statistics.median(r[1] for r in part):.2%}")

"""Across the whole grid: how far apart are medians of the same case measured
repeatedly in one run? (issue 3: <= 1%)

Every case of the full fp16 grid for the given implementations, ROUNDS rounds
interleaved across all cases (A B C ... A B C ...), each round one time_gpu
median per sampling window, with perf.yml's warm-up (1 s) and cold L2 every
sample. Windows are REP_MS:MAX_SAMPLES pairs; several are measured back to back
on each case, their order rotated every round, so they see the same GPU. The
GPU idles 5 s first, as a fresh CI job finds it. Each measurement's wall-clock
start and end are kept, to line up with an `nvidia-smi -lms` clock log.
Prints spread = (max - min) / median per case; writes, per window, round
medians and samples (the layout `mlagate calibrate --noise` reads) to
OUT-REP_MS.json, or to OUT.json when only perf.yml's window is measured.
Run: PYTHONPATH=$PWD python notes/grid_spread.py OUT.json [--windows 300:1000 1000:20000] [impl ...]
"""
import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from mlagate import config
from mlagate.config import Budget

from mlagate.measure import impls
from mlagate.measure.harness import Inputs, shape_of
from mlagate.measure.environment import clocks
from mlagate.measure.timer import time_gpu

ROUNDS = 5
cfg = config.load()
timing = cfg.timing
parser = argparse.ArgumentParser()
parser.add_argument("out", type=Path)
parser.add_argument("impls", nargs="*", default=["tilelang-hopper", "flash_mla"])
parser.add_argument("--windows", nargs="+", default=[f"{timing.window_ms * timing.budget('record').windows:g}:0"])
args = parser.parse_args()
windows = [tuple(float(v) for v in w.split(":")) for w in args.windows]
cases = cfg.grid.cases("full", args.impls, ["float16"])
device = torch.device("cuda", 0)
inputs, launches = {}, {}
for case in cases:
    shape = shape_of(case)
    inputs.setdefault(shape, Inputs(case, device))
    launches[case] = impls.prepare(case.impl, inputs[shape].tensors, device)
results = {w: {c.label(): {"mlagate": [], "samples": [], "wall": []} for c in cases} for w in windows}


def out_path(window):
    return args.out if len(windows) == 1 else args.out.with_name(f"{args.out.stem}-{window[0]:g}{args.out.suffix}")


print("clocks at start:", clocks(), flush=True)
time.sleep(5)
for r in range(ROUNDS):
    for case in cases:
        for k in range(len(windows)):
            window = windows[(r + k) % len(windows)]
            rep_ms, max_samples = window
            t0 = time.time()
            windows = max(1, round(float(rep_ms) / timing.window_ms))  # max_samples: now timing.samples_per_window
            s = time_gpu(launches[case], timing, Budget(warmup_ms=timing.warmup_ms, windows=windows))
            entry = results[window][case.label()]
            entry["mlagate"].append(statistics.median(s.times_ms))
            entry["samples"].append([round(t, 6) for t in s.times_ms])
            entry["wall"].append([t0, time.time()])
    print(f"round {r}: {clocks()}", flush=True)
    for window in windows:  # after every round: a cut-short run keeps its rounds
        json.dump(results[window], open(out_path(window), "w"))
for window in windows:
    print(f"window rep_ms {window[0]:g}, max_samples {window[1]:g}:")
    spreads = {}
    for label, r in results[window].items():
        meds = r["mlagate"]
        mid = statistics.median(meds)
        spreads[label] = (max(meds) - min(meds)) / mid
        print(f"  {label:42s} median {mid * 1e3:9.1f} us  n {len(r['samples'][0]):5d}  "
              f"spread {spreads[label]:6.2%}  stdev {statistics.stdev(meds) / mid:6.2%}")
    worst = max(spreads, key=spreads.get)
    print(f"  spread across the grid: median {statistics.median(spreads.values()):.2%}, worst {spreads[worst]:.2%} "
          f"({worst}); {sum(v <= 0.01 for v in spreads.values())} of {len(spreads)} cases <= 1%")

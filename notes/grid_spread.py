"""Across the whole grid: how far apart are medians of the same case measured
repeatedly in one run? (issue 3: <= 1%)

Every case of the full fp16 grid for the given implementations, ROUNDS rounds
interleaved across all cases (A B C ... A B C ...), each round one time_gpu
median with perf.yml's timing (1 s warm-up, cold L2 every sample). The GPU
idles 5 s first, as a fresh CI job finds it. Prints spread = (max - min) /
median per case; writes round medians and samples (same layout as
noise_study.py, so `mlagate calibrate --noise` reads it).
Run: PYTHONPATH=$PWD python notes/grid_spread.py out.json [impl ...]
"""
import json
import statistics
import sys
import time

import torch

from mlagate import config, impls
from mlagate.harness import Inputs, shape_of
from mlagate.measure import clocks, time_gpu

ROUNDS = 5
cfg = config.load()
timing = cfg.timing
chosen = sys.argv[2:] or ["tilelang-hopper", "flash_mla"]
cases = cfg.grid.cases("full", chosen, ["float16"])
device = torch.device("cuda", 0)
inputs, launches = {}, {}
for case in cases:
    shape = shape_of(case)
    inputs.setdefault(shape, Inputs(case, device))
    launches[case] = impls.prepare(case.impl, inputs[shape].tensors, device)
results = {c.label(): {"mlagate": [], "samples": []} for c in cases}
print("clocks at start:", clocks(), flush=True)
time.sleep(5)
for r in range(ROUNDS):
    for case in cases:
        s = time_gpu(launches[case], warmup_ms=timing.warmup_ms, rep_ms=timing.rep_ms,
                     min_samples=timing.min_samples, max_samples=timing.max_samples, cold_l2=True)
        results[case.label()]["mlagate"].append(statistics.median(s.times_ms))
        results[case.label()]["samples"].append([round(t, 6) for t in s.times_ms])
    print(f"round {r}: {clocks()}", flush=True)
    json.dump(results, open(sys.argv[1], "w"))  # after every round: a cut-short run keeps its rounds
spreads = {}
for label, r in results.items():
    meds = r["mlagate"]
    mid = statistics.median(meds)
    spreads[label] = (max(meds) - min(meds)) / mid
    print(f"{label:42s} median {mid * 1e3:9.1f} us  spread {spreads[label]:6.2%}  "
          f"stdev {statistics.stdev(meds) / mid:6.2%}")
worst = max(spreads, key=spreads.get)
print(f"spread across the grid: median {statistics.median(spreads.values()):.2%}, worst {spreads[worst]:.2%} ({worst}); "
      f"{sum(v <= 0.01 for v in spreads.values())} of {len(spreads)} cases <= 1%")

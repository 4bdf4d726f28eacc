"""Does a longer warm-up make repeated medians agree within 1%? (H200, 2026-11-29)
Same case, 12 rounds interleaved across cases, after a 5 s idle: warm-up 200 ms
(perf.yml's value then) vs 1000 ms; SM clock and temperature read after every round.
Run: PYTHONPATH=$PWD python notes/warmup_study.py"""
import statistics
import time

import torch

from mlagate.measure import impls
from mlagate.case import Case
from mlagate.measure.harness import Inputs
from mlagate.measure.environment import clocks
from mlagate.measure.timer import time_gpu
from mlagate.config import Budget, load

TIMING = load().timing

CASES = [Case("tilelang-hopper", 128, 8192, "float16"), Case("tilelang-hopper", 64, 1024, "float16")]
device = torch.device("cuda", 0)
launch = {c: impls.prepare(c.impl, Inputs(c, device).tensors, device) for c in CASES}
for warmup in (200, 1000):
    time.sleep(5)
    meds = {c: [] for c in CASES}
    for r in range(12):
        for c in CASES:
            s = time_gpu(launch[c], TIMING, Budget(warmup_ms=warmup, windows=6))
            meds[c].append(statistics.median(s.times_ms))
        ck = clocks()
        print(f"warmup {warmup} round {r}: sm {ck.get('sm_mhz')} MHz {ck.get('temp_c')} C {ck.get('power_w')} W "
              + " ".join(f"{meds[c][-1] * 1e3:.1f}" for c in CASES), flush=True)
    for c in CASES:
        m = meds[c]
        print(f"warmup {warmup} {c.label()}: spread {(max(m) - min(m)) / statistics.median(m):.2%} "
              f"stdev {statistics.stdev(m) / statistics.median(m):.2%}", flush=True)

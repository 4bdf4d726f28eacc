"""Noise study: how far apart are medians of the same case measured repeatedly?

For each case, ROUNDS rounds interleaved across cases (A B C A B C ...), each
round one median. Method "mlagate": time_gpu as configured in perf.yml's timing
(cold L2 every sample; warm-up and window as perf.yml has them when it runs). Method "do_bench":
triton.testing.do_bench defaults (25 ms warm-up, 100 ms, its own cache flush),
median. The GPU starts idle, as in CI. Prints spread = (max - min) / median and
the stdev of the round medians; writes every sample to the JSON path given.
Run: PYTHONPATH=$PWD python notes/noise_study.py out.json
"""
import json
import statistics
import sys
import time

import torch
import triton.testing

from mlagate import config

from mlagate.measure import impls
from mlagate.case import Case
from mlagate.measure.harness import Inputs
from mlagate.measure.environment import clocks
from mlagate.measure.timer import time_gpu

ROUNDS = 15
CASES = [Case("tilelang-hopper", 128, 8192, "float16"), Case("tilelang-hopper", 64, 1024, "float16"),
         Case("flash_mla", 64, 4096, "float16"), Case("triton", 128, 2048, "float16")]
timing = config.load().timing
device = torch.device("cuda", 0)
launches = {}
for case in CASES:
    inputs = Inputs(case, device)
    launches[case] = (impls.prepare(case.impl, inputs.tensors, device), inputs)
results = {c.label(): {"mlagate": [], "do_bench": [], "samples": []} for c in CASES}
print("clocks at start:", clocks(), flush=True)
time.sleep(5)  # let the GPU drop back to idle clocks, as a fresh CI job finds it
for method in ("do_bench", "mlagate"):
    for r in range(ROUNDS):
        for case in CASES:
            launch = launches[case][0]
            if method == "mlagate":
                s = time_gpu(launch, timing, "record")
                results[case.label()]["mlagate"].append(statistics.median(s.times_ms))
                results[case.label()]["samples"].append(list(s.times_ms))
            else:
                results[case.label()]["do_bench"].append(triton.testing.do_bench(launch, return_mode="median"))
    time.sleep(5)
print("clocks at end:", clocks())
print(f"{'case':42s} {'method':9s} {'median us':>10s} {'spread':>7s} {'stdev':>6s}")
for label, r in results.items():
    for method in ("do_bench", "mlagate"):
        meds = r[method]
        mid = statistics.median(meds)
        print(f"{label:42s} {method:9s} {mid*1e3:10.1f} {(max(meds)-min(meds))/mid:7.2%} "
              f"{statistics.stdev(meds)/mid:6.2%}")
json.dump(results, open(sys.argv[1], "w"))

"""Is a record's level shift in the 89 µs case where its inputs land in memory? (issue 15, H200, 2026-12-01)

The ladder's recorded changes of tilelang-hopper b64 s4096 h16 sit 0.4-0.6 pp off the injected slowdown in
whole repetitions at a time (one base record reads slow or fast against the later ones), while the interleaved
re-measure, one process and one set of inputs, lands close. A record is a new process with new allocations.
Here, in one process and interleaved: the case timed N times on one set of inputs ("same") and N times on a
fresh set each time, the old sets kept alive so each lands elsewhere ("fresh"), at perf.yml's `record` budget.
Run: PYTHONPATH=$PWD python notes/placement_study.py [rounds] [flush]"""
import statistics
import sys

import torch

from mlagate import config as config_mod
from mlagate.case import Case
from mlagate.measure import impls, timer
from mlagate.measure.harness import Inputs
from mlagate.measure.summary import median

TIMING = config_mod.load().timing
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 8
device = torch.device("cuda", 0)
FIRST = () if len(sys.argv) > 2 else (Case("tilelang-hopper", 64, 4096, "float16", 16),
                                      Case("tilelang-hopper", 128, 4096, "float16", 16))
for case in FIRST:
    same_inputs = Inputs(case, device)
    same = impls.prepare(case.impl, same_inputs.tensors, device)
    kept, medians = [], {"same": [], "fresh": []}
    for r in range(ROUNDS):
        medians["same"].append(median(timer.time_gpu(same, TIMING, "record").times_ms))
        kept.append(Inputs(case, device))
        fresh = impls.prepare(case.impl, kept[-1].tensors, device)
        medians["fresh"].append(median(timer.time_gpu(fresh, TIMING, "record").times_ms))
        print(f"{case.label()} round {r}: same {medians['same'][-1] * 1e3:.2f} µs, fresh {medians['fresh'][-1] * 1e3:.2f} µs "
              f"(KV at {kept[-1].tensors[2].data_ptr():#x})", flush=True)
    for name, m in medians.items():
        mid = statistics.median(m)
        print(f"{case.label()} {name}: medians spread {(max(m) - min(m)) / mid:.2%}, stdev {statistics.stdev(m) / mid:.2%}",
              flush=True)

# Second question: does the level move with the cache-flush buffer, which time_gpu allocates per call?
# "fixed": one flush buffer for every call; "per call": time_gpu's own (a fresh allocation each time).
if len(sys.argv) > 2 and sys.argv[2] == "flush":
    case = Case("tilelang-hopper", 64, 4096, "float16", 16)
    inputs = Inputs(case, device)
    fn = impls.prepare(case.impl, inputs.tensors, device)
    own = timer._Flusher
    fixed = own(device, True)
    medians = {"per call": [], "fixed": []}
    for r in range(ROUNDS):
        timer._Flusher = own
        medians["per call"].append(median(timer.time_gpu(fn, TIMING, "record").times_ms))
        timer._Flusher = lambda device, enabled: fixed
        medians["fixed"].append(median(timer.time_gpu(fn, TIMING, "record").times_ms))
        print(f"flush round {r}: per call {medians['per call'][-1] * 1e3:.2f} µs, fixed {medians['fixed'][-1] * 1e3:.2f} µs",
              flush=True)
    for name, m in medians.items():
        mid = statistics.median(m)
        print(f"flush {name}: medians spread {(max(m) - min(m)) / mid:.2%}, stdev {statistics.stdev(m) / mid:.2%}",
              flush=True)

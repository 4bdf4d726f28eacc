"""The two speed levels of the 88 µs case (issue 15, H200, 2026-12-01): what moves with them?

tilelang-hopper b64 s4096 h16 (and FlashMLA at the same point) run at two levels ~2.9% (~1.5%) apart, each
lasting ~0.5-1 s, with the SM clock reading 1980 MHz throughout (docs/measurements.md). Two views:
  windows: 5 timings of 20 windows each (50 ms warm-up), every window's median, power and SM clock: how long a
           level lasts, and whether the power moves with it (window_levels.log has the medians only: the first run)
  nvml:    60 short timings (2 windows, back to back) with NVML polled every 5 ms on a thread: the SM and
           memory clocks, power and slowdown reasons over each timing
Run: PYTHONPATH=$PWD python notes/window_levels.py windows|nvml"""
import statistics
import sys
import threading
import time

import pynvml
import torch

from mlagate import config as config_mod
from mlagate.case import Case
from mlagate.config import Budget
from mlagate.measure import impls, timer
from mlagate.measure.harness import Inputs

TIMING = config_mod.load().timing
CASES = (Case("tilelang-hopper", 64, 4096, "float16", 16), Case("flash_mla", 64, 4096, "float16", 16))
device = torch.device("cuda", 0)

if sys.argv[1:] == ["windows"]:
    for case in CASES:
        inputs = Inputs(case, device)
        fn = impls.prepare(case.impl, inputs.tensors, device)
        for r in range(5):
            s = timer.time_gpu(fn, TIMING, Budget(warmup_ms=50, windows=20))
            i, levels = 0, []
            for w in s.windows:  # times_ms holds the kept windows' samples, in order
                if w["kept"]:
                    levels.append((statistics.median(s.times_ms[i:i + w["samples"]]) * 1e3, w["power_w"], w["sm_mhz"]))
                    i += w["samples"]
            print(case.impl, r, f"call median {statistics.median(s.times_ms) * 1e3:.2f}", "windows (µs/W/MHz)",
                  " ".join(f"{m:.1f}/{watts or 0:.0f}/{mhz or 0:.0f}" for m, watts, mhz in levels), flush=True)
    sys.exit(0)

pynvml.nvmlInit()
handle = pynvml.nvmlDeviceGetHandleByIndex(0)
polled, stop = [], threading.Event()


def poll():
    while not stop.is_set():
        polled.append((time.time(), pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                       pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
                       pynvml.nvmlDeviceGetPowerUsage(handle) / 1000, pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)))
        time.sleep(0.005)


threading.Thread(target=poll, daemon=True).start()
for case in CASES:
    inputs = Inputs(case, device)
    fn = impls.prepare(case.impl, inputs.tensors, device)
    for r in range(60):
        t0 = time.time()
        s = timer.time_gpu(fn, TIMING, Budget(warmup_ms=0, windows=2))
        seen = [p for p in polled if p[0] >= t0]
        print(f"{case.impl} {r:2d} t={t0 % 100:6.2f} median {statistics.median(s.times_ms) * 1e3:6.2f} µs  "
              f"sm {min(p[1] for p in seen)}-{max(p[1] for p in seen)} mem {min(p[2] for p in seen)}-{max(p[2] for p in seen)} "
              f"MHz  power {statistics.median(p[3] for p in seen):5.0f} W  reasons {sorted({p[4] for p in seen})}", flush=True)
stop.set()

"""Across a whole grid: how far apart are medians of the same case measured repeatedly in one run? (GPU)

Open question (repeated medians within 1% over the whole grid). Every dense fp16 case of the grid for the given
implementations (the vendor kernel at the head counts it has), ROUNDS rounds interleaved across all cases (A B C ...
A B C ...), each round one mlagate.measure.timer.time_gpu median per sampling length, with perf.yml's warm-up and
cold L2 every sample. A sampling length of MS milliseconds is round(MS / perf.yml's window_ms) windows; several
lengths are measured back to back on each case, their order rotated every round, so they see the same GPU. The GPU
idles 5 s first, as a fresh CI job finds it. Each measurement's wall-clock start and end are kept, to line up with
an `nvidia-smi -lms 50 --query-gpu=timestamp,clocks.sm --format=csv` log (lab/spread_vs_window.py reads both).
Prints spread = (max - min) / median per case; writes per sampling length the round medians ("mlagate"), samples and
wall times (the layout `mlagate calibrate --noise` reads) to OUT-<MS>.json, or to OUT itself when only one length is
measured; after every round, so a run cut short keeps its rounds.

    python -m lab.grid_spread OUT.json [--grid full] [--rounds 5] [--windows-ms 300 1000] [IMPL ...]
"""

import argparse
import json
import statistics
import time
from pathlib import Path


def out_path(out: Path, window_ms: float, several: bool) -> Path:
    return out.with_name(f"{out.stem}-{window_ms:g}{out.suffix}") if several else out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("impls", nargs="*", default=["tilelang-hopper", "flash_mla"])
    p.add_argument("--grid", default="full", help="a perf.yml grid")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--windows-ms", type=float, nargs="+",
                   help="sampling lengths in ms (default: the record budget's, windows x window_ms)")
    args = p.parse_args(argv)

    import torch

    from mlagate import config
    from mlagate.config import Budget
    from mlagate.measure import impls
    from mlagate.measure.environment import clocks
    from mlagate.measure.harness import Inputs
    from mlagate.measure.shards import point
    from mlagate.measure.timer import time_gpu

    cfg = config.load()
    timing = cfg.timing
    lengths = args.windows_ms or [timing.window_ms * timing.budget("record").windows]
    # dense cases only; cfg.cases gives the vendor kernel only the head counts it has
    cases = [c for c in cfg.cases(args.grid, args.impls, "cuda", ["float16"]) if not c.paged]
    device = torch.device("cuda", 0)
    inputs, launches = {}, {}
    for case in cases:
        inputs.setdefault(point(case), Inputs(case, device))  # one set of inputs per grid point
        launches[case] = impls.prepare(case.impl, inputs[point(case)].tensors, device)
    results = {w: {c.label(): {"mlagate": [], "samples": [], "wall": []} for c in cases} for w in lengths}

    print("clocks at start:", clocks(), flush=True)
    time.sleep(5)
    for r in range(args.rounds):
        for case in cases:
            for k in range(len(lengths)):
                window_ms = lengths[(r + k) % len(lengths)]
                budget = Budget(warmup_ms=timing.warmup_ms, windows=max(1, round(window_ms / timing.window_ms)))
                t0 = time.time()
                s = time_gpu(launches[case], timing, budget, device=device)
                entry = results[window_ms][case.label()]
                entry["mlagate"].append(statistics.median(s.times_ms))
                entry["samples"].append([round(t, 6) for t in s.times_ms])
                entry["wall"].append([t0, time.time()])
        print(f"round {r}: {clocks()}", flush=True)
        for window_ms in lengths:
            out_path(args.out, window_ms, len(lengths) > 1).write_text(json.dumps(results[window_ms]))
    for window_ms in lengths:
        print(f"sampling {window_ms:g} ms per measurement:")
        spreads = {}
        for label, r in results[window_ms].items():
            meds = r["mlagate"]
            mid = statistics.median(meds)
            spreads[label] = (max(meds) - min(meds)) / mid
            stdev = statistics.stdev(meds) / mid if len(meds) > 1 else float("nan")
            print(f"  {label:42s} median {mid * 1e3:9.1f} us  n {len(r['samples'][0]):5d}  "
                  f"spread {spreads[label]:6.2%}  stdev {stdev:6.2%}")
        worst = max(spreads, key=spreads.get)
        print(f"  spread across the grid: median {statistics.median(spreads.values()):.2%}, worst {spreads[worst]:.2%} "
              f"({worst}); {sum(v <= 0.01 for v in spreads.values())} of {len(spreads)} cases <= 1%")


if __name__ == "__main__":
    main()

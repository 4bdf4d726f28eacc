"""Would a record that interleaves a point's cases window by window repeat better? (GPU)

The 88-90 µs case (b64 s4096 h16) runs at two levels ~1.5-2.9% apart, each lasting 0.5-1 s, about one case's
record (10 windows of 50 ms): so a whole record of that case lands on one level, and two records of one commit
can differ by more than the ±0.5 pp the ladder asks (an open question; this study is written, not run yet).
Here the quick grid's gated and vendor cases at one point are "recorded" N times each way, alternating:
  sequential:  each case's 10 windows back to back (as the record does now);
  interleaved: window 1 of every case, then window 2 of every case, ... (each case warmed up first).
Per case and way: the spread (sd, max-min) of the N record medians, and of the seesaw / FlashMLA ratio.

    python -m lab.interleave_study [--records 8] [--batch 64]
"""

import argparse
import statistics

IMPLS = ("tilelang-seesaw", "tilelang-hopper", "flash_mla")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=8)
    p.add_argument("--batch", type=int, default=64)
    args = p.parse_args(argv)

    from mlagate import config as config_mod
    from mlagate.case import Case
    from mlagate.config import Budget
    from mlagate.measure import timer
    from mlagate.measure.environment import device
    from mlagate.measure.harness import Inputs, checked_launch

    cfg = config_mod.load()
    timing, record = cfg.timing, cfg.timing.budget("record")
    gpu = device()
    inputs = Inputs(Case(IMPLS[0], args.batch, 4096, "float16", 16), gpu)
    launches = {impl: checked_launch(impl, inputs, gpu)[0] for impl in IMPLS}
    one_window = Budget(warmup_ms=0, windows=1)
    medians = {(way, impl): [] for way in ("sequential", "interleaved") for impl in IMPLS}
    timer.time_gpu(launches[IMPLS[0]], timing, "record", device=gpu)  # the process's first warm-up
    for r in range(args.records):
        for impl, fn in launches.items():
            samples = timer.time_gpu(fn, timing, record, device=gpu)
            medians[("sequential", impl)].append(statistics.median(samples.times_ms))
        times = {impl: [] for impl in IMPLS}
        for impl, fn in launches.items():
            timer.time_gpu(fn, timing, Budget(warmup_ms=record.warmup_ms, windows=1), device=gpu)  # its warm-up
        for _ in range(record.windows):
            for impl, fn in launches.items():
                times[impl] += timer.time_gpu(fn, timing, one_window, device=gpu).times_ms
        for impl in IMPLS:
            medians[("interleaved", impl)].append(statistics.median(times[impl]))
        print(f"record {r + 1}: " + "  ".join(f"{w[:3]} {i} {medians[(w, i)][-1] * 1e3:.2f}" for w, i in medians),
              flush=True)
    for way in ("sequential", "interleaved"):
        for impl in IMPLS:
            m = medians[(way, impl)]
            mid = statistics.median(m)
            print(f"{way:11s} {impl:16s} median {mid * 1e3:7.2f} µs  sd {100 * statistics.pstdev(m) / mid:.2f}%  "
                  f"max-min {100 * (max(m) - min(m)) / mid:.2f}%", flush=True)
        ratio = [s / f for s, f in zip(medians[(way, "flash_mla")], medians[(way, "tilelang-seesaw")])]
        print(f"{way:11s} seesaw / FlashMLA (TFLOPs) median {statistics.median(ratio):.4f}  "
              f"max-min {100 * (max(ratio) - min(ratio)):.2f} pp", flush=True)


if __name__ == "__main__":
    main()

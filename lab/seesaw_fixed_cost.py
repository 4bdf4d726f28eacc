"""Is the seesaw's gap to FlashMLA at batch 64, 128 heads a fixed cost per launch or a cost per token? (GPU)

In one full-grid bench (2026-12-01, third session, bf16, b64 h128) the seesaw took 138.4 / 266.5 / 513.3 µs at 4096
/ 8192 / 16384 tokens and FlashMLA 127.9 / 258.9 / 516.8 µs: the seesaw ends level with FlashMLA at 16384 but sits
8% behind at 4096, as a fixed cost of ~10-20 µs a launch would. This times both (and tilelang-hopper) from 512 to
16384 tokens at the record budget and fits t = a + b * seqlen per implementation and dtype over 1024 tokens on: a is
the fixed cost per launch (µs), b the cost per token (ns). Open question (the seesaw at 128 heads and short caches;
the fixed costs there were measured before the arrival order).

    python -m lab.seesaw_fixed_cost [--batch 64] [--heads 128]
"""

import argparse
import statistics

SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
IMPLS = ("tilelang-seesaw", "tilelang-hopper", "flash_mla")


def fit(points):
    """Least squares t = a + b s over (s, t) points: (a, b)."""
    ss, ts = [s for s, _ in points], [t for _, t in points]
    s_mean, t_mean = statistics.fmean(ss), statistics.fmean(ts)
    b = sum((s - s_mean) * (t - t_mean) for s, t in points) / sum((s - s_mean) ** 2 for s in ss)
    return t_mean - b * s_mean, b


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--heads", type=int, default=128)
    args = p.parse_args(argv)

    from mlagate import config as config_mod
    from mlagate.case import Case
    from mlagate.measure import precompile, timer
    from mlagate.measure.environment import device
    from mlagate.measure.harness import Inputs, checked_launch

    timing = config_mod.load().timing
    cases = [Case(impl, args.batch, s, d, args.heads)
             for d in ("bfloat16", "float16") for s in SEQLENS for impl in IMPLS]
    precompile.precompile_cases(cases, precompile.default_jobs())
    gpu, medians = device(), {}
    for point in dict.fromkeys((c.seqlen, c.dtype) for c in cases):
        inputs = Inputs(Case(IMPLS[0], args.batch, point[0], point[1], args.heads), gpu)
        for impl in IMPLS:
            launch, _ = checked_launch(impl, inputs, gpu)
            medians[(impl, *point)] = statistics.median(timer.time_gpu(launch, timing, "record").times_ms) * 1e3
        print(f"s={point[0]:5d} {point[1]:9s} " + "  ".join(f"{i} {medians[(i, *point)]:8.2f} µs" for i in IMPLS),
              flush=True)
    for dtype in ("bfloat16", "float16"):
        for impl in IMPLS:
            a, b = fit([(s, medians[(impl, s, dtype)]) for s in SEQLENS if s >= 1024])
            print(f"{dtype:9s} {impl:16s} fixed {a:6.2f} µs  per token {b * 1e3:6.3f} ns", flush=True)


if __name__ == "__main__":
    main()

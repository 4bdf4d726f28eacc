"""Does a longer record budget shrink a case's median-to-median spread as 1 / sqrt(windows)? (GPU; --summary on a CPU)

The placement study (H100, 2026-12-06) put the ladder's untouched-case noise in the repeats of one input set in one
process (sd 0.47% of the median, against 0.38% between sets and 0.16% between processes): the median of one
record-budget measurement moves that much by itself. Here one process times one case --measurements times back to
back at perf.yml's `record` budget and keeps every sample; then k consecutive measurements are pooled (k x the
windows) and the sd of the pooled medians is read for each k. Sampling noise shrinks as 1 / sqrt(k); a floor that
does not shrink is something slower than the measurements (the clock, the host), which no budget buys off. Beside
it, the windows of one measurement: if their medians agree more closely than whole measurements do, each timing call
carries an offset of its own, and a case's budget spread over several calls would average it out.

    python -m lab.budget_study OUT.json [--impl tilelang-seesaw] [--batch 64] [--seqlen 4096] [--heads 16]
        [--dtype float16] [--measurements 60]
    python -m lab.budget_study --summary OUT.json   # the table of a recorded run
"""

import math
import statistics

POOLS = (1, 2, 3, 4, 6)


def pooled_spread(samples: list, k: int) -> tuple:
    """(sd of the medians of k consecutive measurements pooled, as % of the grand median; how many groups)."""
    groups = [sum(samples[i:i + k], []) for i in range(0, len(samples) - k + 1, k)]
    medians = [statistics.median(g) for g in groups]
    grand = statistics.median(m for s in samples for m in s)
    return (100 * statistics.stdev(medians) / grand if len(medians) > 1 else math.nan), len(medians)


def window_spread(run: dict) -> tuple:
    """(mean sd of the window medians within a measurement, the sd their mean would have if the windows were
    independent, the sd of the measurements' mean window medians), all % of the grand median."""
    samples, grand = run["samples_ms"], statistics.median(m for s in run["samples_ms"] for m in s)
    within, means = [], []
    for times, counts in zip(samples, run["window_samples"]):
        edges = [sum(counts[:i]) for i in range(len(counts) + 1)]
        medians = [100 * statistics.median(times[a:b]) / grand for a, b in zip(edges, edges[1:])]
        within.append(statistics.stdev(medians))
        means.append(statistics.fmean(medians))
    sd = statistics.fmean(within)
    return sd, sd / math.sqrt(statistics.fmean(len(c) for c in run["window_samples"])), statistics.stdev(means)


def table(run: dict) -> str:
    samples = run["samples_ms"]
    base, _ = pooled_spread(samples, 1)
    lines = [f"{run['case']}: {len(samples)} measurements at the record budget ({run['windows']} windows each)",
             f"{'pooled':>8} {'windows':>8} {'groups':>7} {'sd %':>7} {'x k=1':>7} {'1/sqrt(k)':>10}"]
    for k in POOLS:
        sd, groups = pooled_spread(samples, k)
        if groups > 1:
            lines.append(f"{k:>8} {k * run['windows']:>8} {groups:>7} {sd:>7.3f} {sd / base:>7.2f} "
                         f"{1 / math.sqrt(k):>10.2f}")
    within, independent, between = window_spread(run)
    lines.append(f"window medians within a measurement: sd {within:.3f}% (their mean would scatter {independent:.3f}% "
                 f"if windows were independent); the measurements' means scatter {between:.3f}%")
    return "\n".join(lines)


def measure(args) -> dict:
    from lab import case_name, warm_launch
    from mlagate.measure import timer

    launch, timing, gpu = warm_launch(args)
    taken = [timer.time_gpu(launch, timing, "record", device=gpu) for _ in range(args.measurements)]
    return {"case": case_name(args), "windows": timing.budgets["record"].windows,
            "samples_ms": [list(t.times_ms) for t in taken],
            "window_samples": [[w["samples"] for w in t.windows if w["kept"]] for t in taken],
            "window_sm_mhz": [[w["sm_mhz"] for w in t.windows if w["kept"]] for t in taken]}


def main(argv=None):
    from lab import case_parser, summary_or_run

    p = case_parser(__doc__)
    p.add_argument("--measurements", type=int, default=60)
    summary_or_run(p, p.parse_args(argv), measure, table)


if __name__ == "__main__":
    main()

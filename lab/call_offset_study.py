"""Would a case timed in several short calls repeat more closely than in one long one? (GPU; --summary on a CPU)

lab/budget_study.py found (H100, 2026-12-06) that each timing call carries an offset of its own: the windows of one
call agree 3-5x more closely than calls do, and calls are independent of each other. Here one process times one
case in rounds; each round takes the same windows in every mode, in turn: one call of all of them, calls of fewer
windows each, and one call after the GPU sat idle (whether the gap between calls sets the offset). Per mode, the
sd over rounds of the median of the round's pooled samples: if offsets are per call and independent, k calls
shrink it as 1 / sqrt(k) for the same windows, at the cost of k - 1 more warm-ups and estimates per case.

Every call warms up for the record budget's warm-up, except in the two "no warm-up" modes: one window per call with
only the call's own estimate (six calls) before it, back to back, or each after one window of another case
(--other-batch; its samples dropped), as a record that dealt its cases' windows round-robin would take them.

The runs in docs/measurements.md (2026-12-06, fourth and fifth sessions) took a call as time_gpu then did: one
estimate and plan for all its windows. Since then time_gpu plans each window from an estimate of its own (what the
no-warm-up mode's calls showed to repeat 4-5x more closely at 16 heads), so a call of several windows here is
several such calls after one warm-up, and the modes differ by their warm-ups and idle gaps only.

    python -m lab.call_offset_study OUT.json [--impl tilelang-seesaw] [--batch 64] [--seqlen 4096] [--heads 16]
        [--dtype float16] [--rounds 20] [--idle-ms 200] [--other-batch 128]
    python -m lab.call_offset_study --summary OUT.json   # the table of a recorded run
"""

import math
import statistics


def modes(windows: int) -> dict:
    """{mode: (calls, windows per call, idle ms before each call, warm-up before each call, another case's window
    before each call)}: the record's one call, the same windows split into halves... down to one window per call, the
    one call after an idle GPU (idle set by the caller), and one window per call without a warm-up, alone and
    between another case's windows."""
    splits = sorted({k for k in (2, windows // 2, windows) if 1 < k <= windows and windows % k == 0})
    table = {f"1x{windows}": (1, windows, 0, True, False)}
    table.update({f"{k}x{windows // k}": (k, windows // k, 0, True, False) for k in splits})
    table[f"1x{windows} after idle"] = (1, windows, None, True, False)
    table[f"{windows}x1 no warm-up"] = (windows, 1, 0, False, False)
    table[f"{windows}x1 no warm-up, between"] = (windows, 1, 0, False, True)
    return table


def spread(rounds: list) -> tuple:
    """(sd over rounds of each round's pooled median, mean sd of one call's median within a round), both as % of
    the grand median, for rounds = [[samples of each call] per round]."""
    grand = statistics.median(t for r in rounds for c in r for t in c)
    pooled = [statistics.median([t for c in r for t in c]) for r in rounds]
    within = [statistics.stdev([statistics.median(c) for c in r]) for r in rounds if len(r) > 1]
    return (100 * statistics.stdev(pooled) / grand,
            100 * statistics.fmean(within) / grand if within else math.nan)


def table(run: dict) -> str:
    lines = [f"{run['case']}: {run['rounds']} rounds, {run['windows']} windows per mode and round "
             f"(idle {run['idle_ms']} ms before the idle mode's call)",
             f"{'mode':>26} {'calls':>6} {'sd of pooled median %':>22} {'x one call':>11} {'1/sqrt(calls)':>14} "
             f"{'one call within a round %':>26}"]
    base = None
    for mode, (calls, *_) in run["modes"].items():
        sd, within = spread(run["samples_ms"][mode])
        base = base or sd
        lines.append(f"{mode:>26} {calls:>6} {sd:>22.3f} {sd / base:>11.2f} {1 / math.sqrt(calls):>14.2f} "
                     f"{'—' if math.isnan(within) else f'{within:.3f}':>26}")
    return "\n".join(lines)


def measure(args) -> dict:
    import argparse
    import time

    from lab import case_name, warm_launch
    from mlagate.config import Budget
    from mlagate.measure import timer

    launch, timing, gpu = warm_launch(args)
    other = warm_launch(argparse.Namespace(**{**vars(args), "batch": args.other_batch}))[0]
    record = timing.budget("record")
    plan = modes(record.windows)
    samples = {mode: [] for mode in plan}
    for _ in range(args.rounds):
        for mode, (calls, windows, idle, warm, between) in plan.items():
            taken = []
            for _ in range(calls):
                time.sleep((args.idle_ms if idle is None else idle) / 1e3)
                if between:
                    timer.time_gpu(other, timing, Budget(0, 1), device=gpu)
                budget = Budget(record.warmup_ms if warm else 0, windows)
                taken.append(list(timer.time_gpu(launch, timing, budget, device=gpu).times_ms))
            samples[mode].append(taken)
    return {"case": case_name(args), "rounds": args.rounds, "windows": record.windows, "idle_ms": args.idle_ms,
            "other_batch": args.other_batch, "modes": {m: list(v) for m, v in plan.items()}, "samples_ms": samples}


def main(argv=None):
    from lab import case_parser, summary_or_run

    p = case_parser(__doc__)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--idle-ms", type=float, default=200.0)
    p.add_argument("--other-batch", type=int, default=128)
    summary_or_run(p, p.parse_args(argv), measure, table)


if __name__ == "__main__":
    main()

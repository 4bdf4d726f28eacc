"""Is a case's record-to-record noise where its inputs sit in memory? (GPU; --summary on a CPU)

On the H100 (2026-12-06, one SM clock held) the ladder's untouched cases moved 0.12-0.55 pp rms from one record
to the next, each case on its own: neither the clock nor a drift the whole record shares. A record is one
process that allocates each point's inputs once. Here, --processes fresh processes, one after another; each
allocates --placements input sets of one case (the same seeded values, each a fresh allocation while the
earlier ones stay held, so each sits elsewhere) and times each set --repeats times at perf.yml's `record`
budget, the sets in turn. The medians' spread is read three ways (sd as % of the grand median): repeats of one
set, sets of one process (their means), processes (their means). Sets that differ as much as processes do
point at placement, which timing a case over several input sets would average out; processes that differ
beyond their sets point at something else a process holds. Writes every median and each set's cache address.

    python -m lab.placement_study OUT.json [--impl tilelang-seesaw] [--batch 64] [--seqlen 4096] [--heads 16]
        [--dtype float16] [--processes 6] [--placements 4] [--repeats 3]
    python -m lab.placement_study --summary OUT.json   # the table of a recorded run
"""

import argparse
import json
import math
import statistics
import subprocess
import sys


def spread(medians: list) -> dict:
    """{way: sd as % of the grand median} for medians[process][set][repeat]: "repeats" (pooled sd within each
    set), "sets" (pooled sd of the set means within each process), "processes" (sd of the process means)."""
    grand = statistics.median(m for p in medians for s in p for m in s)

    def pooled(groups) -> float:
        groups = [g for g in groups if len(g) > 1]
        dof = sum(len(g) - 1 for g in groups)
        return math.sqrt(sum(statistics.variance(g) * (len(g) - 1) for g in groups) / dof) if dof else math.nan

    set_means = [[statistics.fmean(s) for s in p] for p in medians]
    process_means = [statistics.fmean(m) for m in set_means]
    sd = {"repeats": pooled([s for p in medians for s in p]), "sets": pooled(set_means),
          "processes": statistics.stdev(process_means) if len(process_means) > 1 else math.nan}
    return {way: 100 * v / grand for way, v in sd.items()}


def table(run: dict) -> str:
    medians = run["medians_ms"]
    lines = [f"{run['case']}: {len(medians)} processes x {len(medians[0])} input sets x {len(medians[0][0])} "
             "repeats at the record budget"]
    for n, p in enumerate(medians, 1):
        lines.append(f"  process {n}: " + "  ".join("/".join(f"{m * 1e3:.2f}" for m in s) for s in p) + " µs")
    lines.append("sd, % of the median: " + ", ".join(f"{way} {v:.3f}" for way, v in spread(medians).items()))
    return "\n".join(lines)


def child(args) -> dict:
    """One process: its input sets, each timed ``repeats`` times; {medians_ms: [set][repeat], addresses: [set]}."""
    from mlagate import config
    from mlagate.case import Case
    from mlagate.measure import timer
    from mlagate.measure.environment import device
    from mlagate.measure.harness import Inputs, checked_launch

    timing, gpu = config.load().timing, device()
    case = Case(args.impl, args.batch, args.seqlen, args.dtype, args.heads)
    held = [Inputs(case, gpu) for _ in range(args.placements)]  # all held: no set reuses another's memory
    launches = [checked_launch(case.impl, inputs, gpu)[0] for inputs in held]
    timer.time_gpu(launches[0], timing, "record", device=gpu)  # the process's first warm-up, as a record's
    medians = [[] for _ in launches]
    for _ in range(args.repeats):
        for i, launch in enumerate(launches):
            medians[i].append(statistics.median(timer.time_gpu(launch, timing, "record", device=gpu).times_ms))
    return {"medians_ms": medians, "addresses": [hex(inputs.tensors[2].data_ptr()) for inputs in held]}


def main(argv=None) -> None:
    from lab import case_name, case_parser

    p = case_parser(__doc__)
    p.add_argument("--processes", type=int, default=6)
    p.add_argument("--placements", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.summary:
        with open(args.summary) as f:
            print(table(json.load(f)))
        return
    if args.child:
        print(json.dumps(child(args)))
        return
    if not args.out:
        p.error("give OUT.json (or --summary OUT.json)")
    forwarded = [f"--{k}={getattr(args, k)}" for k in ("impl", "batch", "seqlen", "heads", "dtype", "placements",
                                                       "repeats")]
    runs = [json.loads(subprocess.run([sys.executable, "-m", "lab.placement_study", "--child", *forwarded],
                                      check=True, capture_output=True, text=True).stdout.splitlines()[-1])
            for _ in range(args.processes)]
    run = {"case": case_name(args),
           "medians_ms": [r["medians_ms"] for r in runs], "addresses": [r["addresses"] for r in runs]}
    with open(args.out, "w") as f:
        json.dump(run, f, indent=1)
    print(table(run))


if __name__ == "__main__":
    main()

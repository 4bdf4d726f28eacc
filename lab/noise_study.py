"""How far apart are medians of the same case measured repeatedly? (GPU; --summary on a CPU)

The data `mlagate calibrate` simulates the gate on (its --noise default,
tests/fixtures/h200/noise_study_2026-11-29.json, came from this study on an H200); a new runner, an MI300X
above all (never measured), needs its own. Four cases, ROUNDS rounds interleaved across them (A B C D A B C D
...), each round one median, by two methods: "mlagate", mlagate.measure.timer.time_gpu at perf.yml's `record`
budget (cold L2 every sample), and "do_bench", triton.testing.do_bench's defaults (25 ms warm-up, 100 ms, its own
cache flush). The GPU idles 5 s first, as a fresh CI job finds it. Prints per case and method the median,
spread = (max - min) / median and the stdev of the round medians; writes every round's samples to OUT
(per case: "mlagate" and "do_bench" medians, "samples").

    python -m lab.noise_study OUT.json [--rounds 15]
    python -m lab.noise_study --summary tests/fixtures/h200/noise_study_2026-11-29.json   # the table of a recorded run
"""

import argparse
import json
import statistics

METHODS = ("do_bench", "mlagate")
CASES = [("tilelang-hopper", 128, 8192, "float16"), ("tilelang-hopper", 64, 1024, "float16"),
         ("flash_mla", 64, 4096, "float16"), ("triton", 128, 2048, "float16")]


def measure(rounds: int) -> dict:
    import time

    import torch
    import triton.testing

    from mlagate import config
    from mlagate.case import Case
    from mlagate.measure import impls
    from mlagate.measure.environment import clocks
    from mlagate.measure.harness import Inputs
    from mlagate.measure.timer import time_gpu

    timing = config.load().timing
    device = torch.device("cuda", 0)
    cases = [Case(*c) for c in CASES]
    launches = {case: impls.prepare(case.impl, Inputs(case, device).tensors, device) for case in cases}
    results = {c.label(): {"mlagate": [], "do_bench": [], "samples": []} for c in cases}
    print("clocks at start:", clocks(), flush=True)
    time.sleep(5)  # let the GPU drop back to idle clocks, as a fresh CI job finds it
    for method in METHODS:
        for _ in range(rounds):
            for case, launch in launches.items():
                entry = results[case.label()]
                if method == "mlagate":
                    s = time_gpu(launch, timing, "record", device=device)
                    entry["mlagate"].append(statistics.median(s.times_ms))
                    entry["samples"].append(list(s.times_ms))
                else:
                    entry["do_bench"].append(triton.testing.do_bench(launch, return_mode="median"))
        time.sleep(5)
    print("clocks at end:", clocks())
    return results


def table(results: dict) -> None:
    print(f"{'case':42s} {'method':9s} {'median us':>10s} {'spread':>7s} {'stdev':>6s}")
    for label, r in results.items():
        for method in METHODS:
            meds = r[method]
            mid = statistics.median(meds)
            print(f"{label:42s} {method:9s} {mid * 1e3:10.1f} {(max(meds) - min(meds)) / mid:7.2%} "
                  f"{statistics.stdev(meds) / mid:6.2%}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", nargs="?", help="where to write the rounds (JSON)")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--summary", metavar="RECORDED", help="print the table of a recorded run instead (no GPU)")
    args = p.parse_args(argv)
    if args.summary:
        with open(args.summary) as f:
            return table(json.load(f))
    if not args.out:
        p.error("give OUT (where the rounds go), or --summary RECORDED")
    results = measure(args.rounds)
    table(results)
    with open(args.out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()

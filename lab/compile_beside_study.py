"""Does compiling TileLang kernels beside the timing move the timings? (GPU; measure.precompile.ahead)

A record compiles its kernels in parallel processes (lower CPU priority) while its worker times the cases.
Here one process times the quick grid's gated and vendor cases round after round, at the record budget,
in phases that alternate: A, a compile pool of precompile.default_jobs() processes compiling a share of the
full grid's TileLang kernels into an empty TileLang cache (as a cold record does); B, nothing beside. The
phases run A B B A (as many rounds in each B as in the A before), so a steady drift of the GPU over the run
cancels between the pairs instead of reading as the compile's effect. Per case: the median of each phase's
per-timing medians, A against B, and the calls not timed because the host fell behind. Open question
(whether compiling beside the timing moves any timing; written, not run).

    python -m lab.compile_beside_study [--pairs 2] [--kernels 60]
"""

import argparse
import os
import statistics
import tempfile
import threading
import time


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=2)
    p.add_argument("--kernels", type=int, default=60, help="the full grid's first N fp16 TileLang kernels")
    args = p.parse_args(argv)

    import torch

    from mlagate import config as config_mod
    from mlagate.kernels import mla_decode
    from mlagate.measure import impls, precompile, timer
    from mlagate.measure.harness import Inputs

    cfg = config_mod.load()
    device = torch.device("cuda", 0)
    arch = mla_decode.device_arch(device)
    timed = [c for c in cfg.cases("quick", cfg.implementations, "cuda", ["float16"])
             if not c.paged and cfg.budget_for(c.impl, "cuda") == "record"]
    launches = {}
    for case in timed:  # every timed kernel compiled and checked before the first phase
        try:
            launches[case] = impls.prepare(case.impl, Inputs(case, device).tensors, device)
        except impls.Unavailable as e:
            print(f"{case.label()}: {e}")
    # a cache of its own: the pool compiles everything it is given, as in a cold record
    os.environ["TILELANG_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilelang-cache-study-")
    grid = [c for c in cfg.cases("full", cfg.implementations, "cuda", ["float16"])
            if impls.case_kernel(c, arch) is not None]
    kernels = list(dict.fromkeys(impls.case_kernel(c, arch) for c in grid))[:args.kernels]
    shares = [kernels[i::args.pairs] for i in range(args.pairs)]
    jobs = precompile.default_jobs()
    print(f"{len(launches)} cases timed; {len(kernels)} kernels for the pool, {jobs} processes", flush=True)
    rows = []  # (phase, case, median_ms, calls not timed)

    def one_round(phase):
        for case, fn in launches.items():
            s = timer.time_gpu(fn, cfg.timing, "record", device=device)
            rows.append((phase, case, statistics.median(s.times_ms), s.dropped))

    rounds = None
    for pair, share in enumerate(shares, 1):
        if pair % 2 == 0:  # A B, then B A: the B before this A runs as many rounds as the last A
            for _ in range(rounds):
                one_round(f"B{pair}")
        pool = threading.Thread(target=precompile.precompile, args=(share, jobs), kwargs={"echo": lambda line: None})
        t0 = time.monotonic()
        pool.start()
        rounds = 0
        while pool.is_alive():
            one_round(f"A{pair}")
            rounds += 1
        print(f"pair {pair}: {len(share)} kernels compiled in {time.monotonic() - t0:.0f} s beside {rounds} rounds",
              flush=True)
        if pair % 2:
            for _ in range(rounds):
                one_round(f"B{pair}")
    for case in launches:
        line = []
        for pair in range(1, args.pairs + 1):
            a = [m for ph, c, m, _ in rows if c == case and ph == f"A{pair}"]
            b = [m for ph, c, m, _ in rows if c == case and ph == f"B{pair}"]
            line.append(f"pair {pair}: A {statistics.median(a) * 1e3:.2f} µs vs B {statistics.median(b) * 1e3:.2f} µs "
                        f"({100 * (statistics.median(a) / statistics.median(b) - 1):+.2f}%, n={len(a)})")
        lost = {ph: sum(d for p, c, _, d in rows if c == case and p.startswith(ph)) for ph in "AB"}
        print(f"{case.label()}: " + "; ".join(line) + f"; calls not timed A {lost['A']}, B {lost['B']}", flush=True)


if __name__ == "__main__":
    main()

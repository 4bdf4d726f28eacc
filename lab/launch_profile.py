"""Is the seesaw's extra ~5 µs per launch (against FlashMLA, b64 h128) inside its kernel or around it? (GPU)

Each implementation's call is timed as the record times it (mlagate.measure.timer.time_gpu: events around a
call after an L2 flush), then profiled (torch.profiler, CUPTI kernel records) over the same flushed calls: per
call, the kernels' own time, the span from the first kernel's start to the last one's end, and the gap between
the flush's end and the first kernel's start (launch latency; FlashMLA launches with PDL). Open question
(the seesaw at 128 heads and short caches).

    python -m lab.launch_profile [--batch 64] [--heads 128] [--seqlen 1024 --seqlen 4096] [--dtype bfloat16]
"""

import argparse
import statistics

IMPLS = ("tilelang-seesaw", "flash_mla")
CALLS = 40


def per_call(kernels):
    """[(kernel µs, span µs, gap after the flush µs, names)] per flushed call, from (name, start µs, end µs) in
    start order: a flush (the timer's buffer.zero_(), a fill kernel or a memset) opens each call."""
    calls, flushed_at, current = [], None, []
    for name, start, end in [*kernels, ("end", None, None)]:
        if name == "end" or any(word in name.lower() for word in ("fill", "zero", "memset")):
            if current and flushed_at is not None:
                calls.append((sum(e - b for _, b, e in current), current[-1][2] - current[0][1],
                              current[0][1] - flushed_at, tuple(n[:60] for n, _, _ in current)))
            current, flushed_at = [], end
        else:
            current.append((name, start, end))
    return calls


def profiled(launch, flush):
    """per_call over CALLS flushed calls, queued behind a spin so the GPU never waits for the host."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(5):
        flush()
        launch()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.cuda._sleep(50_000_000)  # ~25 ms: the host queues every call before the GPU reaches the first
        for _ in range(CALLS):
            flush()
            launch()
        torch.cuda.synchronize()
    return per_call(sorted(((e.name, e.time_range.start, e.time_range.end) for e in prof.events()
                            if e.device_type.name == "CUDA" and e.time_range.elapsed_us() > 0), key=lambda k: k[1]))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--heads", type=int, default=128)
    p.add_argument("--seqlen", type=int, action="append")
    p.add_argument("--dtype", default="bfloat16")
    args = p.parse_args(argv)

    from mlagate import config as config_mod
    from mlagate.case import Case
    from mlagate.measure import precompile, timer
    from mlagate.measure.environment import device
    from mlagate.measure.harness import Inputs, checked_launch

    timing, gpu = config_mod.load().timing, device()
    seqlens = args.seqlen or [1024, 4096]
    cases = [Case(impl, args.batch, s, args.dtype, args.heads) for s in seqlens for impl in IMPLS]
    precompile.precompile_cases(cases, precompile.default_jobs())
    flush = timer._Flusher(gpu, True)
    for s in seqlens:
        inputs = Inputs(Case(IMPLS[0], args.batch, s, args.dtype, args.heads), gpu)
        for impl in IMPLS:
            launch, _ = checked_launch(impl, inputs, gpu)
            event = statistics.median(timer.time_gpu(launch, timing, "record").times_ms) * 1e3
            calls = profiled(launch, flush)
            kernel, span, gap = (statistics.median(c[i] for c in calls) for i in range(3))
            names = sorted({n for c in calls for n in c[3]})
            print(f"s={s:5d} {args.dtype} {impl:16s} event {event:7.2f} µs | kernels {kernel:7.2f}  span {span:7.2f}  "
                  f"gap after flush {gap:5.2f} µs ({len(calls)} calls; {len(calls[0][3])} kernels: {', '.join(names)})",
                  flush=True)


if __name__ == "__main__":
    main()

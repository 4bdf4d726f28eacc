"""GPU timing: one function for every path, device events, a cold last-level cache per call.

Shaped like ``triton.testing.do_bench`` and FlashInfer's ``bench_gpu_time``: a budget
in milliseconds, raw samples returned, summarising left to the caller. A case is timed
in windows of back-to-back calls (perf.yml ``timing``); the SM clock and power are read
while the GPU runs each window, and a window taken while the GPU throttled is dropped
(``measure.clocks``) and kept aside in the samples.
"""

import math
import time

from mlagate import hardware
from mlagate.case import Samples
from mlagate.config import Budget, Timing
from mlagate.measure import clocks


def last_level_cache_bytes(device) -> int:
    import torch

    from mlagate.kernels.mla_decode import device_arch

    l2 = torch.cuda.get_device_properties(device).L2_cache_size
    return max(l2, hardware.LAST_LEVEL_CACHE_BYTES.get(hardware.arch_key(device_arch(device)), 0))


class _Flusher:
    """Writes a buffer of twice the last-level cache, so no input stays cached."""

    def __init__(self, device, enabled: bool):
        import torch

        self.nbytes = 2 * last_level_cache_bytes(device) if enabled else 0
        self.buffer = torch.empty(self.nbytes, dtype=torch.int8, device=device) if enabled else None

    def __call__(self):
        if self.buffer is not None:
            self.buffer.zero_()


class _Lead:
    """Keeps the GPU ahead of the host, so no sample holds host time.

    A call is timed only if the host had queued it before the GPU reached its
    start event (the event is still pending once the call returns). Otherwise
    the GPU sat idle after the start event while Python launched the call: a
    short kernel behind a slow wrapper would measure the host (docs/measurements.md,
    host-side costs). Such a call is dropped
    and a spin kernel, twice as long as the last, is queued to regain a lead.
    """

    FIRST_CYCLES, MAX_CYCLES = 200_000, 1 << 33  # ~0.1 ms, ~4 s at 2 GHz

    def __init__(self):
        self.cycles = self.FIRST_CYCLES

    def sleep(self):
        import torch

        torch.cuda._sleep(self.cycles)

    def timed(self, flush, call):
        """Queue one flushed, timed call; (start, end) events, or None if dropped."""
        import torch

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        flush()
        start.record()
        call()
        end.record()
        if not start.query():
            return start, end
        self.cycles = min(2 * self.cycles, self.MAX_CYCLES)
        self.sleep()
        return None


def _graph(fn):
    """Capture fn in a CUDA graph; replays skip the host launch path."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # kernels compiled and workspaces allocated outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


POLL_S = 0.002
_warm = set()  # devices this process has warmed up for timing.warmup_ms
_probes = {}


def rewarm(device) -> None:
    """The GPU sat idle (a worker waited for a kernel's compile): this process's next case on it warms up for
    timing.warmup_ms, as its first did."""
    import torch

    _warm.discard(torch.device(device).index)


def probe(device) -> clocks.ClockProbe:
    """This process's clock probe for a torch device (opened once)."""
    if device.index not in _probes:
        _probes[device.index] = clocks.open_probe(device.index)
    return _probes[device.index]


def window_plan(estimate_ms: float, timing: Timing, windows: int) -> tuple:
    """(calls per window, stride): every stride-th call of a window is timed, at most
    timing.samples_per_window of them, so short kernels keep the same load without
    storing thousands of samples; a long kernel runs past window_ms for the windows
    to hold timing.min_samples between them."""
    calls = max(int(timing.window_ms / estimate_ms), math.ceil(timing.min_samples / windows))
    return calls, max(1, math.ceil(calls / timing.samples_per_window))


def time_gpu(fn, timing: Timing, budget: str | Budget = "record", *, device=None) -> Samples:
    """Time ``fn()`` with device events under a named perf.yml budget.

    ``budget.windows`` windows of ``timing.window_ms`` of back-to-back calls, every one after
    a cache flush when ``timing.cold_l2``, each planned from an estimate of its own; the first
    after a warm-up of the budget's ``warmup_ms`` (``timing.warmup_ms`` for a process's first
    case on a device). A call the GPU reached before the host had queued it is not timed
    (``Samples.dropped``): its sample would hold host time.
    """
    import torch

    spend = timing.budget(budget) if isinstance(budget, str) else budget
    if not torch.cuda.is_available():
        raise RuntimeError("time_gpu needs a CUDA or ROCm device; none is available")
    device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    flush = _Flusher(device, timing.cold_l2)
    call = _graph(fn) if timing.cuda_graph else fn
    clock = probe(device)

    windows, dropped, prepared = [], 0, 0
    for w in range(spend.windows):
        # Each window is a call of its own (its estimate, plan and lead): a case's windows then carry offsets of their
        # own, where one call's windows share one. Ten such windows of a 16-head case repeated 4-5x more closely
        # than one call of ten (docs/measurements.md, 2026-12-06, fifth session).
        estimate_ms = _estimate(call, flush)
        prepared += 6
        if w == 0:  # one warm-up per case; the process's first case on a device warms for timing.warmup_ms
            warmup_ms = spend.warmup_ms if device.index in _warm else max(spend.warmup_ms, timing.warmup_ms)
            _warm.add(device.index)
            prepared += _warm_up(call, flush, int(warmup_ms / estimate_ms))
        times, reading, misses = _window(call, flush, clock, *window_plan(estimate_ms, timing, spend.windows))
        dropped += misses
        windows.append((times, reading))
    props = torch.cuda.get_device_properties(device)
    return _samples(windows, timing, budget if isinstance(budget, str) else "", flush.nbytes, prepared,
                    props.name, dropped, uuid=str(getattr(props, "uuid", "")))


def _estimate(call, flush) -> float:
    """One call's time (with its flush) from five, after a first call that may compile."""
    import torch

    call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        flush()
        call()
    end.record()
    end.synchronize()
    return max(start.elapsed_time(end) / 5, 1e-3)


def _warm_up(call, flush, calls: int) -> int:
    for _ in range(calls):
        flush()
        call()
    return calls


def _window(call, flush, clock, calls: int, stride: int) -> tuple:
    """One window of ``calls`` back-to-back calls, every stride-th timed: (times ms, the clock while it ran,
    calls dropped for the lead)."""
    import torch

    quota = math.ceil(calls / stride)  # timed calls; a call dropped for the lead is made up
    lead, pairs, readings, misses, i = _Lead(), [], [], 0, 0
    next_read = time.perf_counter() + POLL_S  # not at once: the GPU may still be idle before the window
    lead.sleep()
    while len(pairs) < quota and misses <= quota:
        if time.perf_counter() >= next_read:  # while queuing, the GPU runs this window's earlier calls
            readings.append(clock.read())
            next_read += POLL_S
        i += 1
        if (i - 1) % stride:
            flush()
            call()
            continue
        pair = lead.timed(flush, call)
        if pair:
            pairs.append(pair)
        else:
            misses += 1
    done = torch.cuda.Event()
    done.record()
    while not done.query():  # the GPU is still in this window
        readings.append(clock.read())
        time.sleep(POLL_S)
    done.synchronize()  # no reading after this: an idle GPU's clock says nothing of the window
    return [s.elapsed_time(e) for s, e in pairs], clocks.summarize(readings), misses


def _samples(windows, timing, budget, flush_bytes, warmup_calls, device_name, dropped, uuid="") -> Samples:
    drop = clocks.dropped_windows([w for _, w in windows], timing.max_clock_drop)
    if sum(len(times) for (times, _), d in zip(windows, drop) if not d) < timing.min_samples:
        drop = [False] * len(windows)  # the gate needs min_samples more than a clean clock
    kept = tuple(t for (times, _), d in zip(windows, drop) if not d for t in times)
    if len(kept) < timing.min_samples:
        raise RuntimeError(f"only {len(kept)} calls could be timed (timing.min_samples is {timing.min_samples}): "
                           "the host never got ahead of the GPU")
    info = tuple({"samples": len(times), "sm_mhz": w.sm_mhz, "power_w": w.power_w, "throttle": list(w.throttle),
                  "kept": not d} for (times, w), d in zip(windows, drop))
    return Samples(kept, "cuda-graph" if timing.cuda_graph else "cuda-event", flush_bytes, warmup_calls,
                   device_name, dropped, budget, info,
                   tuple(t for (times, _), d in zip(windows, drop) if d for t in times), uuid)

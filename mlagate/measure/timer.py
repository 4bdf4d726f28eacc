"""GPU timing: one function, device events, a cold last-level cache per sample.

Shaped like ``triton.testing.do_bench`` and FlashInfer's ``bench_gpu_time``:
budgets in milliseconds, raw samples returned, summarising left to the caller.
"""

from mlagate import hardware
from mlagate.case import Samples


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


def _check_options(warmup_ms, rep_ms, min_samples, max_samples):
    if warmup_ms < 0:
        raise ValueError(f"warmup_ms must be >= 0, got {warmup_ms}")
    if rep_ms <= 0:
        raise ValueError(f"rep_ms must be > 0, got {rep_ms}")
    if min_samples < 1:
        raise ValueError(f"min_samples must be >= 1, got {min_samples}")
    if max_samples < min_samples:
        raise ValueError(f"max_samples ({max_samples}) must be >= min_samples ({min_samples})")


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


def time_gpu(fn, *, warmup_ms: float = 25, rep_ms: float = 100, min_samples: int = 10, max_samples: int = 1000,
             cold_l2: bool = True, cuda_graph: bool = False, device=None) -> Samples:
    """Time ``fn()`` with device events, one event pair per call.

    Warm-up runs for ``warmup_ms`` so clocks are steady; then at least
    ``min_samples`` and at most ``max_samples`` calls fill ``rep_ms``. With
    ``cold_l2`` a buffer of twice the last-level cache is written before every
    call, outside the timed region. ``cuda_graph`` replays a captured graph.
    A call the GPU reached before the host had queued it is not timed
    (``Samples.dropped``): its sample would hold host time.
    """
    import torch

    _check_options(warmup_ms, rep_ms, min_samples, max_samples)
    if not torch.cuda.is_available():
        raise RuntimeError("time_gpu needs a CUDA or ROCm device; none is available")
    device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    flush = _Flusher(device, cold_l2)
    call = _graph(fn) if cuda_graph else fn

    # Estimate one call (with its flush) from five, after a first call that may compile.
    call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        flush()
        call()
    end.record()
    end.synchronize()
    estimate_ms = max(start.elapsed_time(end) / 5, 1e-3)

    warmup_calls = int(warmup_ms / estimate_ms)
    for _ in range(warmup_calls):
        flush()
        call()

    n = min(max(int(rep_ms / estimate_ms), min_samples), max_samples)
    lead, pairs, dropped = _Lead(), [], 0
    lead.sleep()
    while len(pairs) < n and dropped < n:
        pair = lead.timed(flush, call)
        if pair:
            pairs.append(pair)
        else:
            dropped += 1
    torch.cuda.synchronize()
    if len(pairs) < min_samples:  # n >= min_samples
        raise RuntimeError(f"only {len(pairs)} of {n} calls could be timed: the host never got ahead of the GPU")
    times = tuple(s.elapsed_time(e) for s, e in pairs)
    return Samples(times, "cuda-graph" if cuda_graph else "cuda-event", flush.nbytes, warmup_calls + 6,
                   torch.cuda.get_device_name(device), dropped)


class EventClock:
    """A timer for asv: reads cumulative device-event seconds, not wall time.

    asv calls ``timer()`` around each batch of benchmark calls; a benchmark that
    runs its kernel through :meth:`run` advances this clock by the kernel's event
    time alone, so asv's samples are GPU times (flush excluded) that asv stores
    and compares like any other time samples.
    """

    def __init__(self, cold_l2: bool = True):
        self.cold_l2 = cold_l2
        self.total_s = 0.0
        self._flush = None
        self._lead = _Lead()

    def __call__(self) -> float:
        return self.total_s

    def run(self, fn):
        import torch

        if self._flush is None:
            self._flush = _Flusher(torch.cuda.current_device(), self.cold_l2)
        self._lead.sleep()  # each sample starts from an idle GPU
        for _ in range(64):
            pair = self._lead.timed(self._flush, fn)
            if pair:
                pair[1].synchronize()
                self.total_s += pair[0].elapsed_time(pair[1]) / 1e3
                return
        raise RuntimeError("the host never got ahead of the GPU in 64 tries")

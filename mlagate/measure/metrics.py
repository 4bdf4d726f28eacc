"""Work and traffic of one MLA decode, with FlashMLA's and aiter's formulas."""

from dataclasses import replace

from mlagate.case import RunStatus
from mlagate.hardware import ELEMENT_BYTES
from mlagate.measure import summary
from mlagate.measure.shards import point


def flops(batch: int, heads: int, seqlen: int, s_q: int = 1, *, dim: int = 512, pe_dim: int = 64) -> int:
    """Q·Kᵀ over dim + pe_dim plus P·V over dim for s_q x heads query rows: 2·b·s_q·h·s·(576 + 512).

    Every row counts the whole cache, as FlashMLA's benchmark does: the causal triangle among the s_q new
    tokens masks at most s_q - 1 positions of a row (s_q <= 8 of thousands), under 0.2% at 4096 tokens."""
    return 2 * batch * s_q * heads * seqlen * ((dim + pe_dim) + dim)


def bytes_moved(batch: int, heads: int, seqlen: int, dtype: str, s_q: int = 1, *, kv_dtype: str | None = None,
                dim: int = 512, pe_dim: int = 64) -> int:
    """Each input read once and the output written once: the KV cache (shared by a sequence's s_q query
    tokens) in ``kv_dtype`` (the query's unless given: an fp8 cache reads one byte an element), q and out of
    s_q x heads rows in ``dtype``. The per-tensor fp8 scale is one float, left out."""
    rows = batch * s_q * heads
    cache = batch * seqlen * (dim + pe_dim) * ELEMENT_BYTES[kv_dtype or dtype]
    return cache + (rows * (dim + pe_dim) + rows * dim) * ELEMENT_BYTES[dtype]


def tflops(work: int, latency_ms: float) -> float:
    return work / (latency_ms * 1e-3) / 1e12


def gbps(traffic: int, latency_ms: float) -> float:
    return traffic / (latency_ms * 1e-3) / 1e9


def roofline_fraction(work: int, traffic: int, latency_ms: float, peak_tflops: float, peak_tbps: float) -> float:
    """Achieved share of the roofline: the floor time (the slower of compute and
    memory at peak rates) over the measured time."""
    floor_s = max(work / (peak_tflops * 1e12), traffic / (peak_tbps * 1e12))
    return floor_s / (latency_ms * 1e-3)


def add_metrics(results, *, peaks=None, vendor=None) -> list:
    """Latency stats, TFLOPs, GB/s, share of roofline and ratio to the vendor: ``vendor`` an implementation's
    name, or a function of a cache dtype giving it (Platform.vendor_for: an fp8 cache may have another)."""
    out = []
    for r in results:
        times = r.samples.times_ms if r.samples else ()
        if r.status == RunStatus.OK and times:
            s, c = summary.describe(times), r.case
            work = flops(c.batch, c.heads, c.seqlen, c.q_len)
            traffic = bytes_moved(c.batch, c.heads, c.seqlen, c.dtype, c.q_len, kv_dtype=c.kv_dtype)
            r = replace(r, median_ms=s["median"], iqr_ms=s["iqr"], ci99_ms=(s["ci_low"], s["ci_high"]),
                        outliers=s["outliers"], n=s["n"], tflops=tflops(work, s["median"]),
                        gbps=gbps(traffic, s["median"]),
                        roofline=roofline_fraction(work, traffic, s["median"], peaks.tflops, peaks.tbps)
                        if peaks else None)
        out.append(r)
    if vendor:  # same point (query and cache dtypes included: like with like), same GPU
        vendor_of = vendor if callable(vendor) else lambda kv_dtype: vendor
        best = {(point(r.case), r.gpu): r.tflops for r in out if r.case.impl == vendor_of(r.case.kv_dtype)}
        for i, r in enumerate(out):
            v = best.get((point(r.case), r.gpu))
            if r.tflops and v:
                out[i] = replace(r, vendor_ratio=r.tflops / v)
    return out

"""Work and traffic of one MLA decode, with FlashMLA's and aiter's formulas."""

from mlagate.hardware import ELEMENT_BYTES


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

"""Work and traffic of one MLA decode, with FlashMLA's and aiter's formulas."""

ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}


def flops(batch: int, heads: int, seqlen: int, dim: int = 512, pe_dim: int = 64) -> int:
    """Q·Kᵀ over dim + pe_dim plus P·V over dim: 2·b·h·s·(576 + 512)."""
    return 2 * batch * heads * seqlen * ((dim + pe_dim) + dim)


def bytes_moved(batch: int, heads: int, seqlen: int, dtype: str, dim: int = 512, pe_dim: int = 64) -> int:
    """Each input read once and the output written once: the KV cache, q, out."""
    return (batch * seqlen * (dim + pe_dim) + batch * heads * (dim + pe_dim) + batch * heads * dim) \
        * ELEMENT_BYTES[dtype]


def tflops(work: int, latency_ms: float) -> float:
    return work / (latency_ms * 1e-3) / 1e12


def gbps(traffic: int, latency_ms: float) -> float:
    return traffic / (latency_ms * 1e-3) / 1e9


def roofline_fraction(work: int, traffic: int, latency_ms: float, peak_tflops: float, peak_tbps: float) -> float:
    """Achieved share of the roofline: the floor time (the slower of compute and
    memory at peak rates) over the measured time."""
    floor_s = max(work / (peak_tflops * 1e12), traffic / (peak_tbps * 1e12))
    return floor_s / (latency_ms * 1e-3)

"""Measure one case in this process: inputs, correctness, then timing.

A wrong implementation is reported as failed and never timed; one that cannot
run here is skipped with the reason. Used by the grid runner's worker, the asv
benchmarks and the gate's confirmation alike, so all time the same way.
"""

import torch

from mlagate.case import Case, CaseResult, RunStatus
from mlagate.config import Timing
from mlagate.kernels import mla_decode
from mlagate.measure import impls
from mlagate.measure.environment import VENDORS
from mlagate.measure.kernels_run import kernels_run
from mlagate.measure.layouts import split_scale
from mlagate.measure.shards import point
from mlagate.measure.timer import time_gpu
from mlagate.progress import spending

RTOL = ATOL = 0.01
SEED = 0


class WrongResult(Exception):
    """The implementation's output does not match the reference."""


class Inputs:
    """Seeded random inputs and their float32 reference, shared by all implementations of one
    grid point (built once, on the GPU): a dense batch, or a workload's paged one (impls.Paged:
    its lengths, pages handed out in a shuffled order)."""

    def __init__(self, case: Case, device):
        self.point = point(case)
        # an fp8 cache (kernels/: Shape kv_dtype, its inputs with a per-tensor kv_scale); a 16-bit one as before
        fp8 = {"kv_dtype": case.kv_dtype} if case.kv_dtype != case.dtype else {}
        if case.paged:
            from mlagate.kernels import mla_decode_paged

            self.tensors = impls.Paged(*mla_decode_paged.random_paged_inputs(
                case.batch, case.heads, case.lengths, case.page_size, case.dtype, device=device, seed=SEED,
                s_q=case.q_len, **fp8))
            p = self.tensors  # the reference reads the dequantized cache (kv_scale None: a 16-bit one)
            self.expected, _ = mla_decode_paged.reference_paged(p.q, p.q_pe, p.kv_cache, p.k_pe_cache, p.block_table,
                                                                p.seqlens, kv_scale=p.kv_scale)
        else:
            shape = mla_decode.Shape(batch=case.batch, seqlen=case.seqlen, heads=case.heads, dtype=case.dtype,
                                     s_q=case.q_len, **fp8)
            self.tensors = mla_decode.random_inputs(shape, device=device, seed=SEED)
            tensors, kv_scale = split_scale(self.tensors)
            self.expected, _ = mla_decode.reference(*tensors, kv_scale=kv_scale)


def check_output(out, expected) -> dict:
    """Max abs/rel error; raises WrongResult unless out matches expected at rtol = atol = 0.01."""
    out = out.reshape(expected.shape).float()
    if not bool(torch.isfinite(out).all()):
        raise WrongResult(f"output has {int((~torch.isfinite(out)).sum())} NaN/Inf elements")
    diff = (out - expected).abs()
    err = {"max_abs": float(diff.max()), "max_rel": float((diff / expected.abs().clamp_min(1e-6)).max())}
    try:
        torch.testing.assert_close(out, expected, rtol=RTOL, atol=ATOL)
    except AssertionError:
        bad = int((~torch.isclose(out, expected, rtol=RTOL, atol=ATOL)).sum())  # assert_close's own test
        raise WrongResult(f"{bad} of {out.numel()} elements off by more than atol={ATOL} + "
                          f"rtol={RTOL}·|ref| (max abs error {err['max_abs']:.3g})") from None
    return err


def checked_launch(impl: str, inputs: Inputs, device) -> tuple:
    """(launch, error) once the output matched the reference; raises
    impls.Unavailable or WrongResult, so nothing wrong is ever timed."""
    launch = impls.prepare(impl, inputs.tensors, device)
    out = launch()
    torch.cuda.synchronize()
    return launch, check_output(out, inputs.expected)


def measure_case(case: Case, timing: Timing, inputs: Inputs, device, budget: str = "record",
                 spent: dict | None = None) -> CaseResult:
    try:
        with spending(spent, "load and check"):  # the kernel's load (or compile), one launch, the comparison
            launch, error = checked_launch(case.impl, inputs, device)
    except impls.Unavailable as e:
        return CaseResult(case, RunStatus.SKIPPED, str(e))
    except WrongResult as e:
        return CaseResult(case, RunStatus.FAILED, f"wrong result: {e}")
    with spending(spent, "timing"):
        samples = time_gpu(launch, timing, budget, device=device)
    with spending(spent, "profiler"):  # after the samples: the profiler is not timed
        names = kernels_run(launch) if case.impl in VENDORS else ()
    return CaseResult(case, RunStatus.OK, samples=samples, error=error, kernels=names)

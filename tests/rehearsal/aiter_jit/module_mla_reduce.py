"""The rehearsal's ``module_mla_reduce``: what aiter JIT-builds from csrc/pybind/mla_reduce_pybind.cu (the
persistent decode's split reduction, ``mla_reduce_v1``), made here in torch on the CPU, over the work lists of
the stand-in module_mla_metadata: tile ``t`` combines the partial tiles ``reduce_partial_map[reduce_indptr[t]:
reduce_indptr[t + 1]]`` (rows ``p * s_q ...`` of the partial buffers) into ``final_output`` rows
``reduce_final_map[t]`` (q_start, q_end) by their log-sum-exp."""

import torch


def mla_reduce_v1(partial_output, partial_lse, reduce_indptr, reduce_final_map, reduce_partial_map, final_output,
                  final_lse=None):
    s_q = partial_output.size(0) // reduce_partial_map.numel()
    bounds = reduce_indptr.tolist()
    for t in range(len(bounds) - 1):
        parts = reduce_partial_map[bounds[t]:bounds[t + 1]].tolist()
        if not parts:
            continue
        start, end = reduce_final_map[t].tolist()
        rows = [slice(p * s_q, p * s_q + end - start) for p in parts]
        lse = torch.stack([partial_lse[r, 0, :, 0] for r in rows])  # [parts, q, heads]
        total = torch.logsumexp(lse, dim=0)
        weights = torch.exp(lse - total).nan_to_num(0.0)
        out = sum(w[..., None] * partial_output[r, 0] for w, r in zip(weights, rows))
        final_output[start:end] = out.to(final_output.dtype)
        if final_lse is not None:
            final_lse[start:end] = total


# as pybind11 renders mla_reduce_pybind.cu's m.def (csrc/include/rocm_ops.hpp MLA_REDUCE_PYBIND)
mla_reduce_v1.__doc__ = (
    "mla_reduce_v1(partial_output: torch.Tensor, partial_lse: torch.Tensor, reduce_indptr: torch.Tensor, "
    "reduce_final_map: torch.Tensor | None, reduce_partial_map: torch.Tensor, final_output: torch.Tensor, "
    "final_lse: torch.Tensor | None = None) -> None\n\nmla_reduce_v1\n")

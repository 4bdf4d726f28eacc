"""The rehearsal's ``module_mla_metadata``: what aiter JIT-builds from csrc/pybind/mla_metadata_pybind.cu (the
persistent decode's work lists, ``get_mla_metadata_v1``), made here in torch on the CPU. aiter's Python above it
(aiter/ops/attention.py ``get_mla_metadata_info_v1``, the buffer shapes, and ``compile_ops``' argument check) is
the installed wheel's.

The lists follow the C++ declaration's fields (csrc/include/mla.h, the Python docstring's Outputs), in a layout
of this stand-in's own, read only by the stand-in stage 1 (module_mla_asm) and reduce (module_mla_reduce):
one query tile per sequence (``num_heads_per_head_k * s_q <= 128``, as a 16-head a16w8 call is), its KV range cut
in two at ``kv_granularity`` when the buffers hold two partial tiles per sequence, so the reduce combines
splits; a partial tile ``p`` is rows ``p * max_seqlen_q ...`` of stage 1's partial buffers.
"""

import torch


def get_mla_metadata_v1(seqlens_qo_indptr, seqlens_kv_indptr, num_heads_per_head_k, num_heads_k, is_causal,
                        work_metadata_ptrs, work_indptr, work_info, reduce_indptr, reduce_final_map,
                        reduce_partial_map, kv_granularity=16, max_seqlen_qo=-1, uni_seqlen_qo=-1, fast_mode=True,
                        topk=-1, max_split_per_batch=-1):
    qo, kv = seqlens_qo_indptr.tolist(), seqlens_kv_indptr.tolist()
    batch = len(qo) - 1
    if num_heads_k != 1 or num_heads_per_head_k * max(qo[b + 1] - qo[b] for b in range(batch)) > 128 or topk > 0:
        raise NotImplementedError("rehearsal: one query tile per sequence, one KV head, dense only")
    two = 2 * batch <= min(reduce_partial_map.numel(), work_info.size(0))
    works, tiles = [], []
    for b in range(batch):
        cut = kv[b] + (kv[b + 1] - kv[b]) // 2 // kv_granularity * kv_granularity
        ranges = [(kv[b], cut), (cut, kv[b + 1])] if two and kv[b] < cut < kv[b + 1] else [(kv[b], kv[b + 1])]
        tiles.append([len(works) + i for i in range(len(ranges))])
        works += [[b, len(works) + i, qo[b], qo[b + 1], start, end, kv[b + 1] - end, 0]
                  for i, (start, end) in enumerate(ranges)]
    cu = work_indptr.numel() - 1
    work_indptr.copy_(torch.arange(cu + 1) * len(works) // cu)
    work_info.zero_()
    work_info[:len(works)] = torch.tensor(works, dtype=torch.int32)
    counts = torch.tensor([0] + [len(t) for t in tiles] + [0] * (reduce_indptr.numel() - 1 - batch))
    reduce_indptr.copy_(counts.cumsum(0))
    reduce_final_map.zero_()
    reduce_final_map[:batch] = torch.tensor([[qo[b], qo[b + 1]] for b in range(batch)], dtype=torch.int32)
    reduce_partial_map.zero_()
    reduce_partial_map[:len(works)] = torch.arange(len(works))


# as pybind11 renders mla_metadata_pybind.cu's m.def (csrc/include/rocm_ops.hpp MLA_METADATA_PYBIND: its py::arg
# names the 7th and 8th work_info_set, work_indptr; the C++ declaration takes work_indptr, work_info there)
get_mla_metadata_v1.__doc__ = (
    "get_mla_metadata_v1(seqlens_qo_indptr: torch.Tensor, seqlens_kv_indptr: torch.Tensor, "
    "num_heads_per_head_k: typing.SupportsInt, num_heads_k: typing.SupportsInt, is_causal: bool, "
    "work_metadata_ptrs: torch.Tensor, work_info_set: torch.Tensor, work_indptr: torch.Tensor, "
    "reduce_indptr: torch.Tensor, reduce_final_map: torch.Tensor, reduce_partial_map: torch.Tensor, "
    "kv_granularity: typing.SupportsInt = 16, max_seqlen_qo: typing.SupportsInt = -1, "
    "uni_seqlen_qo: typing.SupportsInt = -1, fast_mode: bool = True, topk: typing.SupportsInt = -1, "
    "max_split_per_batch: typing.SupportsInt = -1) -> None\n\nget_mla_metadata_v1\n")

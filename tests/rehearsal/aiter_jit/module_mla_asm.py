"""The rehearsal's ``module_mla_asm``: what aiter JIT-builds from csrc/py_itfs_cu/asm_mla.cu and
csrc/pybind/attention_asm_mla_pybind.cu, made here without a compiler or a GPU. Everything above it is the
installed aiter's real Python (aiter/mla.py ``mla_decode_fwd``, ``get_meta_param``, aiter/jit/core.py
``compile_ops`` with its argument check against the docstring below).

The op does what the assembly launch stands for, no more:
- the code object: aiter's own kernel choice, replayed from the installed asm_mla.cu
  (mlagate.measure.aiter_dispatch); a case without one fails as aiter's TORCH_CHECK does (RuntimeError);
- the numbers: each sequence's attention over its KV pages in float32 (causal among several query tokens), all of
  it in the first KV split
  (log-sum-exp in ``splitLse``), the other splits empty (-inf), which aiter's stage-2 reduction
  (``_fwd_kernel_stage2_asm``) combines to the same result whatever split count ``get_meta_param`` chose.
  One split per sequence is refused: then the real kernel writes the final bf16 output itself
  (``out_16_nosplit``), which this stand-in does not model;
- the persistent launch (a16w8: an fp8 cache): each work of the stand-in module_mla_metadata's lists, its
  query rows over its KV range, into its partial tile, which the stand-in module_mla_reduce combines;
- an fp8 cache is read as the values it stands for, fp8 x ``kv_scale``, in float32.
"""

import math

import torch

from mlagate.measure import aiter_dispatch

calls = []  # (code object, batch, heads, KV splits or "persistent") per launch, for the rehearsal to read

_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
if hasattr(torch, "float8_e4m3fnuz"):
    _DTYPES[torch.float8_e4m3fnuz] = "float8_e4m3fnuz"


def mla_decode_stage1_asm_fwd(Q, KV, qo_indptr, kv_indptr, kv_page_indices, kv_last_page_lens,
                              num_kv_splits_indptr, work_meta_data, work_indptr, work_info_set,
                              max_seqlen_q, softmax_scale, splitData, splitLse, output,
                              q_scale=None, kv_scale=None):
    try:
        kernel = aiter_dispatch.decode_kernel(
            _DTYPES.get(Q.dtype, str(Q.dtype)), Q.size(1) // KV.size(2), kv_dtype=_DTYPES.get(KV.dtype, str(KV.dtype)),
            max_seqlen_q=max_seqlen_q, persistent=num_kv_splits_indptr is None)
    except aiter_dispatch.NoKernel as e:
        raise RuntimeError(str(e)) from None
    num_page, page_size, _, dim = KV.shape
    # an fp8 cache: the values it stands for (fp8 x kv_scale), in float32
    rows = KV.reshape(num_page * page_size, dim).float() * (1.0 if kv_scale is None else float(kv_scale))
    v_dim = splitData.size(-1)
    splitData.zero_()
    splitLse.fill_(-math.inf)
    if work_meta_data is not None:  # persistent: the work lists of the stand-in module_mla_metadata
        if page_size != 1:
            raise NotImplementedError("rehearsal: the persistent launch is modelled at one-token pages")
        calls.append((kernel.code_object, qo_indptr.numel() - 1, Q.size(1), "persistent"))
        for w in range(int(work_indptr[-1])):
            b, part, q_start, q_end, kv_start, kv_end = work_info_set[w, :6].tolist()
            tokens = kv_page_indices[kv_start:kv_end].long()
            first, length = kv_start - int(kv_indptr[b]), int(kv_indptr[b + 1] - kv_indptr[b])
            out, lse = _attend(Q[q_start:q_end], rows[tokens], first, length, softmax_scale, v_dim)
            splitData[part * max_seqlen_q:part * max_seqlen_q + q_end - q_start, 0] = out
            splitLse[part * max_seqlen_q:part * max_seqlen_q + q_end - q_start, 0, :, 0] = lse
        return
    splits = splitData.size(1)
    if num_kv_splits_indptr is None or splits == 1:
        raise NotImplementedError("rehearsal: the unsplit launch is not modelled")
    calls.append((kernel.code_object, qo_indptr.numel() - 1, Q.size(1), splits))
    for b in range(qo_indptr.numel() - 1):
        pages = kv_page_indices[kv_indptr[b]:kv_indptr[b + 1]].long()
        tokens = (pages[:, None] * page_size + torch.arange(page_size)).reshape(-1)
        tokens = tokens[:tokens.numel() - (page_size - int(kv_last_page_lens[b]))]
        qo = slice(int(qo_indptr[b]), int(qo_indptr[b + 1]))
        splitData[qo, 0], splitLse[qo, 0, :, 0] = _attend(Q[qo], rows[tokens], 0, tokens.numel(), softmax_scale,
                                                          v_dim)


def _attend(q_rows, keys, first, length, softmax_scale, v_dim):
    """float32 attention of a sequence's query tokens over its cache positions first ... first + len(keys) of
    ``length``; several query tokens are causal among themselves, as aiter's mask1 code objects are (the new
    tokens are the cache's last positions; token i sees length - q + 1 + i of them). (out, lse [q, heads])."""
    scores = torch.einsum("qhd,kd->qhk", q_rows.float(), keys) * softmax_scale
    q = scores.shape[0]
    positions = first + torch.arange(keys.shape[0])
    seen = positions[None, :] < (length - q + 1 + torch.arange(q))[:, None]
    scores = scores.masked_fill(~seen[:, None, :], -math.inf)
    lse = torch.logsumexp(scores, dim=-1)
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a split no token of which is seen: empty
    return torch.einsum("qhk,kd->qhd", weights, keys[:, :v_dim]), lse


# as pybind11 renders attention_asm_mla_pybind.cu's m.def of the C++ declaration (csrc/include/attention_asm_mla.h)
mla_decode_stage1_asm_fwd.__doc__ = (
    "mla_decode_stage1_asm_fwd(Q: torch.Tensor, KV: torch.Tensor, qo_indptr: torch.Tensor, kv_indptr: torch.Tensor, "
    "kv_page_indices: torch.Tensor, kv_last_page_lens: torch.Tensor, num_kv_splits_indptr: torch.Tensor | None, "
    "work_meta_data: torch.Tensor | None, work_indptr: torch.Tensor | None, work_info_set: torch.Tensor | None, "
    "max_seqlen_q: typing.SupportsInt, softmax_scale: typing.SupportsFloat, splitData: torch.Tensor, "
    "splitLse: torch.Tensor, output: torch.Tensor, q_scale: torch.Tensor | None = None, "
    "kv_scale: torch.Tensor | None = None) -> None\n\nmla_decode_stage1_asm_fwd\n")

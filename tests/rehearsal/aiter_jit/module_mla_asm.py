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
  (``out_16_nosplit``), which this stand-in does not model.
"""

import math

import torch

from mlagate.measure import aiter_dispatch

calls = []  # (code object, batch, heads, KV splits) per launch, for the rehearsal to read

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
    splits = splitData.size(1)
    if num_kv_splits_indptr is None or splits == 1:
        raise NotImplementedError("rehearsal: the persistent and the unsplit launch are not modelled")
    calls.append((kernel.code_object, qo_indptr.numel() - 1, Q.size(1), splits))
    num_page, page_size, _, dim = KV.shape
    v_dim = splitData.size(-1)
    rows = KV.reshape(num_page * page_size, dim)
    splitData.zero_()
    splitLse.fill_(-math.inf)
    for b in range(qo_indptr.numel() - 1):
        pages = kv_page_indices[kv_indptr[b]:kv_indptr[b + 1]].long()
        tokens = (pages[:, None] * page_size + torch.arange(page_size)).reshape(-1)
        tokens = tokens[:tokens.numel() - (page_size - int(kv_last_page_lens[b]))]
        keys = rows[tokens].float()
        qo = slice(int(qo_indptr[b]), int(qo_indptr[b + 1]))
        scores = torch.einsum("qhd,kd->qhk", Q[qo].float(), keys) * softmax_scale
        # several query tokens: causal among them, as aiter's mask1 code objects are (the new tokens are the
        # cache's last positions; token i sees L - q + 1 + i of them)
        q, length = scores.shape[0], keys.shape[0]
        seen = torch.arange(length)[None, :] < (length - q + 1 + torch.arange(q))[:, None]
        scores = scores.masked_fill(~seen[:, None, :], -math.inf)
        lse = torch.logsumexp(scores, dim=-1)  # [q, heads]
        splitData[qo, 0] = torch.einsum("qhk,kd->qhd", torch.softmax(scores, dim=-1), keys[:, :v_dim])
        splitLse[qo, 0, :, 0] = lse


# as pybind11 renders attention_asm_mla_pybind.cu's m.def of the C++ declaration (csrc/include/attention_asm_mla.h)
mla_decode_stage1_asm_fwd.__doc__ = (
    "mla_decode_stage1_asm_fwd(Q: torch.Tensor, KV: torch.Tensor, qo_indptr: torch.Tensor, kv_indptr: torch.Tensor, "
    "kv_page_indices: torch.Tensor, kv_last_page_lens: torch.Tensor, num_kv_splits_indptr: torch.Tensor | None, "
    "work_meta_data: torch.Tensor | None, work_indptr: torch.Tensor | None, work_info_set: torch.Tensor | None, "
    "max_seqlen_q: typing.SupportsInt, softmax_scale: typing.SupportsFloat, splitData: torch.Tensor, "
    "splitLse: torch.Tensor, output: torch.Tensor, q_scale: torch.Tensor | None = None, "
    "kv_scale: torch.Tensor | None = None) -> None\n\nmla_decode_stage1_asm_fwd\n")

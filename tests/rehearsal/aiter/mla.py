"""A CPU stand-in for aiter's ``mla_decode_fwd`` at ROCm/aiter c16d44b9 (Dockerfile.rocm's AITER_COMMIT).

It keeps the real signature and refuses what the real one refuses, with the same kind of error
(AssertionError from Python asserts, RuntimeError from AITER_CHECK in the assembly op), then computes the
attention aiter's own test uses as its reference (op_tests/test_mla.py, torch_mla_extend). Each rule
cites where aiter enforces it; docs/aiter-contract-c16d44b9.md has the reading behind them.
"""

import torch

# hsa/gfx942/mla/mla_asm.csv: the bf16/bf16 decode kernels that exist on MI300X, by query-head count
# (asm_mla.cu:865-973 looks 64 heads up with qSeqLen 1, and gfx942 has no such row).
GFX942_BF16_DECODE_HEADS = (8, 16, 32, 128)
FP8 = torch.float8_e4m3fnuz  # aiter/utility/dtypes.py: the fp8 of gfx942
INDEX_DTYPE = torch.int32  # every indptr/index tensor aiter builds (test_mla.py:150-172, mla.py:371)

calls = []  # what was called, for the rehearsal to report


def _check(ok, message):
    if not ok:  # AITER_CHECK -> RuntimeError through aiter/jit/core.py's ctypes wrapper
        raise RuntimeError(f"mla_decode_stage1_asm_fwd failed: {message}")


def mla_decode_fwd(
    q,
    kv_buffer,
    o,
    qo_indptr,
    kv_indptr,
    kv_indices,
    kv_last_page_lens,
    max_seqlen_q,
    page_size=1,
    nhead_kv=1,
    sm_scale=None,
    logit_cap=0.0,
    num_kv_splits=None,
    num_kv_splits_indptr=None,
    work_meta_data=None,
    work_indptr=None,
    work_info_set=None,
    reduce_indptr=None,
    reduce_final_map=None,
    reduce_partial_map=None,
    q_scale=None,
    kv_scale=None,
    intra_batch_mode=False,
    return_logits=False,
    return_lse=False,
    g_kv_indptr=None,
    cp_world_size=1,
    cp_rank=0,
    causal=True,
):
    assert logit_cap <= 0, f"{logit_cap=} is not support yet"  # mla.py:560
    num_page, ps, heads_kv, qk_head_dim = kv_buffer.shape  # mla.py:561-562 (4-D unless uint8)
    if sm_scale is None:
        sm_scale = 1.0 / (qk_head_dim ** 0.5)  # mla.py:566-567
    total_s, nhead, v_head_dim = o.shape  # mla.py:569-570
    bs = qo_indptr.shape[0] - 1  # mla.py:571
    _check(work_meta_data is None, "this stand-in covers the non-persistent path only (mla.py:574)")
    _check(q.is_contiguous(), "Q must be contiguous")  # asm_mla.cu:806
    _check(nhead_kv == 1 and heads_kv == 1, f"num_kv_heads must be 1, got {nhead_kv}")  # asm_mla.cu:807
    _check(q.size(2) == qk_head_dim, f"head_size {q.size(2)} != KV head dim {qk_head_dim}")  # :812-814
    _check(q.dtype in (torch.bfloat16, FP8), f"unsupport Q dtype: {q.dtype}")  # asm_mla.cu:834-839
    _check(kv_buffer.dtype in (torch.bfloat16, FP8, torch.int8, torch.uint8),
           f"unsupport KV dtype: {kv_buffer.dtype}")  # asm_mla.cu:841-848
    if q.dtype == FP8:
        _check(q_scale is not None and kv_scale is not None, "fp8 Q requires q_scale and kv_scale")  # :816-821
    _check(q.dtype == torch.bfloat16 and kv_buffer.dtype == torch.bfloat16 and nhead in GFX942_BF16_DECODE_HEADS
           and max_seqlen_q == 1, f"cannot get heuristic kernel! q {q.dtype}, kv {kv_buffer.dtype}, gqa {nhead}, "
           f"qSeqLen {max_seqlen_q} (hsa/gfx942/mla/mla_asm.csv)")  # asm_mla.cu:182-193
    assert ps == page_size and page_size & (page_size - 1) == 0, "page_size: a power of two (asm_mla.cu:715)"
    assert o.dtype == torch.bfloat16, "o: bf16 (the stage-1 kernel writes bf16, asm_mla.cu:780)"
    for name, t in (("qo_indptr", qo_indptr), ("kv_indptr", kv_indptr), ("kv_indices", kv_indices),
                    ("kv_last_page_lens", kv_last_page_lens)):
        assert t.dtype == INDEX_DTYPE, f"{name}: aiter passes int32 indices to the assembly, got {t.dtype}"
        assert t.device == q.device, f"{name}: on {t.device}, q on {q.device}"
    assert kv_last_page_lens.shape == (bs,), "kv_last_page_lens: one per sequence"
    calls.append({"batch": bs, "heads": nhead, "page_size": page_size, "dtype": str(q.dtype)})

    # op_tests/test_mla.py torch_mla_extend: fp32 softmax over the sequence's cache rows; V = the first
    # v_head_dim columns; one query token needs no causal mask. page_size 1: kv_indptr counts tokens.
    rows = kv_buffer.reshape(num_page * ps, qk_head_dim)
    for b in range(bs):
        tokens = kv_indices[kv_indptr[b]:kv_indptr[b + 1]].long()
        keys = rows[tokens].float()
        query = q[qo_indptr[b]:qo_indptr[b + 1]].float()  # [q_len, nhead, 576]
        probs = torch.softmax(torch.einsum("qhd,kd->qhk", query, keys) * sm_scale, dim=-1)
        o[qo_indptr[b]:qo_indptr[b + 1]] = torch.einsum("qhk,kd->qhd", probs, keys[:, :v_head_dim]).to(o.dtype)
    return o, None

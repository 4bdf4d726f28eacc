"""Every MLA decode implementation behind one interface.

``prepare(impl, inputs, device)`` turns the shared inputs into a zero-argument launch that
returns the output: q's shape, [batch, heads, 512], or [batch, s_q, heads, 512] where a sequence
has s_q > 1 query tokens (causal among themselves: FlashMLA's causal=True; a vendor's flat
[batch * s_q, heads, 512] reads the same). Inputs are a dense batch (q, q_pe, kv, k_pe in the
TileLang layout, one length for all) or a :class:`Paged` one (a workload: a page table and
per-sequence lengths). Vendor kernels always read pages: a dense batch is handed to them as
contiguous pages of their size. Layout conversions happen here, once, outside any timed
region (the layouts: measure/layouts.py). An implementation that cannot run here raises
:class:`Unavailable` with the reason.
"""

import importlib.util
from functools import partial

import torch

from mlagate.case import TILELANG_PREFIX
from mlagate.kernels import mla_decode, tuned
from mlagate.measure.layouts import Paged, Unavailable, as_pages, as_rows, lse_like, query_tokens, split_scale


def _require(module: str, impl: str):
    if importlib.util.find_spec(module) is None:
        raise Unavailable(f"{impl}: Python package '{module}' is not installed")


def _require_arch(impl: str, device, *, prefixes):
    arch = mla_decode.device_arch(device)
    why = _wrong_arch(impl, arch, prefixes)
    if why:
        raise Unavailable(why)
    return arch


def _wrong_arch(impl: str, arch: str, prefixes) -> str | None:
    return None if arch.startswith(prefixes) else f"{impl}: needs a {' or '.join(prefixes)} device, this one is {arch}"


# Architectures a config with its operands in shared memory (hopper, seesaw) is launched on.
SHARED_OPERAND_ARCHS = ("sm_9", "sm_10")


def tilelang_config(impl: str, shape, arch: str):
    """The tile config a TileLang implementation runs on ``shape``: a candidate's own
    (tilelang-hopper@N64...), or for a family (tilelang-hopper) the committed table's."""
    return tuned.parse_candidate(impl) or tuned.tuned_config(impl.removeprefix(TILELANG_PREFIX), shape, arch)


def paged_config(impl: str, mean_shape, arch: str):
    """The config a paged batch of ``impl`` runs (mla_decode.paged_config), from the committed table."""
    return mla_decode.paged_config(tilelang_config(impl, mean_shape, arch))


def case_kernel(case, arch: str):
    """The TileLang kernel ``case`` launches on ``arch``, as measure.precompile.compile_one takes it: a dense
    case's (Shape, config), a paged case's (PagedShape, config, lengths); None for another implementation or
    a config that does not run on ``arch`` (the launch then says why)."""
    if not case.impl.startswith(TILELANG_PREFIX):
        return None
    fp8 = {"kv_dtype": case.kv_dtype} if case.kv_dtype != case.dtype else {}  # kernels/: an fp8 cache's Shape
    if case.paged:
        from mlagate.kernels.mla_decode_paged import PagedShape

        shape = PagedShape.holding(case.lengths, case.heads, case.page_size, case.dtype, s_q=case.q_len, **fp8)
        config = paged_config(case.impl, shape.at_mean_length(case.lengths), arch)
        kernel = (shape, config, tuple(case.lengths))
    else:
        shape = mla_decode.Shape(case.batch, case.seqlen, case.heads, case.dtype, s_q=case.q_len, **fp8)
        config = tilelang_config(case.impl, shape, arch)
        kernel = (shape, config)
    return None if _not_here(case.impl, config, arch) else kernel


def _not_here(impl: str, config, arch: str) -> str | None:
    """Why ``config`` cannot launch on ``arch``; None where it can."""
    if not config.runs_on(arch):
        return f"{impl}: the {config.schedule} schedule needs Hopper (wgmma, TMA), this GPU is {arch}"
    # wgmma/TMA and 228 KB of shared memory per block
    return _wrong_arch(impl, arch, SHARED_OPERAND_ARCHS) if config.operands_in_shared else None


def _tilelang(impl, inputs, device):
    if isinstance(inputs, Paged):
        return _tilelang_paged(impl, inputs, device)
    (q, q_pe, kv, k_pe), kv_scale = split_scale(inputs)
    shape = mla_decode.check_inputs(q, q_pe, kv, k_pe, kv_scale)
    config = _tilelang_config_here(impl, shape, device)
    kernel = mla_decode.compiled(shape, config, device)
    out, lse, scaled = torch.empty_like(q), lse_like(q), _scaled(kv_scale, q.device)
    return lambda: kernel(q, q_pe, kv, k_pe, out, lse, **scaled)[0]


def _scaled(kv_scale, device) -> dict:
    """The compiled TileLang kernels' keyword for an fp8 cache's per-tensor scale: float32 [1] on the device
    (mla_decode.scale_tensor), made here, outside the timed launch; none at 16 bits."""
    return {} if kv_scale is None else {"kv_scale": mla_decode.scale_tensor(kv_scale, device)}


def _tilelang_config_here(impl, shape, device, paged=False):
    arch = mla_decode.device_arch(device)
    config = (paged_config if paged else tilelang_config)(impl, shape, arch)
    why = _not_here(impl, config, arch) or mla_decode.kernel_config(shape, config).refuses_rows(shape.rows)
    if why:
        raise Unavailable(why)
    return config


def _tilelang_paged(impl, paged: Paged, device):
    """kernels/mla_decode_paged.py with the config the dense kernel runs at the batch's mean length (paged_config)."""
    from mlagate.kernels import mla_decode_paged

    tensors, scaled = tuple(paged)[:6], _scaled(paged.kv_scale, paged.q.device)
    shape = mla_decode_paged.check_paged_inputs(*tensors, paged.kv_scale)  # reads the lengths and table: once
    lengths = paged.seqlens.tolist()
    config = _tilelang_config_here(impl, shape.at_mean_length(lengths), device, paged=True)
    kernel = mla_decode_paged.compiled(shape, config, device, lengths)
    out, lse = torch.empty_like(paged.q), lse_like(paged.q)
    return lambda: kernel(*tensors, out, lse, **scaled)[0]


def _triton(inputs, device):
    if isinstance(inputs, Paged):
        raise Unavailable("triton: this Triton kernel (the seed's) reads a dense cache only")
    (q, q_pe, kv, k_pe), kv_scale = split_scale(inputs)
    if kv_scale is not None:
        raise Unavailable(f"triton: this Triton kernel (the seed's) reads a 16-bit cache, not {kv.dtype}")
    if query_tokens(q) > 1:
        raise Unavailable(f"triton: this Triton kernel (the seed's) takes one query token per sequence, not "
                          f"{query_tokens(q)} (no causal mask among new tokens)")
    _require("triton", "triton")
    from mlagate.kernels.triton_mla import TritonDecode

    batch, heads, dim = q.shape
    decode = TritonDecode(batch, heads, kv.shape[1], dim, q_pe.shape[2], device)
    out = torch.empty_like(q)
    lse = torch.empty(batch, heads, device=device, dtype=torch.float32)
    return lambda: decode(q, q_pe, kv, k_pe, out, lse)[0]


def _flash_mla(inputs, device):
    """FlashMLA's dense SM90 decode (PyPI sgl-flash-mla): one 576-wide cache in pages of 64 tokens."""
    _require("flash_mla", "flash_mla")
    _require_arch("flash_mla", device, prefixes=("sm_90",))
    from flash_mla import flash_mla_with_kvcache, get_mla_metadata

    p = as_pages(inputs, "flash_mla", 64)
    if p.kv_scale is not None:  # measured on the H200, 2026-12-01 (issue 44)
        raise Unavailable(f"flash_mla: sgl-flash-mla 1.0.0's dense decode refuses a {p.kv_cache.dtype} cache with a "
                          f"{p.q.dtype} query (\"query and key must have the same dtype\")")
    dim = p.q.shape[-1]
    q_all = torch.cat([p.q, p.q_pe], -1)
    q_all = q_all if q_all.dim() == 4 else q_all.unsqueeze(1)  # [b, s_q, h, 576]
    cache = torch.cat([p.kv_cache, p.k_pe_cache], -1).unsqueeze(2)  # [pages, 64, 1, 576]
    blocks = p.block_table.clamp_min(0)  # unused entries (never read) as a valid page id
    schedule, _ = get_mla_metadata()  # one per batch: a reused schedule gives wrong results silently
    scale = q_all.shape[-1] ** -0.5

    causal = p.s_q > 1  # sgl-flash-mla 1.0.0's dense decode: the s_q new tokens are the cache's last positions

    def run():
        out, _ = flash_mla_with_kvcache(q_all, cache, blocks, p.seqlens, dim, schedule, softmax_scale=scale,
                                        causal=causal, use_legacy=True)
        return out

    return run


def _flashinfer(inputs, device):
    """FlashInfer's FA3 MLA wrapper (SM90), planned once per batch, pages of 64 tokens as CSR lists."""
    _require("flashinfer", "flashinfer")
    _require_arch("flashinfer", device, prefixes=("sm_90",))
    from flashinfer.mla import BatchMLAPagedAttentionWrapper, MLAPlanMetadata

    p = as_pages(inputs, "flashinfer", 64)
    q, q_pe = as_rows(p.q, p.q_pe)  # [batch * s_q, heads, d]: qo_indptr steps s_q rows per sequence
    batch, s_q, (heads, dim), pe_dim = p.seqlens.shape[0], p.s_q, q.shape[1:], q_pe.shape[-1]
    kv_indptr, page_ids = p.page_lists()
    i32 = dict(dtype=torch.int32, device=device)
    wrapper = BatchMLAPagedAttentionWrapper(torch.empty(128 << 20, dtype=torch.uint8, device=device), backend="fa3")
    meta = MLAPlanMetadata.csr(torch.arange(0, (batch + 1) * s_q, s_q, **i32), kv_indptr, page_ids, p.seqlens)
    # flashinfer-python 0.7.2.post1's FA3 causal mask is bottom-right (query i of qo_len sees kv_len - qo_len + i)
    wrapper.plan(metadata=meta, num_heads=heads, head_dim_ckv=dim, head_dim_kpe=pe_dim, page_size=p.page_size,
                 causal=s_q > 1, sm_scale=(dim + pe_dim) ** -0.5, q_data_type=q.dtype, kv_data_type=p.kv_cache.dtype,
                 query_layout="split", kv_cache_layout="split")
    # an e4m3 cache plans scale_mode "kv-per-tensor": run takes ckv_scale and kpe_scale, our one per-tensor scale
    scales = {} if p.kv_scale is None else {"ckv_scale": p.kv_scale, "kpe_scale": p.kv_scale}
    return lambda: wrapper.run(query=(q, q_pe), kv_cache=(p.kv_cache, p.k_pe_cache), **scales)


def _aiter(inputs, device):
    """aiter's MI300X assembly decode, pages of one token, as aiter's own tests call it. The code object it
    runs is the one aiter's dispatch picks (measure/aiter_dispatch.py); without one the case is unavailable
    here, not a failure at launch."""
    from mlagate.measure import aiter_dispatch

    _require("aiter", "aiter")
    _require_arch("aiter", device, prefixes=("gfx94", "gfx95"))
    p = as_pages(inputs, "aiter", 1)
    if p.q.dtype != torch.bfloat16:
        raise Unavailable(f"aiter: this harness feeds mla_decode_fwd bfloat16 queries (aiter takes bf16 or fp8 "
                          f"with scales), not {p.q.dtype}")
    q, q_pe = as_rows(p.q, p.q_pe)
    batch, s_q, (heads, dim) = p.seqlens.shape[0], p.s_q, q.shape[1:]
    kv_dtype = str(p.kv_cache.dtype).removeprefix("torch.")
    persistent = aiter_dispatch.persistent_call("bfloat16", kv_dtype)  # a16w8: its one object is persistent
    try:
        aiter_dispatch.decode_kernel("bfloat16", heads, kv_dtype=kv_dtype, max_seqlen_q=s_q, persistent=persistent)
    except aiter_dispatch.NoKernel as e:
        raise Unavailable(f"aiter: {e}") from None
    from aiter.mla import mla_decode_fwd

    kv_indptr, page_ids = p.page_lists()  # pages of one token: indptr counts tokens
    i32 = dict(dtype=torch.int32, device=device)
    q_all = torch.cat([q, q_pe], -1).contiguous()  # [batch * s_q, heads, 576]
    cache = torch.cat([p.kv_cache, p.k_pe_cache], -1).unsqueeze(2)  # [tokens, 1, 1, 576]
    qo_indptr = torch.arange(0, (batch + 1) * s_q, s_q, **i32)
    last_page_lens = torch.ones(batch, **i32)
    out = torch.empty(batch * s_q, heads, dim, dtype=p.q.dtype, device=device)
    scale = q_all.shape[-1] ** -0.5

    work = _aiter_work(qo_indptr, kv_indptr, batch, s_q, heads, q_all.dtype, cache.dtype) if persistent else {}
    if p.kv_scale is not None:  # asm_mla.cu reads it through a pointer: a float32 tensor of one
        work["kv_scale"] = torch.tensor([p.kv_scale], dtype=torch.float32, device=device)

    def run():
        # amd-aiter 0.1.7.post2.dev18 (the image's): the page size and KV heads come from kv_buffer's shape;
        # sm_scale by keyword, as later aiter inserted page_size/nhead_kv before it
        mla_decode_fwd(q_all, cache, out, qo_indptr, kv_indptr, page_ids, last_page_lens, s_q, sm_scale=scale, **work)
        return out

    return run


def _aiter_work(qo_indptr, kv_indptr, batch, s_q, heads, q_dtype, kv_dtype) -> dict:
    """The persistent call's work lists (aiter's get_mla_metadata_v1, once per batch, outside the timed launch):
    mla_decode_fwd's keywords, causal among the s_q query tokens as the a16w8 object (mask1) is."""
    from aiter import get_mla_metadata_info_v1, get_mla_metadata_v1

    shapes = get_mla_metadata_info_v1(batch, s_q, heads, q_dtype, kv_dtype, is_sparse=False, fast_mode=True)
    names = ("work_meta_data", "work_indptr", "work_info_set", "reduce_indptr", "reduce_final_map",
             "reduce_partial_map")
    work = {name: torch.empty(shape, dtype=dtype, device=qo_indptr.device) for name, (shape, dtype)
            in zip(names, shapes)}
    get_mla_metadata_v1(qo_indptr, kv_indptr, heads, 1, True, *work.values(), kv_granularity=16,
                        max_seqlen_qo=s_q, uni_seqlen_qo=s_q, fast_mode=True)
    return work


def _torch(inputs, device):
    if isinstance(inputs, Paged):  # its host loop and syncs keep the host from ever getting ahead of the GPU
        raise Unavailable("torch: the eager reference of a paged batch loops over sequences on the host; it "
                          "checks the others, it is not timed")
    (q, q_pe, kv, k_pe), kv_scale = split_scale(inputs)
    if kv_scale is not None:
        raise Unavailable(f"torch: the eager reference in the query's dtype reads a 16-bit cache, not {kv.dtype}")
    return lambda: mla_decode.reference(q, q_pe, kv, k_pe, compute_dtype=q.dtype)[0]


PREPARE = {
    "tilelang-hopper": partial(_tilelang, "tilelang-hopper"),
    "tilelang-seesaw": partial(_tilelang, "tilelang-seesaw"),
    "tilelang-cdna3": partial(_tilelang, "tilelang-cdna3"),
    "flash_mla": _flash_mla,
    "flashinfer": _flashinfer,
    "aiter": _aiter,
    "triton": _triton,
    "torch": _torch,
}


def prepare(impl: str, inputs, device):
    """A zero-argument launch of ``impl`` on ``inputs`` (a dense tuple or Paged); raises Unavailable."""
    if tuned.parse_candidate(impl):  # a config `mlagate tune` times: tilelang-<family>@<config>
        return _tilelang(impl, inputs, device)
    if impl not in PREPARE:
        raise ValueError(f"unknown implementation {impl!r}; known: {', '.join(PREPARE)}")
    return PREPARE[impl](inputs, device)

"""Every MLA decode implementation behind one interface.

``prepare(impl, inputs, device)`` turns the shared inputs (q, q_pe, kv, k_pe in
the TileLang layout) into a zero-argument launch that returns the output
[batch, heads, 512]. Layout conversions for vendor kernels (paged caches, block
tables) happen here, once, outside any timed region. An implementation that
cannot run here raises :class:`Unavailable` with the reason.
"""

import importlib.util
from functools import partial

import torch

from mlagate.case import TILELANG_PREFIX
from mlagate.kernels import mla_decode, tuned


class Unavailable(Exception):
    """This implementation cannot run here (library missing, wrong architecture)."""


def _require(module: str, impl: str):
    if importlib.util.find_spec(module) is None:
        raise Unavailable(f"{impl}: Python package '{module}' is not installed")


def _require_arch(impl: str, device, *, prefixes):
    arch = mla_decode.device_arch(device)
    if not arch.startswith(prefixes):
        raise Unavailable(f"{impl}: needs a {' or '.join(prefixes)} device, this one is {arch}")
    return arch


def tilelang_config(impl: str, shape, arch: str):
    """The tile config a TileLang implementation runs on ``shape``: a candidate's own
    (tilelang-hopper@N64...), or for a family (tilelang-hopper) the committed table's."""
    return tuned.parse_candidate(impl) or tuned.tuned_config(impl.removeprefix(TILELANG_PREFIX), shape, arch)


def _tilelang(impl, q, q_pe, kv, k_pe, device):
    shape = mla_decode.check_inputs(q, q_pe, kv, k_pe)
    config = tilelang_config(impl, shape, mla_decode.device_arch(device))
    if config.name == "hopper":  # wgmma/TMA and 228 KB of shared memory per block
        _require_arch(impl, device, prefixes=("sm_9", "sm_10"))
    kernel = mla_decode.compiled(shape, config, device)
    out = torch.empty_like(q)
    lse = torch.empty(shape.batch, shape.heads, device=device, dtype=torch.float32)
    return lambda: kernel(q, q_pe, kv, k_pe, out, lse)[0]


def _triton(q, q_pe, kv, k_pe, device):
    _require("triton", "triton")
    from mlagate.kernels.triton_mla import TritonDecode

    batch, heads, dim = q.shape
    decode = TritonDecode(batch, heads, kv.shape[1], dim, q_pe.shape[2], device)
    out = torch.empty_like(q)
    lse = torch.empty(batch, heads, device=device, dtype=torch.float32)
    return lambda: decode(q, q_pe, kv, k_pe, out, lse)[0]


def _flash_mla(q, q_pe, kv, k_pe, device):
    """FlashMLA's dense SM90 decode (PyPI sgl-flash-mla): paged cache, page size 64."""
    _require("flash_mla", "flash_mla")
    _require_arch("flash_mla", device, prefixes=("sm_90",))
    from flash_mla import flash_mla_with_kvcache, get_mla_metadata

    batch, heads, dim = q.shape
    seqlen, page = kv.shape[1], 64
    if seqlen % page:
        raise Unavailable(f"flash_mla: this harness pages the cache in blocks of {page}; seqlen {seqlen} is not a multiple")
    q_all = torch.cat([q, q_pe], -1).unsqueeze(1)  # [b, 1, h, 576]
    cache = torch.cat([kv, k_pe], -1).view(batch * seqlen // page, page, 1, -1)
    blocks = torch.arange(batch * seqlen // page, dtype=torch.int32, device=device).view(batch, -1)
    seqlens = torch.full((batch,), seqlen, dtype=torch.int32, device=device)
    schedule, _ = get_mla_metadata()  # one per shape: a reused schedule gives wrong results silently
    scale = q_all.shape[-1] ** -0.5

    def run():
        out, _ = flash_mla_with_kvcache(q_all, cache, blocks, seqlens, dim, schedule, softmax_scale=scale,
                                        causal=False, use_legacy=True)
        return out

    return run


def _flashinfer(q, q_pe, kv, k_pe, device):
    """FlashInfer's FA3 MLA wrapper (SM90), planned once per shape; page size 64."""
    _require("flashinfer", "flashinfer")
    _require_arch("flashinfer", device, prefixes=("sm_90",))
    from flashinfer.mla import BatchMLAPagedAttentionWrapper, MLAPlanMetadata

    batch, heads, dim = q.shape
    seqlen, pe_dim, page = kv.shape[1], q_pe.shape[2], 64
    if seqlen % page:
        raise Unavailable(f"flashinfer: this harness pages the cache in blocks of {page}; seqlen {seqlen} is not a multiple")
    pages = seqlen // page
    i32 = dict(dtype=torch.int32, device=device)
    wrapper = BatchMLAPagedAttentionWrapper(torch.empty(128 << 20, dtype=torch.uint8, device=device), backend="fa3")
    meta = MLAPlanMetadata.csr(torch.arange(batch + 1, **i32), torch.arange(batch + 1, **i32) * pages,
                               torch.arange(batch * pages, **i32), torch.full((batch,), seqlen, **i32))
    wrapper.plan(metadata=meta, num_heads=heads, head_dim_ckv=dim, head_dim_kpe=pe_dim, page_size=page,
                 causal=False, sm_scale=(dim + pe_dim) ** -0.5, q_data_type=q.dtype, kv_data_type=kv.dtype,
                 query_layout="split", kv_cache_layout="split")
    ckv, kpe = kv.view(-1, page, dim), k_pe.view(-1, page, pe_dim)
    return lambda: wrapper.run(query=(q, q_pe), kv_cache=(ckv, kpe))


def _aiter(q, q_pe, kv, k_pe, device):
    """aiter's MI300X assembly decode, page size 1, as aiter's own tests call it."""
    _require("aiter", "aiter")
    _require_arch("aiter", device, prefixes=("gfx94", "gfx95"))
    if q.dtype != torch.bfloat16:
        raise Unavailable(f"aiter: mla_decode_fwd takes bfloat16 (or fp8) queries, not {q.dtype}")
    from aiter.mla import mla_decode_fwd

    batch, heads, dim = q.shape
    seqlen = kv.shape[1]
    i32 = dict(dtype=torch.int32, device=device)
    q_all = torch.cat([q, q_pe], -1).contiguous()
    cache = torch.cat([kv, k_pe], -1).view(batch * seqlen, 1, 1, -1)
    qo_indptr = torch.arange(batch + 1, **i32)
    kv_indptr = torch.arange(batch + 1, **i32) * seqlen
    kv_indices = torch.arange(batch * seqlen, **i32)
    last_page_lens = torch.ones(batch, **i32)
    out = torch.empty(batch, heads, dim, dtype=q.dtype, device=device)
    scale = q_all.shape[-1] ** -0.5

    def run():
        # Keywords, not positions: newer aiter inserted page_size/nhead_kv before sm_scale.
        mla_decode_fwd(q_all, cache, out, qo_indptr, kv_indptr, kv_indices, last_page_lens, 1,
                       page_size=1, nhead_kv=1, sm_scale=scale)
        return out

    return run


def _torch(q, q_pe, kv, k_pe, device):
    return lambda: mla_decode.reference(q, q_pe, kv, k_pe, compute_dtype=q.dtype)[0]


PREPARE = {
    "tilelang-hopper": partial(_tilelang, "tilelang-hopper"),
    "tilelang-cdna3": partial(_tilelang, "tilelang-cdna3"),
    "flash_mla": _flash_mla,
    "flashinfer": _flashinfer,
    "aiter": _aiter,
    "triton": _triton,
    "torch": _torch,
}


def prepare(impl: str, inputs, device):
    """A zero-argument launch of ``impl`` on ``inputs``; raises Unavailable."""
    if tuned.parse_candidate(impl):  # a config `mlagate tune` times: tilelang-<family>@<config>
        return _tilelang(impl, *inputs, device)
    if impl not in PREPARE:
        raise ValueError(f"unknown implementation {impl!r}; known: {', '.join(PREPARE)}")
    return PREPARE[impl](*inputs, device)

"""The fp8 KV cache kernels (dense and paged) against the reference of the dequantized cache, on a GPU.

The tolerance (rtol = atol = 0.01, the bf16 kernels' own, tests/test_kernel_gpu.py) and why it holds for an fp8 cache:
the reference dequantizes in float64 (fp8 x a float32 scale is exact there), so what is left is the kernel's
rounding, never the quantization's. The kernel converts each fp8 tile to the query's dtype, exactly (every e4m3fn
and e4m3fnuz value is a bf16 and an fp16: 4 significant bits, exponents 2^-10 .. 2^8), and the GEMMs accumulate in
fp32; kv_scale multiplies the fp32 score once (one fp32 rounding, 2^-24 relative) and the output's normalisation once.
So the error budget is the bf16-cache kernel's: P rounded to bf16 before the PV GEMM (relative 2^-8 per weight,
independent, averaging out over >= 1000 tokens: ~2^-8 |v| / sqrt(tokens) on the output) and the output rounded to
bf16 (2^-8 relative, under rtol 0.01). The dequantized values are |v| <= amax of a normal sample (~5), and the
bf16 kernel on the same values (rounded to bf16) is measured beside it: each case prints both errors.
lse is compared absolutely at the dense tests' LSE_ATOL: the score's one extra rounding is 2^-24 relative.
"""

import os

import pytest

torch = pytest.importorskip("torch")

from mlagate.kernels import mla_decode as m  # noqa: E402
from mlagate.kernels import mla_decode_paged as p  # noqa: E402
from test_kernel_gpu import ATOL, LSE_ATOL, RTOL  # noqa: E402

pytestmark = pytest.mark.gpu

# (config, heads, batch, seqlen, s_q): 16 to 128 heads, 1000 to 16384 tokens, one and two query tokens, a split and an
# unsplit launch of each config (hopper fills the device: batch 2 splits, batch 64 does not; cdna3 splits 4). At 16
# heads hopper's converting warpgroup runs: a tail tile, and tile counts that leave a round of four part empty.
DENSE = [(config, *point) for config in ("hopper", "cdna3") for point in (
    (16, 64, 4096, 1), (16, 3, 1000, 2), (16, 128, 4161, 1), (32, 8, 1024, 2), (64, 4, 16384, 1),
    (128, 16, 2048, 2), (128, 2, 8192, 1))]
# (config, heads, page_size, s_q, lengths): the balanced schedule, whole-tile pages and gathered rows, a 1-token
# sequence beside a long one. At 16 heads over whole-tile pages hopper's converters read the pages by TMA, one piece
# after another (a partition's pieces share the barriers' phases).
PAGED = [("hopper", 16, 64, 1, [1, 16384, 4097]), ("hopper", 64, 1, 2, [2, 5000]), ("cdna3", 128, 64, 1, [1, 8192, 63]),
         ("hopper", 16, 1, 2, [3, 7000, 130]), ("hopper", 16, 64, 2, [65, 9000, 640, 2])]


def arch():
    return m.device_arch(torch.cuda.current_device())


def fp8():
    return m.FP8_FORMAT[arch()]


def runs_here(config: str) -> bool:
    return config != "hopper" or arch().startswith("sm_9")


def dense_shape(point, kv_dtype):
    _, heads, batch, seqlen, s_q = point
    return m.Shape(batch=batch, seqlen=seqlen, heads=heads, dtype="bfloat16", s_q=s_q, kv_dtype=kv_dtype)


def paged_kernel(row, kv_dtype):
    config, heads, page_size, s_q, lengths = row
    shape = p.PagedShape.holding(lengths, heads, page_size, "bfloat16", s_q=s_q, kv_dtype=kv_dtype)
    return shape, m.CONFIGS[config].with_(num_split=0)


def compile_one(item) -> None:
    """Compile one kernel for this process's GPU, into TileLang's disk cache."""
    kind, shape, config = item
    (m.compiled if kind == "dense" else p.compiled)(shape, config)


@pytest.fixture(scope="module", autouse=True)
def precompiled():
    from mlagate.measure.precompile import in_processes

    items = [("dense", dense_shape(pt, kv), m.CONFIGS[pt[0]])
             for pt in DENSE if runs_here(pt[0]) for kv in (fp8(), None)]
    items += [("paged", *paged_kernel(row, kv)) for row in PAGED if runs_here(row[0]) for kv in (fp8(), None)]
    jobs = max(1, min(len(items), (os.cpu_count() or 2) - 2))
    failed = [f"{k}: {e}" for k, e in in_processes(compile_one, items, jobs) if isinstance(e, Exception)]
    assert not failed, failed


def max_error(out, ref) -> float:
    return (out.float() - ref).abs().max().item()


def check(out, lse, ref_out, ref_lse):
    assert torch.isfinite(out).all(), "unwritten (NaN) or non-finite output elements"
    torch.testing.assert_close(out.float(), ref_out, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(lse, ref_lse, rtol=0, atol=LSE_ATOL)


def as_bf16_cache(kv, k_pe, kv_scale):
    """The dequantized cache rounded to bf16: the 16-bit kernel's view of the same values."""
    return tuple(t.to(torch.bfloat16) for t in m.dequantized(kv, k_pe, kv_scale))


@pytest.mark.parametrize("point", DENSE, ids=str)
def test_dense_fp8_cache_matches_the_dequantized_reference(point):
    if not runs_here(point[0]):
        pytest.skip(f"the hopper config needs sm_90 (wgmma, TMA); this GPU is {arch()}")
    config = m.CONFIGS[point[0]]
    shape = dense_shape(point, fp8())
    q, q_pe, kv, k_pe, kv_scale = m.random_inputs(shape, device="cuda", seed=sum(point[1:]))
    assert kv.dtype == getattr(torch, fp8()) and k_pe.dtype == kv.dtype
    kernel = m.compiled(shape, config)
    out, lse = torch.full_like(q, float("nan")), torch.full(q.shape[:-1], float("nan"), device="cuda")
    kernel(q, q_pe, kv, k_pe, out, lse, m.scale_tensor(kv_scale, "cuda"))
    torch.cuda.synchronize()
    ref_out, ref_lse = m.reference(q, q_pe, kv, k_pe, kv_scale=kv_scale)
    check(out, lse, ref_out, ref_lse)

    kv16, k_pe16 = as_bf16_cache(kv, k_pe, kv_scale)
    out16, lse16 = torch.empty_like(q), torch.empty(q.shape[:-1], device="cuda")
    m.compiled(dense_shape(point, None), config)(q, q_pe, kv16, k_pe16, out16, lse16)
    torch.cuda.synchronize()
    print(f"\n{point}: max |error| fp8 cache {max_error(out, ref_out):.2e}, bf16 cache of the same values "
          f"{max_error(out16, m.reference(q, q_pe, kv16, k_pe16)[0]):.2e}; "
          f"kernel/num_split {kernel.plan.config.name}/{kernel.plan.num_split}")


@pytest.mark.parametrize("row", PAGED, ids=str)
def test_paged_fp8_cache_matches_the_dequantized_reference(row):
    if not runs_here(row[0]):
        pytest.skip(f"the hopper config needs sm_90 (wgmma, TMA); this GPU is {arch()}")
    _, heads, page_size, s_q, lengths = row
    shape, config = paged_kernel(row, fp8())
    q, q_pe, kv_cache, k_pe_cache, table, seqlens, kv_scale = p.random_paged_inputs(
        len(lengths), heads, lengths, page_size, "bfloat16", "cuda", seed=len(lengths), shuffle=True, s_q=s_q,
        kv_dtype=fp8())
    launch = p.compiled(shape, config, lengths=lengths)
    out, lse = torch.full_like(q, float("nan")), torch.full(q.shape[:-1], float("nan"), device="cuda")
    launch(q, q_pe, kv_cache, k_pe_cache, table, seqlens, out, lse, kv_scale=m.scale_tensor(kv_scale, "cuda"))
    torch.cuda.synchronize()
    ref_out, ref_lse = p.reference_paged(q, q_pe, kv_cache, k_pe_cache, table, seqlens, kv_scale=kv_scale)
    check(out, lse, ref_out, ref_lse)

    kv16, k_pe16 = as_bf16_cache(kv_cache, k_pe_cache, kv_scale)
    out16, lse16 = torch.empty_like(q), torch.empty(q.shape[:-1], device="cuda")
    p.compiled(paged_kernel(row, None)[0], config, lengths=lengths)(q, q_pe, kv16, k_pe16, table, seqlens, out16, lse16)
    torch.cuda.synchronize()
    ref16 = p.reference_paged(q, q_pe, kv16, k_pe16, table, seqlens)[0]
    print(f"\n{row}: max |error| fp8 cache {max_error(out, ref_out):.2e}, bf16 cache of the same values "
          f"{max_error(out16, ref16):.2e}")


@pytest.mark.parametrize("kernel", ["dense", "paged"])
def test_the_converting_warpgroup_repeats_bit_for_bit(kernel):
    """20 launches of a 16-head kernel whose converters hand every tile over through a pair of barriers (and over
    pages, receive it through a TMA stage): a race between them and the consumers would change a bit somewhere."""
    if not arch().startswith("sm_9"):
        pytest.skip(f"the hopper config needs sm_90 (wgmma, TMA); this GPU is {arch()}")
    if kernel == "dense":
        shape = dense_shape(DENSE[2], fp8())  # (16, 128, 4161, 1): a tail, and a last round of four half empty
        q, q_pe, kv, k_pe, kv_scale = m.random_inputs(shape, device="cuda", seed=6)
        launch, cache = m.compiled(shape, m.HOPPER), (kv, k_pe)
        reference = m.reference(q, q_pe, kv, k_pe, kv_scale=kv_scale)
    else:
        row = PAGED[-1]  # s_q 2, pieces of several sequences per partition
        shape, config = paged_kernel(row, fp8())
        q, q_pe, *cache, kv_scale = p.random_paged_inputs(
            len(row[4]), row[1], row[4], row[2], "bfloat16", "cuda", seed=6, s_q=row[3], kv_dtype=fp8())
        launch = p.compiled(shape, config, lengths=row[4])
        reference = p.reference_paged(q, q_pe, *cache, kv_scale=kv_scale)
    assert launch.plan.converters
    scale = m.scale_tensor(kv_scale, "cuda")
    outs = []
    for _ in range(20):
        out, lse = torch.full_like(q, float("nan")), torch.full(q.shape[:-1], float("nan"), device="cuda")
        launch(q, q_pe, *cache, out, lse, kv_scale=scale)
        outs.append((out, lse))
    torch.cuda.synchronize()
    check(*outs[0], *reference)
    differ = [i for i, (out, lse) in enumerate(outs)
              if not (torch.equal(out, outs[0][0]) and torch.equal(lse, outs[0][1]))]
    assert not differ, f"launches {differ} differ from the first"


def test_the_entry_points_take_an_fp8_cache_and_refuse_the_other_archs_format():
    native = m.config_for_arch(arch())
    shape = dense_shape((native.name, *DENSE[1][1:]), fp8())  # a kernel the fixture compiled: two query tokens
    q, q_pe, kv, k_pe, kv_scale = m.random_inputs(shape, device="cuda", seed=3)
    out, lse = m.mla_decode(q, q_pe, kv, k_pe, kv_scale=kv_scale, config=native, return_lse=True)
    check(out, lse, *m.reference(q, q_pe, kv, k_pe, kv_scale=kv_scale))
    other = next(f for f in m.FP8_DTYPES if f != fp8())
    with pytest.raises(ValueError, match=f"kv_dtype: a {other} cache on {arch()}, whose fp8 format is {fp8()}"):
        m.mla_decode(q, q_pe, kv.view(getattr(torch, other)), k_pe.view(getattr(torch, other)), kv_scale=kv_scale)
    with pytest.raises(ValueError, match="kv_scale: an fp8 cache needs"):
        m.mla_decode(q, q_pe, kv, k_pe)

    row = PAGED[2]  # the cdna3 kernel, which runs on both platforms
    q, q_pe, kv_cache, k_pe_cache, table, seqlens, kv_scale = p.random_paged_inputs(
        3, row[1], row[4], row[2], "bfloat16", "cuda", seed=4, kv_dtype=fp8())
    out, lse = p.mla_decode_paged(q, q_pe, kv_cache, k_pe_cache, table, seqlens, kv_scale=kv_scale,
                                  config=paged_kernel(row, fp8())[1], return_lse=True)
    check(out, lse, *p.reference_paged(q, q_pe, kv_cache, k_pe_cache, table, seqlens, kv_scale=kv_scale))
    with pytest.raises(ValueError, match=f"kv_dtype: a {other} cache on {arch()}"):
        p.mla_decode_paged(q, q_pe, kv_cache.view(getattr(torch, other)), k_pe_cache.view(getattr(torch, other)),
                           table, seqlens, kv_scale=kv_scale)


def test_every_fp8_code_reads_as_its_value():
    """One cached token: its softmax weight is exactly 1, so the output is the latent row as the kernel converted it,
    times kv_scale 1: every non-NaN code of the arch's format (zeros, subnormals, the largest) must come out exact,
    which no tolerance-based test of random caches can tell from a flushed subnormal."""
    fmt = getattr(torch, fp8())
    shape = m.Shape(batch=1, seqlen=1, heads=16, dtype="bfloat16", kv_dtype=fp8())
    q, q_pe, kv, k_pe, _ = m.random_inputs(shape, device="cuda", seed=5)
    codes = torch.arange(256, dtype=torch.uint8, device="cuda").view(fmt)
    codes = codes[~codes.float().isnan()]
    row = codes.repeat(-(-kv.shape[-1] // len(codes)))[:kv.shape[-1]]
    kv.copy_(row.expand_as(kv))
    k_pe.zero_()
    out = m.mla_decode(q, q_pe, kv, k_pe, kv_scale=1.0, config=m.config_for_arch(arch()))
    torch.cuda.synchronize()
    expected = row.float().expand(out.shape)
    wrong = (out.float() != expected).nonzero()
    if len(wrong):
        first = tuple(wrong[0])
        code = row[first[-1]].view(torch.uint8).item()
        pytest.fail(f"{len(wrong)} elements differ, e.g. code {code:#04x}: {out.float()[first].item()!r} for "
                    f"{expected[first].item()!r}")

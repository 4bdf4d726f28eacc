"""The fp8 KV cache without a GPU: lowering per architecture and format, input checks, the dequantized reference."""

import dataclasses
import math
import re

import pytest
import torch

from mlagate.kernels import mla_decode as m
from mlagate.kernels import mla_decode_paged as p
from test_kernel_cpu import MMA_CALLS, block, kernel_body

FN, FNUZ = "float8_e4m3fn", "float8_e4m3fnuz"


def test_each_arch_has_one_fp8_format():
    assert m.FP8_FORMAT == {"sm_90": FN, "sm_90a": FN, "gfx942": FNUZ}
    assert m.FP8_DTYPES == (FN, FNUZ)
    for arch, fmt in m.FP8_FORMAT.items():
        m.check_kv_format(fmt, arch)
        m.check_kv_format("bfloat16", arch)  # a 16-bit cache has no format to match
    with pytest.raises(ValueError, match=f"kv_dtype: a {FN} cache on gfx942, whose fp8 format is {FNUZ}"):
        m.check_kv_format(FN, "gfx942:sramecc+:xnack-")
    with pytest.raises(ValueError, match=f"kv_dtype: a {FNUZ} cache on sm_90, whose fp8 format is {FN}"):
        m.check_kv_format(FNUZ, "sm_90")
    with pytest.raises(ValueError, match="no fp8 cache format known for architecture 'sm_80'"):
        m.check_kv_format(FN, "sm_80")


# The fp8 cache as the kernel takes it: tiles of the dtype TileLang 0.1.15 emits for it (fp8_e4_t; on gfx942 its HIP
# header makes that the fnuz variant; on Hopper a TMA descriptor hides the dtype from the signature, not from the
# shared tiles) and the scale, a float32 pointer.
def fp8_params(source: str) -> tuple:
    params = re.search(r"__global__ void (?:__launch_bounds__\([^)]*\) )?\w+\(([^)]*)\)", source).group(1)
    return "fp8_e4_t" in kernel_body(source), bool(re.search(r"float\* __restrict__ Kv_scale\b", params))


@pytest.mark.parametrize("arch,fmt,config,marker", [
    ("gfx942", FNUZ, "cdna3", "mfma"),
    pytest.param("gfx942", FNUZ, "cdna3-no-split", "mfma", marks=pytest.mark.slow),
    pytest.param("sm_90a", FN, "hopper", "wgmma", marks=pytest.mark.slow),
    pytest.param("sm_90a", FN, "cdna3", "mma", marks=pytest.mark.slow),
])
def test_fp8_cache_kernels_lower_without_a_gpu(arch, fmt, config, marker):
    cfg = m.CDNA3.with_(num_split=1) if config == "cdna3-no-split" else m.CONFIGS[config]
    shape = m.Shape(batch=64, seqlen=4096, heads=128, dtype="bfloat16", kv_dtype=fmt)
    source = m.lower(shape, cfg, arch)
    assert fp8_params(source) == (True, True)
    assert len(re.findall(MMA_CALLS[marker], kernel_body(source))) >= 3, marker
    # kv_scale folded into the score scale, not multiplied into a K element: 0.0601 = 576 ** -0.5 * log2(e)
    assert re.search(r"6\.011229e-02\S* \* Kv_scale\[0\]", source)
    sixteen = m.lower(m.Shape(batch=64, seqlen=4096, heads=128, dtype="bfloat16"), cfg, arch)
    assert fp8_params(sixteen) == (False, False) and "Kv_scale" not in sixteen



def innermost_loops(source: str) -> list:
    """The bodies of the source's `for` loops that hold no other loop."""
    bodies = (block(source, mo.start()) for mo in re.finditer(r"for \(int [^)]*\) \{", source))
    return [b for b in bodies if "for (" not in b]


CONVERTS = ("_stage)", "__tl_cvt_")  # a loop reading a staging tile, or converting fp8 pairs


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["dense", "paged"])
def test_an_fp8_tile_is_converted_without_a_barrier_per_step_and_by_its_bits_on_sm_90(kernel):
    """The fp8 tile goes stage -> registers -> bf16 tile: no barrier inside a loop that reads a stage or converts
    (a shared-to-shared copy put one in every step), and the pairs go through E4M3_TO_BF16, which renames the
    converter TileLang calls: if a TileLang release renames it, this fails instead of the kernel slowing silently."""
    if kernel == "dense":  # 128 heads: converted in the consumers' loop (16 heads: by converters)
        source = m.lower(m.Shape(batch=64, seqlen=4096, heads=128, dtype="bfloat16", kv_dtype=FN), m.HOPPER, "sm_90a")
    else:
        shape = p.PagedShape(batch=4, heads=16, max_pages=64, page_size=64, dtype="bfloat16", kv_dtype=FN)
        source = p.lower(shape, m.HOPPER.with_(num_split=0), "sm_90a")
    converting = [b for b in innermost_loops(kernel_body(source)) if any(c in b for c in CONVERTS)]
    assert len(converting) >= 2
    assert not [b for b in converting if "__sync" in b], "a barrier inside a converting loop"
    assert "#define __tl_cvt_e4m3x2_to_bfloat162 mlagate_e4m3x2_to_bf16x2" in source
    assert "__tl_cvt_e4m3x2_to_bfloat162(" in kernel_body(source)


def test_an_fp8_cache_under_one_consumer_warpgroup_gets_a_converting_warpgroup():
    """Under a wgmma tile (16 heads, or 32 rows at s_q 2) on sm_90 a second warpgroup converts; two consumer
    warpgroups, a 16-bit cache, gfx942's register-resident config: none."""
    def threads(shape, config=m.HOPPER, arch="sm_90a"):
        plan = m.plan(shape, config, arch)
        return plan.threads, plan.converters, plan.block_threads

    fp8 = m.Shape(batch=64, seqlen=4096, heads=16, dtype="bfloat16", kv_dtype=FN)
    assert threads(fp8) == threads(dataclasses.replace(fp8, s_q=2)) == threads(fp8, m.SEESAW) == (128, 128, 256)
    assert threads(dataclasses.replace(fp8, s_q=4)) == threads(dataclasses.replace(fp8, heads=128)) == (256, 0, 256)
    assert threads(dataclasses.replace(fp8, kv_dtype="bfloat16")) == (128, 0, 128)
    assert threads(dataclasses.replace(fp8, kv_dtype=FNUZ), m.CDNA3, "gfx942")[1:] == (0, 64)
    assert threads(dataclasses.replace(fp8, kv_dtype=FNUZ), m.HOPPER, "gfx942")[1] == 0  # no mbarriers there
    assert threads(fp8, m.CDNA3)[1] == 0  # operands in registers: the in-loop conversion, on sm_90 too
    paged = p.PagedShape(batch=4, heads=16, max_pages=64, page_size=64, dtype="bfloat16", kv_dtype=FN)
    for num_split in (0, 1, 4):  # balanced, unsplit, split: converters fed by TMA from whole-tile pages
        plan = p.plan(paged, m.HOPPER.with_(num_split=num_split), "sm_90a")
        assert (plan.threads, plan.converters, plan.block_threads) == (128, 128, 256)
    gathered = p.plan(dataclasses.replace(paged, page_size=1, max_pages=4096), m.HOPPER.with_(num_split=0), "sm_90a")
    assert (gathered.converters, gathered.block_threads) == (0, 128)  # a row per page is no TMA box: in the loop
    assert p.plan(dataclasses.replace(paged, heads=128), m.HOPPER.with_(num_split=0), "sm_90a").converters == 0


@pytest.mark.slow
@pytest.mark.parametrize("kernel,batch,seqlen,s_q,result", [
    ("dense", 64, 4000, 2, "glse"), ("dense", 128, 4161, 1, "Lse"),
    ("paged", 4, 4096, 2, "glse"), ("paged-split", 4, 4096, 1, "glse"), ("paged-unsplit", 4, 4096, 1, "Lse")])
def test_the_converters_convert_and_the_consumers_multiply_and_write(kernel, batch, seqlen, s_q, result):
    """The two roles of a 16-head fp8 kernel (split and unsplit; dense and over pages), lowered for sm_90a: the
    converters read, convert and hand each bf16 tile over (waiting for its release on the parity before the use's: a
    fresh barrier lets the first pass), the consumers wait for it on the use's parity, multiply, release it and alone
    write the result; each role syncs on a named barrier of its own and none on the whole block after the split
    (that would deadlock them). A dense cache that ends inside a tile reads its missing rows as zeros, not past the
    tensor; pages reach the converters by TMA through one stage, waited on at both parities."""
    if kernel == "dense":
        shape = m.Shape(batch=batch, seqlen=seqlen, heads=16, dtype="bfloat16", s_q=s_q, kv_dtype=FN)
        source = kernel_body(m.lower(shape, m.HOPPER, "sm_90a"))
    else:
        shape = p.PagedShape(batch=batch, heads=16, max_pages=seqlen // 64, page_size=64, dtype="bfloat16", s_q=s_q,
                             kv_dtype=FN)
        num_split = {"paged": 0, "paged-split": 4, "paged-unsplit": 1}[kernel]  # balanced, fixed splits, none
        source = kernel_body(p.lower(shape, m.HOPPER.with_(num_split=num_split), "sm_90a"))
    split = source.index("if (128 <= ((int)threadIdx.x)) {")
    converters = block(source, split)
    rest = source[source.index(converters, split) + len(converters):]
    assert rest.startswith("} else {")
    consumers = block(rest, 0)
    writes = block(rest, rest.index("if (((int)threadIdx.x) < 128) {"))
    for b in (0, 1):
        assert f"full[{b}].arrive()" in converters and f"empty[{b}].arrive()" in consumers
    if kernel == "dense":  # a pair of slots per iteration: the parity of the pair's use
        for b in (0, 1):
            assert re.search(rf"empty\[{b}\]\.wait\(\(1 - \((\w+) & 1\)\)\)", converters)
            assert re.search(rf"full\[{b}\]\.wait\(\((\w+) & 1\)\)", consumers)
    else:  # a round of four slots per iteration, the tiles used twice each: constant parities, in slot order
        slots = [(b, use) for use in "01" for b in "01"]  # slots 0..3: (tile, the parity of its use)
        assert re.findall(r"full\[(\d)\]\.wait\((\d)\)", consumers) == slots
        assert re.findall(r"empty\[(\d)\]\.wait\((\d)\)", converters) == [(b, str(1 - int(u))) for b, u in slots]
    assert "__tl_cvt_" in converters and "__tl_cvt_" not in consumers
    assert re.search(MMA_CALLS["mma"], consumers) and not re.search(MMA_CALLS["mma"], converters)
    named = [set(re.findall(r"__sync_thread_partial\((\d+), 128\)", role)) for role in (converters, consumers)]
    assert all(named) and not named[0] & named[1]
    assert "__syncthreads()" not in converters + consumers + writes
    assert re.search(rf"\b{result}\[", writes)
    assert not re.search(r"\b(glse|O_partial|Output|Lse)\[", converters + consumers)
    if kernel == "dense":
        assert "tl::broadcast<" in converters  # the zero rows past the cache's end
    else:
        assert "tl::tma_load(KV_desc, loaded[0]" in converters and "tma_load" not in consumers
        assert re.findall(r"loaded\[0\]\.wait\((\d)\)", converters) == ["0", "1", "0", "1"]
        # One arrival per copy on the stage's barrier of one expected arrival (TileLang folds the elected arrive into
        # the last copy's arrive_and_expect_tx): the first tile's and each slot's next; a bare one for a copy past
        # the last tile, which the round's last slot never makes (its next is in the next round, or none).
        issues = converters.count("loaded[0].expect_transaction(")
        assert issues == 5 and converters.count("loaded[0].arrive_and_expect_tx(") == issues
        assert converters.count("loaded[0].arrive()") == 3


@pytest.mark.parametrize("arch,dtype,fmt", [
    ("gfx942", "bfloat16", FNUZ), pytest.param("sm_90a", "float16", FN, marks=pytest.mark.slow)])
def test_the_bf16_converter_is_imported_only_where_it_is_called(arch, dtype, fmt):
    """hipcc has no __nv_bfloat162, and an fp16 query converts with TileLang's one fp8-to-half instruction."""
    config = m.CDNA3 if arch == "gfx942" else m.HOPPER
    source = m.lower(m.Shape(batch=64, seqlen=4096, heads=16, dtype=dtype, kv_dtype=fmt), config, arch)
    assert "mlagate_e4m3x2_to_bf16x2" not in source

@pytest.mark.slow
@pytest.mark.parametrize("arch,fmt,config,page_size", [
    ("sm_90a", FN, "hopper", 64), ("sm_90a", FN, "hopper", 1), ("gfx942", FNUZ, "cdna3", 64),
])
def test_fp8_paged_kernels_lower_without_a_gpu(arch, fmt, config, page_size):
    shape = p.PagedShape(batch=4, heads=16, max_pages=64, page_size=page_size, dtype="bfloat16", kv_dtype=fmt)
    source = p.lower(shape, m.CONFIGS[config].with_(num_split=0), arch)
    assert fp8_params(source) == (True, True)


def test_an_fp8_seesaw_cache_runs_the_pipelined_kernel_and_a_wrong_format_is_refused_before_lowering():
    from mlagate.case import FP8_KERNEL_OF

    fp8 = m.Shape(batch=64, seqlen=4096, heads=16, dtype="bfloat16", kv_dtype=FN)
    seesaw = m.plan(fp8, m.SEESAW, "sm_90a")
    assert seesaw.config.schedule == "pipelined"
    assert f"tilelang-{seesaw.config.name}" == FP8_KERNEL_OF["tilelang-seesaw"]
    assert m.plan(fp8, m.HOPPER, "sm_90a") == seesaw  # the hopper family's kernel, as the label says
    assert m.plan(dataclasses.replace(fp8, kv_dtype="bfloat16"), m.SEESAW, "sm_90a").config == m.SEESAW
    with pytest.raises(ValueError, match=f"kv_dtype: a {FN} cache on gfx942"):
        m.plan(fp8, m.CDNA3, "gfx942")
    paged = p.PagedShape(batch=2, heads=16, max_pages=4, page_size=64, dtype="bfloat16", kv_dtype=FNUZ)
    with pytest.raises(ValueError, match=f"kv_dtype: a {FNUZ} cache on sm_90a"):
        p.plan(paged, m.HOPPER.with_(num_split=0), "sm_90a")
    assert p.plan(paged, m.CDNA3.with_(num_split=0), "gfx942").shape.dense().kv_dtype == FNUZ


def test_shape_kv_dtype_defaults_to_the_query_dtype_and_is_checked():
    assert m.Shape(batch=1, seqlen=8, dtype="bfloat16").kv_dtype == "bfloat16"
    assert m.Shape(batch=1, seqlen=8, dtype="bfloat16") == m.Shape(batch=1, seqlen=8, dtype="bfloat16",
                                                                   kv_dtype="bfloat16")
    assert m.Shape(batch=1, seqlen=8, kv_dtype=FN).kv_fp8 and not m.Shape(batch=1, seqlen=8).kv_fp8
    for kv_dtype in (FN, FNUZ):
        m.Shape(batch=1, seqlen=8, dtype="bfloat16", kv_dtype=kv_dtype).check()
    for bad in ("float16", "float32", "float8_e5m2", "e4m3"):
        with pytest.raises(ValueError, match=f"kv_dtype must be the query's dtype 'bfloat16' or an fp8 format.*{bad}"):
            m.Shape(batch=1, seqlen=8, dtype="bfloat16", kv_dtype=bad).check()
        with pytest.raises(ValueError, match="kv_dtype must be"):
            p.PagedShape(batch=1, heads=16, max_pages=1, page_size=1, dtype="bfloat16", kv_dtype=bad).check()
    paged = p.PagedShape.holding([5, 70], 16, 64, "bfloat16", kv_dtype=FN)
    assert paged.dense().kv_dtype == paged.at_mean_length([5, 70]).kv_dtype == FN


def fp8_inputs(fmt=FN, **shape):
    shape = m.Shape(**{"batch": 2, "seqlen": 64, "heads": 16, "dtype": "bfloat16", "dim": 32, "pe_dim": 8,
                       "kv_dtype": fmt, **shape})
    q, q_pe, kv, k_pe, kv_scale = m.random_inputs(shape, seed=0)
    return {"q": q, "q_pe": q_pe, "kv": kv, "k_pe": k_pe, "kv_scale": kv_scale}


@pytest.mark.parametrize("changes,message", [
    (lambda a: {"kv_scale": None}, "kv_scale: an fp8 cache needs its per-tensor scale"),
    (lambda a: {"kv_scale": float("nan")}, "kv_scale: must be positive and finite, got nan"),
    (lambda a: {"kv_scale": float("inf")}, "kv_scale: must be positive and finite, got inf"),
    (lambda a: {"kv_scale": 0.0}, "kv_scale: must be positive and finite, got 0.0"),
    (lambda a: {"kv_scale": -0.5}, "kv_scale: must be positive and finite, got -0.5"),
    (lambda a: {"kv_scale": True}, "kv_scale: must be a float, got bool"),
    (lambda a: {"kv_scale": torch.tensor([0.5])}, "kv_scale: must be a float, got Tensor"),
    (lambda a: {"kv": a["kv"].to(torch.bfloat16), "k_pe": a["k_pe"].to(torch.bfloat16)},
     "kv_scale: given .* for a 16-bit cache, which takes none"),
    (lambda a: {"k_pe": a["k_pe"].to(torch.bfloat16)}, "k_pe: dtype torch.bfloat16 differs from the cache's"),
    (lambda a: {"k_pe": a["k_pe"].view(torch.float8_e4m3fnuz)}, "k_pe: dtype torch.float8_e4m3fnuz differs"),
    (lambda a: {"kv": a["kv"].view(torch.float8_e5m2)}, "kv: dtype must be float16 or bfloat16 .or an fp8 format"),
    (lambda a: {"q": a["q"].to(torch.float8_e4m3fn)}, r"q: dtype must be float16 or bfloat16, got"),
    (lambda a: {}, "q: must be on a GPU"),  # valid inputs: only the device is wrong here
])
def test_fp8_inputs_are_checked_naming_the_argument(changes, message):
    args = fp8_inputs()
    args.update(changes(args))
    with pytest.raises(ValueError, match=message):
        m.mla_decode(**args)


def test_valid_fp8_inputs_give_their_shape(monkeypatch):
    monkeypatch.setattr(m, "check_device", lambda named: None)
    for fmt in (FN, FNUZ):
        args = fp8_inputs(fmt)
        assert m.check_inputs(**args) == m.Shape(batch=2, seqlen=64, heads=16, dtype="bfloat16", dim=32, pe_dim=8,
                                                 kv_dtype=fmt)


def test_paged_fp8_inputs_are_checked(monkeypatch):
    q, q_pe, kv, k_pe, table, seqlens, kv_scale = p.random_paged_inputs(
        2, 16, [5, 70], 64, "bfloat16", dim=32, pe_dim=8, kv_dtype=FNUZ)
    assert kv.dtype == k_pe.dtype == torch.float8_e4m3fnuz and isinstance(kv_scale, float)
    with pytest.raises(ValueError, match="kv_scale: an fp8 cache needs"):
        p.mla_decode_paged(q, q_pe, kv, k_pe, table, seqlens)
    with pytest.raises(ValueError, match="kv_scale: must be positive and finite"):
        p.mla_decode_paged(q, q_pe, kv, k_pe, table, seqlens, kv_scale=-1.0)
    with pytest.raises(ValueError, match="kv_scale: given"):
        p.mla_decode_paged(q, q_pe, kv.bfloat16(), k_pe.bfloat16(), table, seqlens, kv_scale=kv_scale)
    with pytest.raises(ValueError, match="k_pe_cache: dtype torch.bfloat16 differs from the cache's"):
        p.mla_decode_paged(q, q_pe, kv, k_pe.bfloat16(), table, seqlens, kv_scale=kv_scale)
    monkeypatch.setattr(p, "check_device", lambda named: None)
    shape = p.check_paged_inputs(q, q_pe, kv, k_pe, table, seqlens, kv_scale)
    assert shape == p.PagedShape.holding([5, 70], 16, 64, "bfloat16", dim=32, pe_dim=8, kv_dtype=FNUZ)


@pytest.mark.parametrize("fmt", [FN, FNUZ])
def test_quantize_is_a_serving_engines_per_tensor_scale(fmt):
    kv, k_pe = torch.randn(2, 300, 1, 32) * 3, torch.randn(2, 300, 1, 8)
    kv8, k_pe8, kv_scale = m.quantize(kv, k_pe, fmt)
    fp8_max = torch.finfo(getattr(torch, fmt)).max
    amax = max(kv.abs().max().item(), k_pe.abs().max().item())
    assert kv_scale == torch.tensor(amax / fp8_max, dtype=torch.float32).item()  # a float32 value, as kernels read
    assert max(kv8.float().abs().max().item(), k_pe8.float().abs().max().item()) == fp8_max
    kv64, k_pe64 = m.dequantized(kv8, k_pe8, kv_scale)
    assert kv64.dtype == torch.float64
    # e4m3 keeps 3 mantissa bits: a normal value within 2^-4 relative; a subnormal within half its step
    step = 2.0 ** (-9 if fmt == FN else -10) * kv_scale
    for got, want in ((kv64, kv), (k_pe64, k_pe)):
        assert ((got - want.double()).abs() <= want.double().abs() * 2 ** -4 + step / 2).all()


def test_the_reference_of_an_fp8_cache_is_the_reference_of_its_dequantized_values():
    args = fp8_inputs(FNUZ, s_q=2)
    q, q_pe, kv, k_pe, kv_scale = args.values()
    out, lse = m.reference(q, q_pe, kv, k_pe, torch.float64, kv_scale=kv_scale)
    kv64, k_pe64 = kv.double() * kv_scale, k_pe.double() * kv_scale
    want_out, want_lse = m.reference(q, q_pe, kv64, k_pe64, torch.float64)
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
    # and that is attention over those values, computed naively in float64
    query = torch.cat([q, q_pe], -1).double().flatten(1, 2)  # [b, s_q x heads, 40]
    key = torch.cat([kv64, k_pe64], -1)[:, :, 0]
    scores = query @ key.transpose(1, 2) / math.sqrt(40)
    scores = scores.masked_fill(~m.causal_mask(2, 16, 64, "cpu"), -math.inf)
    naive = torch.softmax(scores, -1) @ kv64[:, :, 0]
    torch.testing.assert_close(out.flatten(1, 2), naive, rtol=1e-12, atol=1e-12)
    # the scale matters: the fp8 values read as they are give another answer
    assert not torch.allclose(m.reference(q, q_pe, kv.double(), k_pe.double(), torch.float64)[0], out, atol=0.01)


def test_the_paged_reference_dequantizes_too():
    q, q_pe, kv, k_pe, table, seqlens, kv_scale = p.random_paged_inputs(
        2, 16, [5, 70], 64, "bfloat16", dim=32, pe_dim=8, kv_dtype=FN)
    out, lse = p.reference_paged(q, q_pe, kv, k_pe, table, seqlens, torch.float64, kv_scale=kv_scale)
    want = p.reference_paged(q, q_pe, kv.double() * kv_scale, k_pe.double() * kv_scale, table, seqlens,
                             torch.float64)
    assert torch.equal(out, want[0]) and torch.equal(lse, want[1])


def test_random_fp8_inputs_are_seeded():
    a, b = fp8_inputs(), fp8_inputs()
    assert all(torch.equal(x.view(torch.uint8) if x.dtype.itemsize == 1 else x, y.view(torch.uint8)
                           if y.dtype.itemsize == 1 else y) for x, y in zip(list(a.values())[:4], list(b.values())[:4]))
    assert a["kv_scale"] == b["kv_scale"] > 0 and a["kv"].dtype == torch.float8_e4m3fn
    sixteen = m.random_inputs(m.Shape(batch=2, seqlen=64, heads=16, dtype="bfloat16", dim=32, pe_dim=8), seed=0)
    assert len(sixteen) == 4  # a 16-bit cache: no scale


def test_the_ladder_wraps_the_attend_macro_before_and_after_its_kv_scale():
    from mlagate.ladder import rules as ladder

    source = open(m.__file__).read()
    assert ladder.unpatchable(source) is None
    earlier = source.replace("def attend(Q, Q_pe, KV, K_pe, Kv_scale, Block_table, bx",
                             "def attend(Q, Q_pe, KV, K_pe, Block_table, bx")  # each attend macro's
    assert earlier != source and ladder.unpatchable(earlier) is None
    assert "def spun(Q, Q_pe, KV, K_pe, Block_table," in ladder.patched(earlier, 5, {("hopper",): 1}, "r")
    assert "def spun(Q, Q_pe, KV, K_pe, Kv_scale, Block_table," in ladder.patched(source, 5, {("hopper",): 1}, "r")


def store_bank_groups(source: str):
    """{(tile, loop value, first thread): the 16-byte bank groups (of 8, 128 bytes a row of banks) that each
    16-byte bf16 store of the converters hits, one per thread of an 8-thread phase}, evaluated from the lowered
    CUDA's index expressions for every converter thread (128..255) and every value of the store's loop."""
    groups = {}
    for tile, expr in re.findall(r"\(\(bfloat16_t\*\)(KV_\d|K_pe_\d)\) \+ (\(.*\))\) = \*\(uint4\*\)", source):
        (var,) = set(re.findall(r"\b(i_\d+)\b", expr))
        extent = int(re.findall(rf"for \(int {var} = 0; {var} < (\d+);", source)[0])
        code = compile(expr.replace("((int)threadIdx.x)", "tx"), "<store>", "eval")
        for value in range(extent):
            for first in range(128, 256, 8):
                at = [eval(code, {var: value, "tx": tx}) for tx in range(first, first + 8)]
                groups[tile, value, first] = [element // 8 % 8 for element in at]  # 8 bf16 a 16-byte group
    return groups


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["dense", "paged"])
def test_the_converters_store_a_bf16_tile_without_bank_conflicts(kernel):
    """Eight neighbouring converters store into eight different bank groups of the swizzled bf16 tile (K and its
    RoPE part): TileLang's 16-element register layout put two on each group, a 2-way conflict on every store, 4-6%
    of the dense kernel's time at 16 heads (docs/measurements.md, 2026-12-07)."""
    if kernel == "dense":
        source = m.lower(m.Shape(batch=64, seqlen=4096, heads=16, dtype="bfloat16", kv_dtype=FN), m.HOPPER, "sm_90a")
    else:
        shape = p.PagedShape(batch=64, heads=16, max_pages=64, page_size=64, dtype="bfloat16", kv_dtype=FN)
        source = p.lower(shape, m.HOPPER, "sm_90a")
    groups = store_bank_groups(kernel_body(source))
    assert {tile for tile, _, _ in groups} == {"KV_0", "KV_1", "K_pe_0", "K_pe_1"}
    conflicted = {key: hit for key, hit in groups.items() if len(set(hit)) < 8}
    assert not conflicted, f"{len(conflicted)} of {len(groups)} phases conflict, e.g. {next(iter(conflicted.items()))}"


def launch_checks(host: str, function: str) -> dict:
    """{argument: the dims its launch check asserts, by position}, read from a lowered host module (TileLang names
    an argument's checks after the last view of it: mapped back through the handle each check reads)."""
    handles = dict(re.findall(rf"{function}_(\w+)_shape: .*tvm_struct_get\((\w+)_handle, 0, 2,", host))
    dims = {}
    for name, axis, value in re.findall(rf"{function}_(\w+)_shape_1\[(\d+)\]\) == (\d+)", host):
        dims.setdefault(handles.get(name, name), {})[int(axis)] = int(value)
    return {arg: [d[i] for i in sorted(d)] for arg, d in dims.items()}


@pytest.mark.slow
def test_the_converters_views_of_the_cache_leave_its_launch_checks_its_own():
    """The dense converters read the cache through chunked views of KV and K_pe; the launch still checks each argument
    against its own shape (two views of one name made it check KV against K_pe's: every fp8 launch failed)."""
    shape = m.Shape(batch=64, seqlen=4096, heads=16, dtype="bfloat16", kv_dtype=FN)
    host = str(m.lowered(m.plan(shape, m.HOPPER, "sm_90a"), "sm_90a").host_mod)
    checks = launch_checks(host, "main_split")
    assert checks.get("KV") == [64, 4096, 1, 512] and checks.get("K_pe") == [64, 4096, 1, 64], checks

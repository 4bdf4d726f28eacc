"""What can be known about the kernels without a GPU: lowering, reference, validation."""

import math
import re

import pytest
import torch

from mlagate.kernels import mla_decode as m
from mlagate.measure import harness
from test_kernel_gpu import ATOL, LSE_ATOL, RTOL  # the GPU tests' comparisons, checked here on the reference

# Tensor-core instructions as called in a kernel's body (TileLang 0.1.15's code generation); the
# headers that declare them (#include <tl_templates/cuda/instruction/mma.h>) do not count.
MMA_CALLS = {
    "mfma": r"__builtin_amdgcn_mfma_\w+\(",
    "wgmma": r"\btl::wgmma_(?:ss|rs)<",
    "mma": r"\btl::(?:mma_sync|wgmma_ss|wgmma_rs)<",
}


def kernel_body(source: str) -> str:
    """Device source from the first kernel on, without preprocessor lines."""
    body = source[source.index("__global__"):]
    return "\n".join(line for line in body.splitlines() if not line.lstrip().startswith("#"))


def block(source: str, at: int) -> str:
    """The body of the first brace block opened at or after ``at``."""
    start = source.index("{", at) + 1
    depth, end = 1, start
    while depth:
        depth += {"{": 1, "}": -1}.get(source[end], 0)
        end += 1
    return source[start:end - 1]


def test_an_include_is_not_an_mma_call():
    source = "#include <tl_templates/cuda/instruction/mma.h>\n#include <tl_templates/cuda/instruction/wgmma.h>\n" \
             "extern \"C\" __global__ void main_kernel(float* acc_s) {\n#pragma unroll\n  acc_s[0] = 0;\n}\n"
    assert not any(re.search(p, kernel_body(source)) for p in MMA_CALLS.values())
    call = source.replace("acc_s[0] = 0;", "tl::mma_sync<tl::DataType::kFloat16>(acc_s);")
    assert re.search(MMA_CALLS["mma"], kernel_body(call))


@pytest.mark.parametrize("arch,config,marker", [
    ("gfx942", "cdna3", "mfma"),  # the fast lane's lowering of the dense kernel
    pytest.param("gfx942", "cdna3-no-split", "mfma", marks=pytest.mark.slow),
    pytest.param("sm_90", "hopper", "wgmma", marks=pytest.mark.slow),
    pytest.param("sm_90", "cdna3", "mma", marks=pytest.mark.slow),
])
def test_configs_lower_without_a_gpu(arch, config, marker):
    cfg = m.CDNA3.with_(num_split=1) if config == "cdna3-no-split" else m.CONFIGS[config]
    source = m.lower(m.Shape(batch=64, seqlen=4096), cfg, arch)
    assert "__global__" in source
    # the three GEMMs of attend(): Q·KV, Q_pe·K_pe, P·KV
    assert len(re.findall(MMA_CALLS[marker], kernel_body(source))) >= 3, marker
    if cfg.num_split > 1:  # split kernel + combine kernel
        assert source.count("__global__ void") >= 2


@pytest.mark.slow
def test_fewer_heads_than_the_head_block_lower():
    """16 heads: the head block shrinks to 16 (TMA tiles must match the tensor)."""
    source = m.lower(m.Shape(batch=1, seqlen=1000, heads=16), m.HOPPER, "sm_90")
    assert "__global__" in source


# The tail mask (program(): `if masked:`) sets the scores of tokens at or past seqlen to MASKED (-2 ** 100) before
# the softmax. TileLang emits it as a select on the score fragment acc_s, between its own value and a
# MASKED broadcast, under a bound on the token index (simplified by the vector width: "< 250" for 1000
# tokens in steps of 4). TileLang's own bounds check on the KV copy is a select too, but of KV and zero,
# and it stays when the mask is removed.
TAIL_MASK = re.compile(
    r"float (?P<inf>\w+) = (?:-1\.267651e\+30f|-0x1p\+100f/\*-1\.267651e\+30\*/);\s*"  # HIP, CUDA: -2 ** 100
    r"float\d (?P<sel>condval\w*);\s*"
    r"if \([^{;]* < \d+\)+ \{\s*"
    r"(?P=sel) = \*\(float\d\*\)\(acc_s(?:_\d+)? \+ [^;]*\);\s*"
    r"\} else \{\s*"
    r"(?P=sel) = make_float\d\((?P=inf)(?:, (?P=inf))*\);\s*"
    r"\}\s*"
    r"\*\(float\d\*\)\(acc_s(?:_\d+)? \+ [^;]*\) = (?P=sel);")


@pytest.mark.parametrize("arch, config", [  # gfx942's cdna3 in the fast lane; the seesaw's alone takes ~10 s
    pytest.param(arch, name, marks=() if (arch, name) == ("gfx942", "cdna3") else pytest.mark.slow)
    for arch in ("gfx942", "sm_90a") for name, cfg in m.CONFIGS.items() if cfg.runs_on(arch)])
def test_masked_lowering_sets_the_tail_scores_to_the_mask_value(arch, config):
    """One masked tile per kernel; the seesaw's is its odd warpgroup's: the even one's tiles of 1000 tokens in 128-token
    splits all end by token 960, which TVM proves and drops the mask."""
    cfg = m.CONFIGS[config]
    tail = m.Shape(batch=1, seqlen=1000, heads=16)
    assert m.plan(tail, cfg, arch).masked
    assert len(TAIL_MASK.findall(m.lower(tail, cfg, arch))) == 1
    whole = m.Shape(batch=1, seqlen=1024, heads=16)  # whole tiles in every split: no mask is generated
    assert not m.plan(whole, cfg, arch).masked
    assert not TAIL_MASK.search(m.lower(whole, cfg, arch))


def test_config_chooser():
    assert m.config_for_arch("gfx942") is m.CDNA3
    assert m.config_for_arch("gfx942:sramecc+:xnack-") is m.CDNA3
    assert m.config_for_arch("sm_90") is m.HOPPER
    with pytest.raises(ValueError, match="no tuned config for architecture 'sm_80'"):
        m.config_for_arch("sm_80")


def test_targets():
    assert m.target_for("sm_90") == {"kind": "cuda", "arch": "sm_90a"}
    assert m.target_for("gfx942") == {"kind": "hip", "mcpu": "gfx942"}
    with pytest.raises(ValueError, match="unknown architecture"):
        m.target_for("tpu")


def test_split_count_fills_the_device():
    # 64 x 128 heads / 64 = 128 blocks fill 97% of 132 SMs: no split; 32 x 2 = 64 blocks: two splits.
    assert m.resolve_num_split(m.Shape(batch=64, seqlen=8192), m.HOPPER, 132) == 1
    assert m.resolve_num_split(m.Shape(batch=32, seqlen=8192), m.HOPPER, 132) == 2
    assert m.resolve_num_split(m.Shape(batch=128, seqlen=8192), m.HOPPER, 132) == 1
    assert m.resolve_num_split(m.Shape(batch=1, seqlen=8192), m.HOPPER, 132) == 32
    assert m.resolve_num_split(m.Shape(batch=1, seqlen=8192), m.CDNA3, 304) == 4


@pytest.mark.parametrize("seqlen,num_split,want_split,want_len,masked", [
    (8192, 4, 4, 2048, False),
    (1000, 4, 4, 256, True),
    (1, 4, 1, 32, True),        # one token: the empty splits are dropped
    (33, 4, 2, 32, True),
    (4097, 1, 1, 4128, True),
])
def test_plan_fits_splits_to_the_sequence(seqlen, num_split, want_split, want_len, masked):
    p = m.plan(m.Shape(batch=1, seqlen=seqlen), m.CDNA3.with_(num_split=num_split), "gfx942")
    assert (p.num_split, p.split_len, p.masked) == (want_split, want_len, masked)
    assert (p.num_split - 1) * p.split_len < seqlen <= p.num_split * p.split_len


@pytest.mark.parametrize("config,arch", [("HOPPER", "sm_90"), ("CDNA3", "gfx942")])
def test_a_head_block_short_of_one_mma_tile_is_refused_before_lowering(config, arch):
    """TP16's 8 heads: the pipelined schedule's score GEMM would get M = 8, which TileLang refuses while
    lowering ("M must be divisible by 16", seen on the H200 and on a CPU); plan names the rule first."""
    cfg = getattr(m, config)
    with pytest.raises(ValueError, match=rf"config {cfg.name}: 8 query rows \(s_q x heads\) make a head block of 8 "
                                         r"rows; the pipelined schedule needs a multiple of 16"):
        m.plan(m.Shape(batch=2, seqlen=4096, heads=8), cfg, arch)
    assert m.plan(m.Shape(batch=2, seqlen=4096, heads=8, s_q=2), cfg, arch).block_H == 16  # MTP fills the tile
    assert cfg.refuses_rows(16) is None and cfg.refuses_rows(24)  # 24 < block_H 64: a block of 24 rows
    assert m.SEESAW.refuses_rows(8) is None  # its 64-row tile is padded
    assert m.plan(m.Shape(batch=2, seqlen=4096, heads=8), m.SEESAW, "sm_90").block_H == 8
    # a seesaw cache of one tile runs the hopper config, which refuses 8 heads
    short = m.Shape(batch=2, seqlen=64, heads=8)
    assert m.kernel_config(short, m.SEESAW).refuses_rows(8)


@pytest.mark.slow
def test_the_seesaw_lowers_at_8_heads():
    assert "main" in m.lower(m.Shape(batch=2, seqlen=4096, heads=8), m.SEESAW, "sm_90")


def test_heads_must_fill_head_blocks():
    with pytest.raises(ValueError, match=r"query rows \(96 = s_q 1 x heads 96\) must be a multiple of the head block"):
        m.plan(m.Shape(batch=1, seqlen=64, heads=96), m.CDNA3, "gfx942")
    assert m.plan(m.Shape(batch=1, seqlen=64, heads=16), m.CDNA3, "gfx942").block_H == 16


@pytest.mark.parametrize("heads,arch,threads", [
    (16, "gfx942", 64), (32, "gfx942", 128), (64, "gfx942", 128), (128, "gfx942", 128),  # 64-wide wavefronts
    (16, "sm_90", 32), (32, "sm_90", 64), (64, "sm_90", 128), (128, "sm_90", 128),       # 32-wide warps
])
def test_register_resident_scores_get_one_warp_per_16_heads(heads, arch, threads):
    """More warps than 16-row tiles of the head block leave a warp without rows: TileLang then fails to
    lay out the scores ("Layout infer conflict between acc_s and P_buf" at TP8's 16 heads on gfx942)."""
    assert m.plan(m.Shape(batch=64, seqlen=4096, heads=heads), m.CDNA3, arch).threads == threads
    hopper = m.plan(m.Shape(batch=64, seqlen=4096, heads=heads), m.HOPPER, arch)
    assert hopper.threads == (m.HOPPER.threads if heads >= 64 else m.WARPGROUP)  # under a wgmma tile: one warpgroup


@pytest.mark.parametrize("heads,s_q,one_warpgroup", [(16, 1, True), (16, 2, True), (16, 4, False), (32, 1, True),
                                                     (32, 2, False), (64, 1, False), (8, 2, True)])
def test_a_shared_operand_head_block_under_a_wgmma_tile_runs_one_warpgroup_along_its_rows(heads, s_q, one_warpgroup):
    """Under 64 rows the GEMMs are mma.sync: one warpgroup, warps split the rows (FullRow), dense and paged, whatever
    the config's threads and policy; a 64-row block keeps the config's own."""
    from mlagate.kernels import mla_decode_paged as paged

    shape = m.Shape(batch=64, seqlen=4096, heads=heads, s_q=s_q)
    for config in (m.HOPPER, m.HOPPER.with_(threads=256, policy="FullCol"), m.HOPPER.with_(threads=128)):
        p = m.plan(shape, config, "sm_90a")
        expected = (m.WARPGROUP, "FullRow") if one_warpgroup else (config.threads, config.policy)
        assert (p.threads, p.config.policy) == expected
        pp = paged.plan(paged.PagedShape.holding([4096] * 64, heads, 64, "float16", s_q=s_q), config.with_(num_split=0),
                        "sm_90a")
        assert (pp.threads, pp.config.policy) == expected
    assert m.plan(shape, m.CDNA3, "gfx942").config == m.CDNA3  # register-resident: its own rule (threads_for)


def naive_float64(q, q_pe, kv, k_pe):
    """Softmax attention written out element by element (float64)."""
    b, h, _ = q.shape
    out = torch.zeros(b, h, kv.shape[-1], dtype=torch.float64)
    lse = torch.zeros(b, h, dtype=torch.float64)
    scale = 1 / math.sqrt(q.shape[-1] + q_pe.shape[-1])
    for i in range(b):
        keys = kv[i, :, 0].double()
        for j in range(h):
            s = (keys @ q[i, j].double() + k_pe[i, :, 0].double() @ q_pe[i, j].double()) * scale
            mx = s.max()
            w = torch.exp(s - mx)
            out[i, j] = (w[:, None] * keys).sum(0) / w.sum()
            lse[i, j] = mx + torch.log(w.sum())
    return out, lse


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_reference_matches_naive_float64(dtype):
    shape = m.Shape(batch=2, seqlen=37, heads=4, dtype=dtype, dim=32, pe_dim=8)
    inputs = m.random_inputs(shape, seed=1)
    want_out, want_lse = naive_float64(*inputs)
    out, lse = m.reference(*inputs)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), want_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse.double(), want_lse, rtol=1e-5, atol=1e-5)
    out64, _ = m.reference(*inputs, compute_dtype=torch.float64)
    torch.testing.assert_close(out64, want_out, rtol=1e-10, atol=1e-10)


def test_reference_detects_a_wrong_answer():
    inputs = m.random_inputs(m.Shape(batch=1, seqlen=16, heads=2, dim=16, pe_dim=4), seed=2)
    out, _ = m.reference(*inputs)
    want, _ = naive_float64(*inputs)
    assert not torch.allclose(out.double() * 1.05, want, rtol=1e-2, atol=1e-2)


def test_check_output_accepts_the_reference_in_the_input_dtype():
    expected = torch.randn(2, 16, 512, generator=torch.Generator().manual_seed(0))
    err = harness.check_output(expected.half(), expected)
    assert 0 < err["max_abs"] < 1e-2 and 0 < err["max_rel"] < 1e-2
    assert harness.check_output(expected.flatten(), expected)["max_abs"] == 0  # reshaped to the expected shape


@pytest.mark.parametrize("damage,message", [
    (lambda o: o * 1.05, r"elements off by more than atol=0.01 \+ rtol=0.01"),  # softmax weights off by 5%
    (lambda o: o.index_fill(2, torch.tensor([7]), 5.0), r"^32 of 16384 elements off"),   # one column wrong
    (lambda o: torch.zeros_like(o), r"elements off by more than"),                 # nothing written
    (lambda o: o.index_fill(1, torch.tensor([3]), float("nan")), r"^output has 1024 NaN/Inf elements$"),
    (lambda o: o.index_fill(0, torch.tensor([1]), float("inf")), r"^output has 8192 NaN/Inf elements$"),
])
def test_check_output_refuses_a_wrong_answer(damage, message):
    """What the harness does before timing any implementation: a wrong or unwritten output is WrongResult."""
    inputs = m.random_inputs(m.Shape(batch=2, seqlen=64, heads=16), seed=4)
    expected, _ = m.reference(*inputs)
    got = m.reference(*inputs, compute_dtype=torch.float16)[0]  # torch eager in fp16: right, within tolerance
    harness.check_output(got, expected)
    with pytest.raises(harness.WrongResult, match=message):
        harness.check_output(damage(got.float()).half(), expected)


@pytest.mark.parametrize("seqlen", [64, 1000, 4096, 16384])
def test_the_lse_comparison_catches_a_wrong_softmax_scale(seqlen):
    """1/sqrt(512) instead of 1/sqrt(576) (the RoPE dims left out of the scale) moves lse by about 0.06,
    under 1% of lse from about 1000 tokens on: rtol=0.01 passes it, the absolute tolerance does not."""
    q, q_pe, kv, k_pe = m.random_inputs(m.Shape(batch=2, seqlen=seqlen, heads=16), seed=seqlen)
    _, lse = m.reference(q, q_pe, kv, k_pe)
    scores = torch.bmm(torch.cat([q, q_pe], -1).float(), torch.cat([kv, k_pe], -1)[:, :, 0].float().transpose(1, 2))
    torch.testing.assert_close(torch.logsumexp(scores * 576 ** -0.5, -1), lse, rtol=0, atol=1e-5)
    wrong = torch.logsumexp(scores * 512 ** -0.5, -1)
    assert (wrong - lse).abs().min() > 10 * LSE_ATOL
    if seqlen >= 1000:
        torch.testing.assert_close(wrong, lse, rtol=RTOL, atol=ATOL)  # the output's tolerance lets it through
    with pytest.raises(AssertionError):
        torch.testing.assert_close(wrong, lse, rtol=0, atol=LSE_ATOL)


def test_random_inputs_are_seeded_and_not_zero():
    shape = m.Shape(batch=2, seqlen=8, heads=4, dim=16, pe_dim=4)
    a, b, c = m.random_inputs(shape, seed=5), m.random_inputs(shape, seed=5), m.random_inputs(shape, seed=6)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], c[0])
    assert all(x.abs().sum() > 0 for x in a)


def good_inputs(**changes):
    shape = m.Shape(batch=2, seqlen=64, heads=16, dim=32, pe_dim=8)
    q, q_pe, kv, k_pe = m.random_inputs(shape, seed=0)
    args = {"q": q, "q_pe": q_pe, "kv": kv, "k_pe": k_pe}
    args.update(changes)
    return args


@pytest.mark.parametrize("changes,message", [
    (lambda a: {"q": a["q"].float()}, "q: dtype must be float16 or bfloat16"),
    (lambda a: {"kv": a["kv"].bfloat16()}, "kv: dtype torch.bfloat16 differs from q's"),
    (lambda a: {"q": a["q"][0]}, r"q: must be \[batch, heads, dim\] or \[batch, s_q, heads, dim\]"),
    (lambda a: {"q": a["q"][:, None]}, "q_pe: must have q's 4 dimensions"),
    (lambda a: {"q": a["q"][:, None].expand(-1, 9, -1, -1).contiguous(),
                "q_pe": a["q_pe"][:, None].expand(-1, 9, -1, -1).contiguous()}, r"s_q .* must be an integer in 1\.\.8"),
    (lambda a: {"q": a["q"][:, None].expand(-1, 2, -1, -1).contiguous(), "q_pe": a["q_pe"][:, None]},
     r"q_pe: shape must be \(2, 2, 16, 8\) to match q"),
    (lambda a: {"q": a["q"][:, None].expand(-1, 2, -1, -1).contiguous(),
                "q_pe": a["q_pe"][:, None].expand(-1, 2, -1, -1).contiguous(), "kv": a["kv"][:, :1],
                "k_pe": a["k_pe"][:, :1]}, "kv: seqlen: a cache of 1 tokens is shorter than s_q = 2"),
    (lambda a: {"kv": a["kv"][:, :0]}, r"kv: seqlen \(dimension 1\) must be >= 1, got 0"),
    (lambda a: {"kv": a["kv"].expand(-1, -1, 2, -1)}, "kv: MLA decode shares one latent KV head"),
    (lambda a: {"k_pe": a["k_pe"][:, :10]}, r"k_pe: shape must be \(2, 64, 1, 8\)"),
    (lambda a: {"q_pe": a["q_pe"][:, :8]}, r"q_pe: shape must be \(2, 16, 8\)"),
    (lambda a: {"q": a["q"].transpose(0, 1).contiguous().transpose(0, 1)}, "q: must be contiguous"),
    (lambda a: {"q": a["q"].clone().index_fill_(2, torch.tensor([3]), float("nan"))}, "q: contains NaN or Inf"),
    (lambda a: {"q_pe": a["q_pe"].clone().fill_(float("inf"))}, "q_pe: contains NaN or Inf"),
    (lambda a: {}, "q: must be on a GPU"),
    (lambda a: {"k_pe": "not a tensor"}, "k_pe: must be a torch.Tensor"),
])
def test_invalid_inputs_name_the_argument_and_rule(changes, message):
    args = good_inputs()
    args.update(changes(args))
    with pytest.raises(ValueError, match=message):
        m.mla_decode(**args)


def test_valid_inputs_give_their_shape(monkeypatch):
    """Everything check_inputs decides before the device check (which needs a GPU)."""
    seen = []
    monkeypatch.setattr(m, "check_device", seen.append)
    args = good_inputs()
    assert m.check_inputs(**args) == m.Shape(batch=2, seqlen=64, heads=16, dtype="float16", dim=32, pe_dim=8)
    assert list(seen[0]) == ["q", "q_pe", "kv", "k_pe"] and seen[0]["kv"] is args["kv"]
    bf16 = {k: v.bfloat16() for k, v in args.items()}
    assert m.check_inputs(**bf16).dtype == "bfloat16"
    one = {"q": args["q"][:1], "q_pe": args["q_pe"][:1], "kv": args["kv"][:1, :1], "k_pe": args["k_pe"][:1, :1]}
    assert m.check_inputs(**one) == m.Shape(batch=1, seqlen=1, heads=16, dtype="float16", dim=32, pe_dim=8)
    mtp = {**args, "q": torch.cat([args["q"][:, None]] * 4, 1), "q_pe": torch.cat([args["q_pe"][:, None]] * 4, 1)}
    assert m.check_inputs(**mtp) == m.Shape(batch=2, seqlen=64, heads=16, dtype="float16", dim=32, pe_dim=8, s_q=4)
    assert m.check_inputs(**mtp).rows == 64


def test_an_empty_batch_is_rejected(monkeypatch):
    monkeypatch.setattr(m, "check_device", lambda named: None)
    empty = {k: v[:0] for k, v in good_inputs().items()}
    with pytest.raises(ValueError, match=r"^q: batch must be >= 1, got 0$"):
        m.check_inputs(**empty)
    with pytest.raises(ValueError, match=r"^k_pe: must be a torch.Tensor, got str$"):
        m.check_inputs(**good_inputs(k_pe="not a tensor"))


def test_bad_config_values_are_rejected():
    with pytest.raises(ValueError, match="config hopper: block_N must be an integer >= 1, got 0"):
        m.HOPPER.with_(block_N=0).check()
    with pytest.raises(ValueError, match="policy must be"):
        m.HOPPER.with_(policy="Diagonal").check()



@pytest.mark.parametrize("change,message", [
    ({"block_N": 48}, None), ({"block_N": 24}, "block_N must be a multiple of 16, got 24"),
    ({"block_H": 16}, None), ({"block_H": 8}, "block_H must be a multiple of 16, got 8"),
    ({"threads": 96}, None), ({"threads": 100}, "threads must be a multiple of 32, got 100"),
    ({"num_stages": 4}, None), ({"num_stages": 5}, "num_stages must be <= 4, got 5"),
    ({"num_stages": 2.0}, "num_stages must be >= 0, got 2.0"),
])
def test_a_config_no_gpu_could_run_is_refused_naming_its_field(change, message):
    config = m.HOPPER.with_(**change)
    if message is None:
        config.check()
        return
    with pytest.raises(ValueError, match=f"^config hopper: {message}$"):
        config.check()


def test_every_shipped_config_passes_the_check():
    for config in m.CONFIGS.values():
        config.check()
    assert m.config_for_arch("sm_90a") is m.HOPPER and m.config_for_arch("gfx942:xnack-") is m.CDNA3

"""What can be known about the kernels without a GPU: lowering, reference, validation."""

import math

import pytest
import torch

from mlagate.kernels import mla_decode as m


@pytest.mark.parametrize("arch,config,marker", [
    ("gfx942", "cdna3", "mfma"),
    ("gfx942", "cdna3-no-split", "mfma"),
    ("sm_90", "hopper", "wgmma"),
    ("sm_90", "cdna3", "mma"),
])
def test_configs_lower_without_a_gpu(arch, config, marker):
    cfg = m.CDNA3.with_(num_split=1) if config == "cdna3-no-split" else m.CONFIGS[config]
    source = m.lower(m.Shape(batch=64, seqlen=4096), cfg, arch)
    assert "__global__" in source
    assert marker in source
    if cfg.num_split > 1:  # split kernel + combine kernel
        assert source.count("__global__ void") >= 2


def test_fewer_heads_than_the_head_block_lower():
    """16 heads: the head block shrinks to 16 (TMA tiles must match the tensor)."""
    source = m.lower(m.Shape(batch=1, seqlen=1000, heads=16), m.HOPPER, "sm_90")
    assert "__global__" in source


def test_masked_lowering_guards_the_tail():
    source = m.lower(m.Shape(batch=2, seqlen=1000), m.CDNA3, "gfx942")
    assert "< 1000" in source


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


def test_heads_must_fill_head_blocks():
    with pytest.raises(ValueError, match=r"heads \(96\) must be a multiple of the head block"):
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
    assert m.plan(m.Shape(batch=64, seqlen=4096, heads=heads), m.HOPPER, arch).threads == m.HOPPER.threads


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
    (lambda a: {"q": a["q"][0]}, "q: must have 3 dimensions"),
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


def test_bad_config_values_are_rejected():
    with pytest.raises(ValueError, match="config hopper: block_N must be an integer >= 1, got 0"):
        m.HOPPER.with_(block_N=0).check()
    with pytest.raises(ValueError, match="policy must be"):
        m.HOPPER.with_(policy="Diagonal").check()

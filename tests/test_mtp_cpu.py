"""Several query tokens per sequence (MTP, s_q > 1) on a CPU: the causal rule, the input checks, the row fold, and
that every kernel lowers with the causal mask (slow lane)."""

import re

import pytest

torch = pytest.importorskip("torch")

from mlagate.kernels import mla_decode as m  # noqa: E402
from mlagate.kernels import mla_decode_paged as p  # noqa: E402


@pytest.mark.parametrize("s_q", [2, 4])
def test_token_i_of_the_reference_sees_the_cache_up_to_its_own_position(s_q):
    """The s_q new tokens are the cache's last s_q positions: token i's answer is the one-token answer over the first
    seqlen - s_q + 1 + i positions."""
    shape = m.Shape(batch=2, seqlen=70, heads=4, dim=32, pe_dim=8, s_q=s_q)
    q, q_pe, kv, k_pe = m.random_inputs(shape, seed=1)
    assert q.shape == (2, s_q, 4, 32) and q_pe.shape == (2, s_q, 4, 8)
    out, lse = m.reference(q, q_pe, kv, k_pe, torch.float64)
    assert out.shape == q.shape and lse.shape == (2, s_q, 4)
    for i in range(s_q):
        seen = 70 - s_q + 1 + i
        one_out, one_lse = m.reference(q[:, i].contiguous(), q_pe[:, i].contiguous(), kv[:, :seen].contiguous(),
                                       k_pe[:, :seen].contiguous(), torch.float64)
        torch.testing.assert_close(out[:, i], one_out, rtol=0, atol=1e-12)
        torch.testing.assert_close(lse[:, i], one_lse, rtol=0, atol=1e-12)
    # and the mask matters: without it every token would see all 70 positions
    full_out, _ = m.reference(q[:, 0].contiguous(), q_pe[:, 0].contiguous(), kv, k_pe, torch.float64)
    assert not torch.allclose(out[:, 0], full_out)


def test_the_causal_mask_is_token_major():
    visible = m.causal_mask(s_q=2, heads=3, seqlen=5, device="cpu")
    assert visible.shape == (6, 5)
    assert visible[:3].sum(1).tolist() == [4, 4, 4] and visible[3:].sum(1).tolist() == [5, 5, 5]


def test_the_paged_reference_applies_the_same_mask():
    lengths = [2, 70, 129]
    inputs = p.random_paged_inputs(3, 4, lengths, 64, dim=32, pe_dim=8, s_q=2)
    assert inputs[0].shape == (3, 2, 4, 32)
    out, lse = p.reference_paged(*inputs, compute_dtype=torch.float64)
    for b, n in enumerate(lengths):
        kv = p.gather_sequence(inputs[2], inputs[4], b, n)[None, :, None]
        k_pe = p.gather_sequence(inputs[3], inputs[4], b, n)[None, :, None]
        want_out, want_lse = m.reference(inputs[0][b:b + 1], inputs[1][b:b + 1], kv, k_pe, torch.float64)
        torch.testing.assert_close(out[b:b + 1], want_out, rtol=0, atol=1e-12)
        torch.testing.assert_close(lse[b:b + 1], want_lse, rtol=0, atol=1e-12)


@pytest.mark.parametrize("s_q, message", [
    (0, r"s_q \(query tokens per sequence\) must be an integer in 1\.\.8, got 0"),
    (9, "must be an integer in 1..8, got 9"),
    (True, "got True"),
    (2.0, "got 2.0"),
])
def test_s_q_outside_its_range_is_refused(s_q, message):
    with pytest.raises(ValueError, match=message):
        m.Shape(batch=1, seqlen=64, heads=16, s_q=s_q).check()
    with pytest.raises(ValueError, match=message):
        p.PagedShape(batch=1, heads=16, max_pages=1, page_size=64, s_q=s_q).check()


def test_a_cache_shorter_than_s_q_is_refused_and_one_of_exactly_s_q_is_not():
    with pytest.raises(ValueError, match="seqlen: a cache of 3 tokens is shorter than s_q = 4"):
        m.Shape(batch=1, seqlen=3, heads=16, s_q=4).check()
    m.Shape(batch=1, seqlen=4, heads=16, s_q=4).check()


@pytest.mark.parametrize("config, arch, heads, s_q, block_H", [
    ("hopper", "sm_90", 16, 2, 32), ("hopper", "sm_90", 16, 4, 64), ("hopper", "sm_90", 128, 2, 64),
    ("hopper", "sm_90", 8, 2, 16), ("seesaw", "sm_90", 16, 2, 32), ("seesaw", "sm_90", 64, 4, 64),
    ("cdna3", "gfx942", 16, 2, 32), ("cdna3", "gfx942", 16, 4, 64),
])
def test_query_tokens_fold_into_the_head_block_as_rows(config, arch, heads, s_q, block_H):
    shape = m.Shape(batch=64, seqlen=4096, heads=heads, s_q=s_q)
    plan = m.plan(shape, m.CONFIGS[config], arch)
    assert plan.block_H == block_H and shape.rows == s_q * heads


def test_the_split_rule_counts_row_blocks():
    """128 heads x 2 tokens are 4 head blocks of 64 per sequence: twice the blocks of s_q = 1, so fewer splits."""
    one, two = (m.Shape(batch=8, seqlen=4096, heads=128, s_q=s) for s in (1, 2))
    assert m.resolve_num_split(one, m.HOPPER, 132) == 8 and m.resolve_num_split(two, m.HOPPER, 132) == 4


def test_paged_inputs_take_4d_queries_and_refuse_a_sequence_shorter_than_s_q(monkeypatch):
    monkeypatch.setattr(p, "check_device", lambda named: None)
    inputs = p.random_paged_inputs(3, 16, [2, 70, 129], 64, s_q=2)
    assert p.check_paged_inputs(*inputs).s_q == 2 and p.check_paged_inputs(*inputs).rows == 32
    short = p.random_paged_inputs(3, 16, [5, 1, 129], 64, s_q=2)
    with pytest.raises(ValueError, match="cache_seqlens: sequence 1: seqlen: a cache of 1 tokens is shorter than s_q"):
        p.check_paged_inputs(*short)


def test_the_kernels_are_handed_the_rows_view(monkeypatch):
    """A 4-D q reaches the compiled program as [batch, s_q x heads, dim], token-major, and its outputs too; a 3-D q
    reaches it as the very tensor passed (no view on the one-token path)."""
    calls = []
    monkeypatch.setattr(m.tilelang, "compile", lambda program, **kw: lambda *args: calls.append(args))
    shape = m.Shape(batch=2, seqlen=256, heads=16, s_q=2)
    q, q_pe, kv, k_pe = m.random_inputs(shape)
    out, lse = torch.empty_like(q), torch.empty(2, 2, 16)
    m.CompiledDecode(shape, m.HOPPER.with_(num_split=1), "sm_90a", 132)(q, q_pe, kv, k_pe, out, lse)
    got = calls[-1]
    assert [tuple(t.shape) for t in got] == [(2, 32, 512), (2, 32, 64), (2, 256, 1, 512), (2, 256, 1, 64),
                                             (2, 32, 512), (2, 32)]
    assert torch.equal(got[0][:, 16:], q[:, 1]) and got[4].data_ptr() == out.data_ptr()
    one = m.Shape(batch=2, seqlen=256, heads=16)
    q1, q_pe1, kv1, k_pe1 = m.random_inputs(one)
    out1, lse1 = torch.empty_like(q1), torch.empty(2, 16)
    m.CompiledDecode(one, m.HOPPER.with_(num_split=1), "sm_90a", 132)(q1, q_pe1, kv1, k_pe1, out1, lse1)
    assert calls[-1][0] is q1 and calls[-1][-1] is lse1


# The mask value in the generated code (mla_decode.MASKED): a one-token kernel of whole tiles has none.
CAUSAL = re.compile(r"-1\.267651e\+30")  # HIP writes the float, CUDA a hex float with it in a comment


@pytest.mark.slow
@pytest.mark.parametrize("arch, config", [(a, n) for a in ("gfx942", "sm_90a") for n, c in m.CONFIGS.items()
                                          if c.runs_on(a)])
@pytest.mark.parametrize("s_q", [1, 2, 4])
def test_every_dense_config_lowers_at_s_q(arch, config, s_q):
    """At whole tiles a one-token kernel has no mask; at s_q > 1 the causal one is there."""
    source = m.lower(m.Shape(batch=64, seqlen=4096, heads=16, s_q=s_q), m.CONFIGS[config], arch)
    assert "__global__" in source
    assert bool(CAUSAL.search(source)) == (s_q > 1)


@pytest.mark.slow
@pytest.mark.parametrize("arch, config", [("gfx942", "cdna3"), ("sm_90a", "hopper")])
@pytest.mark.parametrize("s_q", [2, 4])
@pytest.mark.parametrize("page_size", [1, 64])
def test_the_paged_kernel_lowers_at_s_q(arch, config, s_q, page_size):
    shape = p.PagedShape.holding([4, 4096, 129], 16, page_size, s_q=s_q)
    source = p.lower(shape, m.CONFIGS[config].with_(num_split=4), arch)
    assert "__global__" in source and CAUSAL.search(source)

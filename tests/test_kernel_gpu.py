"""The TileLang kernel against the float32 reference, on a GPU."""

import pytest

torch = pytest.importorskip("torch")

from mlagate.kernels import mla_decode as m  # noqa: E402

pytestmark = pytest.mark.gpu

GRID = [(b, s) for b in (64, 128) for s in (1024, 2048, 4096, 8192, 16384)]
RTOL = ATOL = 0.01
# lse is compared absolutely. It is a natural log of a sum of seqlen exponentials, O(log seqlen), up to 11
# here, so rtol=0.01 would allow 0.04-0.11, and a wrong softmax scale (1/sqrt(512) instead of
# 1/sqrt(576)) moves lse by only 0.05-0.07 from 1000 tokens on: rtol passed it at every grid point
# (tests/test_kernel_cpu.py::test_the_lse_comparison_catches_a_wrong_softmax_scale). The kernel computes
# lse in float32 from the same fp16/bf16 inputs as the float32 reference; only summation order and the
# fast-math exp2/log2 differ: at most 3.8e-5 on an H200 over every shape of this file, both configs,
# fp16 and bf16 (2026-11-30). 2e-3 leaves that 50x of room and is 25x under the wrong scale's shift.
LSE_ATOL = 2e-3


def skip_where_it_cannot_run(config: str):
    arch = m.device_arch(torch.cuda.current_device())
    cfg = m.CONFIGS[config]
    if not cfg.runs_on(arch) or (cfg.operands_in_shared and not arch.startswith("sm_9")):
        pytest.skip(f"the {config} config needs sm_90 (wgmma, TMA, 228 KB shared memory); this GPU is {arch}")


def native_config():
    return m.config_for_arch(m.device_arch(torch.cuda.current_device()))


def run_and_check(shape, config, seed):
    """Launch into NaN-poisoned outputs, then compare out and lse with the reference."""
    q, q_pe, kv, k_pe = m.random_inputs(shape, device="cuda", seed=seed)
    kernel = m.compiled(shape, config)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((shape.batch, shape.heads), float("nan"), device="cuda")
    kernel(q, q_pe, kv, k_pe, out, lse)
    torch.cuda.synchronize()
    ref_out, ref_lse = m.reference(q, q_pe, kv, k_pe)
    assert torch.isfinite(out).all(), "unwritten (NaN) or non-finite output elements"
    torch.testing.assert_close(out.float(), ref_out, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(lse, ref_lse, rtol=0, atol=LSE_ATOL)
    return kernel


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("batch,seqlen", GRID)
@pytest.mark.parametrize("num_split", [1, 4], ids=["no_split", "split4"])
def test_grid(batch, seqlen, dtype, num_split):
    config = native_config().with_(num_split=num_split)
    kernel = run_and_check(m.Shape(batch=batch, seqlen=seqlen, dtype=dtype), config, seed=batch + seqlen)
    assert kernel.plan.num_split == num_split


@pytest.mark.parametrize("batch,heads,seqlen", [
    (1, 128, 1), (1, 16, 1000), (2, 64, 4097), (1, 128, 32768), (3, 128, 1000), (4, 16, 63), (2, 128, 200),
])
@pytest.mark.parametrize("num_split", [0, 1, 4], ids=["auto", "no_split", "split4"])
def test_edge_shapes(batch, heads, seqlen, num_split):
    """Odd lengths are masked; a split that would start past the end is dropped."""
    config = native_config().with_(num_split=num_split)
    run_and_check(m.Shape(batch=batch, seqlen=seqlen, heads=heads), config, seed=seqlen)


@pytest.mark.parametrize("config", list(m.CONFIGS))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("heads", [16, 32, 64, 128])
@pytest.mark.parametrize("num_split", [0, 1], ids=["auto", "no_split"])
def test_every_config_at_every_tensor_parallel_head_count(config, dtype, heads, num_split):
    """TP8/TP4/TP2/TP1 shapes of DeepSeek's 128 heads, with a masked tail, for every config."""
    skip_where_it_cannot_run(config)
    shape = m.Shape(batch=64, seqlen=4000, heads=heads, dtype=dtype)
    run_and_check(shape, m.CONFIGS[config].with_(num_split=num_split), seed=heads)


@pytest.mark.parametrize("config", list(m.CONFIGS))
def test_every_config_runs_here(config):
    """Each architecture's config is plain TileLang and must be right on any GPU
    it compiles for (the cdna3 config is slow on Hopper, never wrong)."""
    skip_where_it_cannot_run(config)
    run_and_check(m.Shape(batch=8, seqlen=3000), m.CONFIGS[config], seed=7)


def test_entry_point_picks_the_native_config_and_returns_lse():
    shape = m.Shape(batch=4, seqlen=2048)
    inputs = m.random_inputs(shape, device="cuda", seed=3)
    out, lse = m.mla_decode(*inputs, return_lse=True)
    ref_out, ref_lse = m.reference(*inputs)
    torch.testing.assert_close(out.float(), ref_out, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(lse, ref_lse, rtol=0, atol=LSE_ATOL)
    assert (shape, native_config(), m.device_arch(0)) in m._compiled


def test_fresh_inputs_give_fresh_outputs():
    """The same compiled kernel on new random inputs computes the new answer."""
    shape = m.Shape(batch=2, seqlen=1024)
    for seed in (11, 12):
        run_and_check(shape, native_config(), seed)


def test_bad_device_input_is_rejected_before_launch():
    shape = m.Shape(batch=2, seqlen=256)
    q, q_pe, kv, k_pe = m.random_inputs(shape, device="cuda", seed=0)
    with pytest.raises(ValueError, match="k_pe: must be on a GPU"):
        m.mla_decode(q, q_pe, kv, k_pe.cpu())


# The seesaw schedule (kernels/mla_decode_seesaw.py), shape by shape.
SEESAW_GRID = [(b, s, h) for b in (64, 128) for s in (1024, 2048, 4096, 8192, 16384) for h in (16, 32, 64, 128)]
# A tail in either warpgroup's tile, one token, one tile, splits of one pair, a static loop whose last odd tile
# is past the end, many splits, split counts not a power of two.
SEESAW_EDGES = [(1, 1, 16), (2, 63, 32), (3, 64, 64), (1, 65, 128), (2, 127, 16), (2, 129, 64), (4, 1000, 32),
                (5, 4097, 128), (7, 3000, 16), (128, 192, 64), (132, 300, 128), (1, 16384, 64), (33, 2049, 32)]
REPEATS = 20


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("batch, seqlen, heads", SEESAW_GRID + SEESAW_EDGES)
def test_seesaw_matches_the_reference_and_repeats_bit_identically(batch, seqlen, heads, dtype):
    """Every grid point (both dtypes, every tensor-parallel head count) and the edge shapes, each re-run 20 times
    bit-identically: FlashMLA-style schedules have shown non-determinism, and this one must have none."""
    skip_where_it_cannot_run("seesaw")
    shape = m.Shape(batch=batch, seqlen=seqlen, heads=heads, dtype=dtype)
    inputs = m.random_inputs(shape, device="cuda", seed=seqlen + heads)
    kernel = run_and_check(shape, m.SEESAW, seed=seqlen + heads)
    first = kernel(*inputs, torch.empty_like(inputs[0]), torch.empty(batch, heads, device="cuda"))
    first = tuple(t.clone() for t in first)
    for _ in range(REPEATS):
        again = kernel(*inputs, torch.empty_like(inputs[0]), torch.empty(batch, heads, device="cuda"))
        assert all(torch.equal(a, b) for a, b in zip(again, first))

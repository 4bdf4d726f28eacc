"""Several query tokens per sequence (MTP, s_q 2 and 4) against the causal float32 reference, on a GPU: every config,
dense and paged, both dtypes, 16-128 heads, odd lengths, the causal edge (a cache of exactly s_q tokens), a last
split shorter than s_q (its first token's rows see none of it), and 20 re-runs bit-identical."""

import pytest

torch = pytest.importorskip("torch")

from mlagate.kernels import mla_decode as m  # noqa: E402
from mlagate.kernels import mla_decode_paged as p  # noqa: E402
from test_kernel_gpu import ATOL, LSE_ATOL, RTOL, skip_where_it_cannot_run  # noqa: E402

pytestmark = pytest.mark.gpu
REPEATS = 20


def check(out, lse, ref_out, ref_lse):
    assert torch.isfinite(out).all(), "unwritten (NaN) or non-finite output elements"
    torch.testing.assert_close(out.float(), ref_out, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(lse, ref_lse, rtol=0, atol=LSE_ATOL)


def run_dense(shape, config, seed):
    q, q_pe, kv, k_pe = inputs = m.random_inputs(shape, device="cuda", seed=seed)
    kernel = m.compiled(shape, config)
    out, lse = torch.full_like(q, float("nan")), torch.full(q.shape[:-1], float("nan"), device="cuda")
    kernel(q, q_pe, kv, k_pe, out, lse)
    torch.cuda.synchronize()
    check(out, lse, *m.reference(q, q_pe, kv, k_pe))
    return kernel, inputs, out, lse


@pytest.mark.parametrize("config", list(m.CONFIGS))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("heads, s_q", [(16, 2), (16, 4), (128, 2), (128, 4), (32, 2), (64, 2), (8, 2)])
def test_every_config_at_s_q(config, dtype, heads, s_q):
    """A masked tail (4000 tokens) and the fill-the-device split, at TP8 (16), TP1 (128) and between; TP16's 8 heads
    at s_q = 2 make 16 rows, one MMA tile, which the pipelined configs run too."""
    skip_where_it_cannot_run(config)
    run_dense(m.Shape(batch=16, seqlen=4000, heads=heads, dtype=dtype, s_q=s_q), m.CONFIGS[config], seed=heads + s_q)


# (seqlen, num_split): a cache of exactly s_q tokens; whole tiles; last splits of one token (64-token splits for the
# pipelined configs, 128-token ones for the seesaw); a long cache.
EDGES = [(2, 1), (4, 1), (4096, 0), (3 * 64 + 1, 4), (3 * 128 + 1, 4), (5 * 128 + 2, 6), (16384, 0)]


@pytest.mark.parametrize("config", list(m.CONFIGS))
@pytest.mark.parametrize("s_q", [2, 4])
@pytest.mark.parametrize("seqlen, num_split", EDGES)
def test_causal_edges(config, s_q, seqlen, num_split):
    skip_where_it_cannot_run(config)
    if seqlen < s_q:
        pytest.skip("refused by Shape.check (tests/test_mtp_cpu.py)")
    run_dense(m.Shape(batch=3, seqlen=seqlen, heads=16, s_q=s_q), m.CONFIGS[config].with_(num_split=num_split),
              seed=seqlen)


@pytest.mark.parametrize("config", list(m.CONFIGS))
def test_s_q_2_repeats_bit_identically(config):
    skip_where_it_cannot_run(config)
    kernel, inputs, out, lse = run_dense(m.Shape(batch=64, seqlen=4096, heads=16, s_q=2), m.CONFIGS[config], seed=5)
    for _ in range(REPEATS):
        again, again_lse = torch.full_like(out, float("nan")), torch.full_like(lse, float("nan"))
        kernel(*inputs, again, again_lse)
        assert torch.equal(again, out) and torch.equal(again_lse, lse)


def test_the_entry_point_takes_4d_queries():
    shape = m.Shape(batch=4, seqlen=2048, heads=16, s_q=2, dtype="bfloat16")
    inputs = m.random_inputs(shape, device="cuda", seed=3)
    out, lse = m.mla_decode(*inputs, return_lse=True)
    assert out.shape == (4, 2, 16, 512) and lse.shape == (4, 2, 16)
    check(out, lse, *m.reference(*inputs))
    # s_q = 1 as a 4-D q gives the 3-D answer
    q1, q_pe1 = (t[:, 1:].contiguous() for t in inputs[:2])
    out1 = m.mla_decode(q1, q_pe1, *inputs[2:])
    torch.testing.assert_close(out1[:, 0], m.mla_decode(q1[:, 0].contiguous(), q_pe1[:, 0].contiguous(), *inputs[2:]),
                               rtol=0, atol=0)


# (config, dtype, page_size, heads, s_q): both tile paths (page 1 gathers rows, page 64 holds whole tiles), both
# pipelined configs, 16 and 128 heads; and the seesaw over pages (64-token pages and the balanced schedule only): 16
# heads at s_q 4 (one head block of 64 rows), 128 at s_q 2 (four).
PAGED = [("native", "bfloat16", 64, 16, 2), ("native", "float16", 1, 16, 4), ("native", "bfloat16", 64, 128, 2),
         ("cdna3", "bfloat16", 64, 16, 2), ("cdna3", "float16", 1, 128, 4)]
SEESAW_PAGED = [("seesaw", "bfloat16", 64, 16, 4), ("seesaw", "float16", 64, 128, 2)]
# a sequence of exactly s_q tokens beside long ones; one-token tails; a lognormal-like spread
RAGGED = [[4, 32768, 65], [4097, 63, 129], [2300, 47, 9000]]


def check_paged(kernel, num_split):
    name, dtype, page_size, heads, s_q = kernel
    arch = m.device_arch(torch.cuda.current_device())
    config = m.config_for_arch(arch) if name == "native" else m.CONFIGS[name]
    if config.name in ("hopper", "seesaw") and not arch.startswith("sm_9"):
        pytest.skip(f"the {config.name} config needs sm_90; this GPU is {arch}")
    config = config.with_(num_split=num_split)
    for n, lengths in enumerate(RAGGED):
        inputs = p.random_paged_inputs(len(lengths), heads, lengths, page_size, dtype, "cuda", seed=n, s_q=s_q)
        out, lse = p.mla_decode_paged(*inputs, config=config, return_lse=True)
        torch.cuda.synchronize()
        assert out.shape == inputs[0].shape and lse.shape == inputs[0].shape[:-1]
        check(out, lse, *p.reference_paged(*inputs))
        if n == 0:
            for _ in range(REPEATS):
                again, again_lse = p.mla_decode_paged(*inputs, config=config, return_lse=True)
                assert torch.equal(again, out) and torch.equal(again_lse, lse)


@pytest.mark.parametrize("kernel", PAGED, ids=str)
@pytest.mark.parametrize("num_split", [0, 4], ids=["auto", "split4"])
def test_paged_at_s_q(kernel, num_split):
    check_paged(kernel, num_split)


@pytest.mark.parametrize("kernel", SEESAW_PAGED, ids=str)
def test_the_seesaw_over_pages_at_s_q(kernel):
    check_paged(kernel, 0)

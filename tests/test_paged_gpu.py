"""The paged decode against its float32 reference, on a GPU.

Few kernels (each compile costs far more than its runs): a kernel is compiled per (batch, heads,
max_pages, page_size, dtype, config) and lengths are runtime data, so each kernel runs several
ragged batches. They are compiled in parallel processes first, into TileLang's disk cache."""

import os

import pytest

torch = pytest.importorskip("torch")

from mlagate.kernels import mla_decode as m  # noqa: E402
from mlagate.kernels import mla_decode_paged as p  # noqa: E402
from test_kernel_gpu import ATOL, LSE_ATOL, RTOL  # noqa: E402

pytestmark = pytest.mark.gpu

LONGEST = 131072
# (config, dtype, page_size, heads, batch, max_pages); "native" is the device's own family config, "/n" sets
# its num_split (0: the balanced schedule, the native config's; n: n fixed splits, cdna3's 4).
# Together: both dtypes, both tile paths (page 1 gathers rows, page 64 holds whole tiles), heads 16 and
# 128, both configs, both schedules; batch 2 holds a length-1 sequence beside a 32768 one, batch 1 runs up to LONGEST.
KERNELS = [
    ("native", "float16", 64, 128, 2, 32768 // 64),
    ("native", "bfloat16", 1, 16, 2, 32768),
    ("native", "float16", 64, 128, 1, LONGEST // 64),
    ("native/4", "bfloat16", 64, 16, 2, 32768 // 64),
    ("cdna3", "bfloat16", 64, 16, 2, 32768 // 64),
    ("cdna3", "float16", 1, 128, 2, 32768),
    ("cdna3/0", "bfloat16", 1, 16, 2, 32768),
    ("cdna3/0", "float16", 64, 128, 2, 32768 // 64),
    ("seesaw", "bfloat16", 64, 16, 2, 32768 // 64),
    ("seesaw", "float16", 64, 128, 2, 32768 // 64),
]
# A batch whose partitions each walk several pieces on the seesaw over pages (its blocks run a partition each):
# many short sequences beside a few long ones, at 16 heads (132 partitions) and 128 (66).
MANY_PIECES = [1, 2, 63, 64, 65, 127, 128, 129, 300, 700] * 6 + [LONGEST, 4097, 8191, 131]
RAGGED = [[1, 32768], [4097, 63], [64, 65]]


def arch():
    return m.device_arch(torch.cuda.current_device())


def resolve(kernel):
    """(PagedShape, TileConfig) of a KERNELS row, or None where its config cannot run here."""
    name, dtype, page_size, heads, batch, max_pages = kernel
    name, _, split = name.partition("/")
    config = m.config_for_arch(arch()) if name == "native" else m.CONFIGS[name]
    config = config.with_(num_split=int(split)) if split else config
    if config.name in ("hopper", "seesaw") and not arch().startswith("sm_9"):
        return None
    return p.PagedShape(batch=batch, heads=heads, max_pages=max_pages, page_size=page_size, dtype=dtype), config


def compile_paged(shape_config) -> None:
    """Compile one kernel for this process's GPU, into TileLang's disk cache."""
    p.compiled(*shape_config)


@pytest.fixture(scope="module", autouse=True)
def precompiled():
    from mlagate.measure.precompile import in_processes

    kernels = list(dict.fromkeys(k for k in map(resolve, KERNELS + many_pieces_kernels()) if k))
    jobs = max(1, min(len(kernels), (os.cpu_count() or 2) - 2))
    failed = [f"{k}: {e}" for k, e in in_processes(compile_paged, kernels, jobs) if isinstance(e, Exception)]
    assert not failed, failed


def many_pieces_kernels() -> list:
    return [("seesaw", dtype, 64, heads, len(MANY_PIECES), LONGEST // 64)
            for heads, dtype in ((16, "bfloat16"), (128, "float16"))]


def run_and_check(kernel, lengths, seed, shuffle=True):
    """Launch into NaN-poisoned outputs on shuffled pages with garbage past each table's used
    entries, then compare out and lse with the reference; returns the launch's outputs."""
    resolved = resolve(kernel)
    if resolved is None:
        pytest.skip(f"the hopper config needs sm_90 (wgmma, 228 KB shared memory); this GPU is {arch()}")
    shape, config = resolved
    q, q_pe, kv_cache, k_pe_cache, table, seqlens = p.random_paged_inputs(
        len(lengths), shape.heads, lengths, shape.page_size, shape.dtype, "cuda", seed, shuffle)
    padded = torch.full((shape.batch, shape.max_pages), 1 << 30, dtype=torch.int32, device="cuda")
    # entries past a sequence's pages are never read: a page id far past the cache there must not matter
    padded[:, :table.shape[1]] = torch.where(table >= 0, table, 1 << 30)
    launch = p.compiled(shape, config)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((shape.batch, shape.heads), float("nan"), device="cuda")
    launch(q, q_pe, kv_cache, k_pe_cache, padded, seqlens, out, lse)
    torch.cuda.synchronize()
    ref_out, ref_lse = p.reference_paged(q, q_pe, kv_cache, k_pe_cache, padded, seqlens)
    assert torch.isfinite(out).all(), "unwritten (NaN) or non-finite output elements"
    torch.testing.assert_close(out.float(), ref_out, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(lse, ref_lse, rtol=0, atol=LSE_ATOL)
    return launch, (q, q_pe, kv_cache, k_pe_cache, padded, seqlens), out, lse


@pytest.mark.parametrize("kernel", [k for k in KERNELS if k[4] == 2], ids=str)
def test_ragged_batches(kernel):
    for n, lengths in enumerate(RAGGED):
        launch, *_ = run_and_check(kernel, lengths, seed=n)
        if launch.plan.num_split <= 1:  # no split, or the balanced schedule (tests/test_paged_cpu.py)
            continue
        # a split past a sequence's end leaves a neutral partial: lse -inf, output 0
        glse, partial = launch.workspace(torch.device("cuda", torch.cuda.current_device()))
        for b, length in enumerate(lengths):
            # split_tokens builds a TIR expression even from ints (an IntImm), which no slice takes
            per_split = int(p.split_tokens(length, launch.plan.num_split, launch.plan.config.block_N))
            live = -(-length // per_split)
            assert torch.isfinite(glse[b, :, :live]).all()
            assert torch.isneginf(glse[b, :, live:]).all() and (partial[b, :, live:] == 0).all()


@pytest.mark.parametrize("kernel", many_pieces_kernels(), ids=str)
def test_a_seesaw_block_walks_its_partitions_pieces_in_turn(kernel):
    """The barriers' parities carried from piece to piece in one block: wrong, a later piece reads a stale tile."""
    launch, *_ = run_and_check(kernel, MANY_PIECES, seed=7)
    pieces_per_part = [end - first for first, end in launch.schedule(MANY_PIECES).parts]
    assert max(pieces_per_part) >= 3, pieces_per_part  # the batch does what the test needs


@pytest.mark.parametrize("seqlen", [1, 63, 64, 65, 4097, LONGEST])
def test_one_sequence_of_any_length(seqlen):
    """Through the public entry point, at batch 1: no fault, masked tails, empty splits."""
    q, q_pe, kv_cache, k_pe_cache, table, seqlens = p.random_paged_inputs(
        1, 128, [seqlen], 64, "float16", "cuda", seed=seqlen)
    padded = torch.full((1, LONGEST // 64), -1, dtype=torch.int32, device="cuda")
    padded[:, :table.shape[1]] = table
    out, lse = p.mla_decode_paged(q, q_pe, kv_cache, k_pe_cache, padded, seqlens, return_lse=True)
    torch.cuda.synchronize()
    ref_out, ref_lse = p.reference_paged(q, q_pe, kv_cache, k_pe_cache, padded, seqlens)
    torch.testing.assert_close(out.float(), ref_out, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(lse, ref_lse, rtol=0, atol=LSE_ATOL)


def test_repeated_runs_are_bit_identical():
    launch, args, out, lse = run_and_check(KERNELS[0], [4097, 63], seed=20)
    for _ in range(20):
        again, again_lse = torch.full_like(out, float("nan")), torch.full_like(lse, float("nan"))
        launch(*args, again, again_lse)
        assert torch.equal(again, out) and torch.equal(again_lse, lse)

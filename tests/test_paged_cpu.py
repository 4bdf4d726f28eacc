"""The paged decode without a GPU: its reference, its inputs, its validation and its lowering."""

import math
import re

import pytest
import torch

from mlagate.kernels import mla_decode as m
from mlagate.kernels import mla_decode_paged as p
from test_kernel_cpu import MMA_CALLS, kernel_body


def paged_from_dense(kv, k_pe, page_size, seed):
    """A paged cache holding dense [batch, seqlen, 1, dim] tensors, pages handed out in a
    shuffled order, unused table entries -1: written here by scattering, not by the module's gather."""
    batch, seqlen = kv.shape[:2]
    per_seq = math.ceil(seqlen / page_size)
    order = torch.randperm(batch * per_seq, generator=torch.Generator().manual_seed(seed))
    kv_cache = torch.zeros(batch * per_seq, page_size, kv.shape[-1], dtype=kv.dtype)
    k_pe_cache = torch.zeros(batch * per_seq, page_size, k_pe.shape[-1], dtype=kv.dtype)
    block_table = torch.full((batch, per_seq + 2), -1, dtype=torch.int32)
    for b in range(batch):
        block_table[b, :per_seq] = order[b * per_seq:(b + 1) * per_seq].to(torch.int32)
        for t in range(seqlen):
            page, row = block_table[b, t // page_size], t % page_size
            kv_cache[page, row] = kv[b, t, 0]
            k_pe_cache[page, row] = k_pe[b, t, 0]
    return kv_cache, k_pe_cache, block_table


@pytest.mark.parametrize("page_size", [1, 16, 64])
def test_reference_paged_equals_the_dense_reference_on_shuffled_pages(page_size):
    shape = m.Shape(batch=3, seqlen=100, heads=4, dim=32, pe_dim=8)
    q, q_pe, kv, k_pe = m.random_inputs(shape, seed=page_size)
    kv_cache, k_pe_cache, block_table = paged_from_dense(kv, k_pe, page_size, seed=page_size)
    seqlens = torch.full((3,), 100, dtype=torch.int32)
    out, lse = p.reference_paged(q, q_pe, kv_cache, k_pe_cache, block_table, seqlens)
    want_out, want_lse = m.reference(q, q_pe, kv, k_pe)
    torch.testing.assert_close(out, want_out, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(lse, want_lse, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shuffle", [False, True], ids=["contiguous", "shuffled"])
def test_reference_paged_reads_each_sequence_through_its_own_table(shuffle):
    """A length-1 sequence beside a long one: each is the dense reference on its own tokens."""
    lengths = [1, 300, 64]
    q, q_pe, kv_cache, k_pe_cache, table, seqlens = p.random_paged_inputs(3, 4, lengths, 64, seed=3, shuffle=shuffle,
                                                                          dim=32, pe_dim=8)
    out, lse = p.reference_paged(q, q_pe, kv_cache, k_pe_cache, table, seqlens)
    for b, n in enumerate(lengths):
        tokens = [(int(table[b, t // 64]), t % 64) for t in range(n)]
        kv = torch.stack([kv_cache[pg, r] for pg, r in tokens])[None, :, None]
        k_pe = torch.stack([k_pe_cache[pg, r] for pg, r in tokens])[None, :, None]
        want_out, want_lse = m.reference(q[b:b + 1], q_pe[b:b + 1], kv, k_pe)
        torch.testing.assert_close(out[b:b + 1], want_out, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(lse[b:b + 1], want_lse, rtol=1e-6, atol=1e-6)
    # one token: the output is that token's latent vector, whatever the query
    torch.testing.assert_close(out[0], kv_cache[table[0, 0].long(), 0].float().expand(4, -1))


def test_random_paged_inputs_shuffle_pages_and_mark_unused_entries():
    q, q_pe, kv_cache, k_pe_cache, table, seqlens = p.random_paged_inputs(2, 16, [5, 130], 64, "bfloat16", seed=7)
    assert q.shape == (2, 16, 512) and q_pe.shape == (2, 16, 64) and q.dtype == torch.bfloat16
    assert kv_cache.shape == (4, 64, 512) and k_pe_cache.shape == (4, 64, 64)
    assert table.dtype == seqlens.dtype == torch.int32 and seqlens.tolist() == [5, 130]
    assert table.shape == (2, 3) and table[0, 1:].tolist() == [-1, -1]
    assert sorted(table[table >= 0].tolist()) == [0, 1, 2, 3]
    contiguous = p.random_paged_inputs(2, 16, [5, 130], 64, "bfloat16", seed=7, shuffle=False)[4]
    assert contiguous[1].tolist() == [1, 2, 3]
    again = p.random_paged_inputs(2, 16, [5, 130], 64, "bfloat16", seed=7)
    assert torch.equal(again[4], table) and torch.equal(again[2], kv_cache)
    with pytest.raises(ValueError, match="lengths: need 2 lengths"):
        p.random_paged_inputs(2, 16, [5], 64)


def good_inputs(**changes):
    q, q_pe, kv_cache, k_pe_cache, table, seqlens = p.random_paged_inputs(2, 16, [3, 40], 16, seed=0, dim=32, pe_dim=8)
    args = {"q": q, "q_pe": q_pe, "kv_cache": kv_cache, "k_pe_cache": k_pe_cache, "block_table": table,
            "cache_seqlens": seqlens}
    args.update(changes)
    return args


@pytest.mark.parametrize("changes,message", [
    (lambda a: {"q": a["q"].float()}, "q: dtype must be float16 or bfloat16"),
    (lambda a: {"kv_cache": a["kv_cache"].bfloat16()}, "kv_cache: dtype torch.bfloat16 differs from q's"),
    (lambda a: {"block_table": a["block_table"].long()}, "block_table: dtype must be torch.int32"),
    (lambda a: {"cache_seqlens": a["cache_seqlens"].long()}, "cache_seqlens: dtype must be torch.int32"),
    (lambda a: {"k_pe_cache": a["k_pe_cache"][None]}, "k_pe_cache: must have 3 dimensions"),
    (lambda a: {"k_pe_cache": a["k_pe_cache"][:, :8]}, r"k_pe_cache: shape must be \(4, 16, 8\)"),
    (lambda a: {"block_table": a["block_table"][:1]}, r"block_table: shape must be \(2, 3\)"),
    (lambda a: {"cache_seqlens": a["cache_seqlens"][:1]}, r"cache_seqlens: shape must be \(2,\)"),
    (lambda a: {"block_table": a["block_table"].t().contiguous().t()}, "block_table: must be contiguous"),
    (lambda a: {"cache_seqlens": torch.tensor([0, 40], dtype=torch.int32)},
     r"cache_seqlens: sequence 0 has length 0; each must be >= 1 and <= max_pages \* page_size = 48"),
    (lambda a: {"cache_seqlens": torch.tensor([3, 49], dtype=torch.int32)}, "cache_seqlens: sequence 1 has length 49"),
    (lambda a: {"block_table": a["block_table"].clone().fill_(-1)},
     r"block_table: a sequence's page id is outside 0 \.\. 3"),
    (lambda a: {"block_table": a["block_table"].clone().index_fill_(1, torch.tensor([0]), 4)},
     "block_table: a sequence"),
    (lambda a: {"q_pe": a["q_pe"].clone().fill_(float("nan"))}, "q_pe: contains NaN or Inf"),
    (lambda a: {"block_table": [[0]]}, "block_table: must be a torch.Tensor"),
    (lambda a: {}, "q: must be on a GPU"),
])
def test_invalid_inputs_name_the_argument_and_rule(changes, message):
    args = good_inputs()
    args.update(changes(args))
    with pytest.raises(ValueError, match=message):
        p.mla_decode_paged(**args)


def test_unused_table_entries_may_hold_anything(monkeypatch):
    """Entries past a sequence's last page are never read: -1 or garbage there is valid."""
    monkeypatch.setattr(p, "check_device", lambda named: None)
    args = good_inputs()
    table = args["block_table"].clone()
    assert table[0, 1:].tolist() == [-1, -1]  # 3 tokens in one page of 16
    table[0, 1:] = 1 << 30
    assert p.check_paged_inputs(**{**args, "block_table": table}) == p.PagedShape(
        batch=2, heads=16, max_pages=3, page_size=16, dim=32, pe_dim=8)


@pytest.mark.parametrize("lengths,num_split,split_tokens", [
    ([1, 32768], 4, [64, 8192]),   # one tile for the short sequence: its splits 1..3 are empty
    ([4097], 4, [1088]),           # ceil(4097 / 4) = 1025, rounded up to 17 tiles
    ([63, 64, 65], 2, [64, 64, 64]),
])
def test_splits_fit_each_sequence(lengths, num_split, split_tokens):
    """Tokens per split, as the kernel computes them from each runtime length: whole tiles, and
    num_split of them cover the sequence."""
    for n, want in zip(lengths, split_tokens):
        got = p.split_tokens(n, num_split, m.HOPPER.block_N)
        assert got == want and got % m.HOPPER.block_N == 0 and num_split * got >= n


def test_a_fixed_split_count_is_capped_by_the_table_and_split_0_is_the_balanced_schedule():
    one = p.PagedShape(batch=1, heads=128, max_pages=2048, page_size=64)
    split32 = m.HOPPER.with_(num_split=32)
    assert p.plan(one, split32, "sm_90a").num_split == 32
    assert p.plan(p.PagedShape(batch=1, heads=128, max_pages=2, page_size=64), split32, "sm_90a").num_split == 2
    assert p.plan(p.PagedShape(batch=4, heads=16, max_pages=64, page_size=1), m.CDNA3, "gfx942").num_split == 2
    balanced = p.plan(one, m.HOPPER, "sm_90a")  # 128 heads: two head blocks of 64, so 66 partitions of 132 SMs
    assert (balanced.num_split, balanced.parts) == (0, 66)
    assert p.plan(p.PagedShape(batch=4, heads=16, max_pages=64, page_size=1), m.CDNA3.with_(num_split=0),
                  "gfx942").parts == 304
    assert p.plan(p.PagedShape(batch=4, heads=16, max_pages=64, page_size=1, s_q=4), m.HOPPER, "sm_90a").parts == 132
    assert p.plan(one, m.HOPPER, "sm_90a").gather is False
    assert p.plan(one.__class__(1, 128, 2048, 1), m.HOPPER, "sm_90a").gather is True
    assert p.plan(one, m.CDNA3, "gfx942").gather is False  # 64-token pages hold two 32-token tiles


def test_the_balanced_schedule_of_a_hand_computed_batch():
    """Tiles [1, 512, 2, 64], 4 tiles' cost per piece: share = ceil((579 + 16) / 8) + 4 = 79. Partition 0 takes
    sequence 0 (1 tile + 4) and 70 tiles of sequence 1 (70 + 4): full; partitions 1-5 take 75 more tiles each; the
    last 67 of sequence 1, then sequence 2, fill partition 6; sequence 3 is partition 7's."""
    sched = p.balanced_schedule([47, 32768, 100, 4096], block_N=64, parts=8, piece_cost=4)
    assert sched.pieces == ((0, 0, 47), (1, 0, 4480), (1, 4480, 9280), (1, 9280, 14080), (1, 14080, 18880),
                            (1, 18880, 23680), (1, 23680, 28480), (1, 28480, 32768), (2, 0, 100), (3, 0, 4096))
    assert sched.parts == ((0, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7), (7, 9), (9, 10))
    assert sched.seq_pieces == ((0, 1), (1, 8), (8, 9), (9, 10))
    assert sched.merged == (1,)  # the one sequence in pieces: the seesaw's combine merges it alone
    assert sched.tiles_per_part(64, 4) == [79, 79, 79, 79, 79, 79, 77, 68]


def test_a_batch_of_sequences_shorter_than_one_tile_gets_a_partition_each():
    sched = p.balanced_schedule([5, 1, 63], block_N=64, parts=132, piece_cost=4)  # share: ceil(15 / 132) + 4 = 5
    assert sched.pieces == ((0, 0, 5), (1, 0, 1), (2, 0, 63))
    assert sched.merged == ()  # nothing to merge
    assert sched.parts[:4] == ((0, 1), (1, 2), (2, 3), (3, 3)) and set(sched.parts[3:]) == {(3, 3)}


@pytest.mark.parametrize("workload", ["ragged-4k", "uniform-paged"])
@pytest.mark.parametrize("batch, parts, block_N", [(64, 132, 64), (128, 132, 64), (128, 66, 64), (128, 304, 32),
                                                   (1, 132, 64), (3, 7, 64)])
def test_every_tile_is_dealt_once_and_no_partition_exceeds_its_share(workload, batch, parts, block_N):
    from mlagate import config as config_mod

    lengths = list(config_mod.load().workloads[workload].lengths(batch)) if batch > 3 else [1, 131072, 64][:batch]
    cost = p.piece_cost_tiles(block_N)
    sched = p.balanced_schedule(lengths, block_N, parts)
    assert len(sched.parts) == parts and sched.parts[0][0] == 0 and sched.parts[-1][1] == len(sched.pieces)
    assert all(a[1] == b[0] and a[0] <= a[1] for a, b in zip(sched.parts, sched.parts[1:]))  # consecutive ranges
    for seq, (first, end) in enumerate(sched.seq_pieces):  # a sequence's pieces: contiguous, in order, covering it
        mine = sched.pieces[first:end]
        assert {s for s, _, _ in mine} == {seq} and mine[0][1] == 0 and mine[-1][2] == lengths[seq]
        assert all(a[2] == b[1] for a, b in zip(mine, mine[1:])) and all(f % block_N == 0 for _, f, _ in mine)
    assert [s for s, _, _ in sched.pieces] == sorted(s for s, _, _ in sched.pieces)  # request order
    tiles = [-(-n // block_N) for n in lengths]
    share = -(-(sum(tiles) + cost * len(tiles)) // parts) + cost
    assert max(sched.tiles_per_part(block_N)) <= share


def test_a_schedule_needs_partitions_and_sequences():
    with pytest.raises(ValueError, match="parts and block_N must be >= 1"):
        p.balanced_schedule([64], 64, 0)
    with pytest.raises(ValueError, match="lengths: need at least one sequence"):
        p.balanced_schedule([], 64, 8)
    with pytest.raises(ValueError, match="each of >= 1 token"):
        p.balanced_schedule([64, 0], 64, 8)


# The lowerings, few: each takes seconds on a CPU. (arch, config, page_size, heads, batch, max_pages):
# both targets, both configs, both tile paths (gathered rows at page 1, one page per tile at 64),
# split + combine and no-split. The fast lane lowers one; the others are slow.
LOWERINGS = [
    pytest.param("sm_90a", "hopper", 64, 128, 1, 2048, marks=pytest.mark.slow),
    pytest.param("sm_90a", "hopper", 1, 16, 1, 131072, marks=pytest.mark.slow),
    pytest.param("sm_90a", "hopper", 64, 128, 132, 64, marks=pytest.mark.slow),
    pytest.param("sm_90a", "cdna3", 1, 16, 2, 4096, marks=pytest.mark.slow),
    ("gfx942", "cdna3", 64, 16, 1, 2048),
    pytest.param("gfx942", "cdna3", 1, 128, 1, 131072, marks=pytest.mark.slow),
    pytest.param("gfx942", "cdna3", 64, 128, 304, 16, marks=pytest.mark.slow),
    pytest.param("sm_90a", "hopper/0", 64, 16, 128, 512, marks=pytest.mark.slow),  # the balanced schedule
    pytest.param("sm_90a", "hopper/0", 1, 128, 2, 4096, marks=pytest.mark.slow),
    pytest.param("gfx942", "cdna3/0", 64, 16, 128, 512, marks=pytest.mark.slow),
    pytest.param("gfx942", "cdna3/0", 1, 128, 2, 4096, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("arch,config,page_size,heads,batch,max_pages", LOWERINGS)
def test_paged_kernels_lower_without_a_gpu(arch, config, page_size, heads, batch, max_pages):
    shape = p.PagedShape(batch=batch, heads=heads, max_pages=max_pages, page_size=page_size)
    config, _, split = config.partition("/")
    cfg = m.CONFIGS[config].with_(num_split=int(split)) if split else m.CONFIGS[config]
    plan = p.plan(shape, cfg, arch)
    source = p.lower(shape, cfg, arch)
    body = kernel_body(source)
    marker = "mfma" if arch == "gfx942" else "wgmma" if config == "hopper" and heads >= 64 else "mma"
    assert len(re.findall(MMA_CALLS[marker], body)) >= 3, marker
    assert "Block_table" in body and "Cache_seqlens" in body
    assert source.count("__global__ void") >= (2 if plan.num_split > 1 or plan.parts else 1)
    assert ("Pieces" in body) == bool(plan.parts)
    if arch == "sm_90a" and config == "hopper" and not plan.gather:
        assert "tma_load(KV_desc" in body  # a whole page-resident tile is one TMA copy


def test_both_compiled_kernels_pass_their_inputs_then_the_split_workspace_then_out_and_lse(monkeypatch):
    """The launch both kernels share (mla_decode.CompiledProgram): the compiled program's argument order."""
    calls = []
    monkeypatch.setattr(m.tilelang, "compile", lambda program, **kw: lambda *args: calls.append(args))
    hopper = m.CONFIGS["hopper"]
    out, lse = torch.empty(2, 16, 512), torch.empty(2, 16)
    dense_in = m.random_inputs(m.Shape(batch=2, seqlen=256, heads=16))
    paged_in = p.random_paged_inputs(2, 16, [1, 200], 64)
    kernels = [(m.CompiledDecode(m.Shape(batch=2, seqlen=256, heads=16), hopper.with_(num_split=n), "sm_90a", 132),
                dense_in) for n in (1, 2)]
    kernels += [(p.CompiledPagedDecode(p.PagedShape(batch=2, heads=16, max_pages=4, page_size=64),
                                       hopper.with_(num_split=n), "sm_90a", 132), paged_in) for n in (1, 2)]
    assert [k.plan.num_split for k, _ in kernels] == [1, 2, 1, 2]
    for kernel, inputs in kernels:
        for _ in range(2):
            assert kernel(*inputs, out, lse) == (out, lse)
        split = kernel.plan.num_split
        first, second = calls[-2:]
        assert first[:len(inputs)] == tuple(inputs) and first[-2:] == (out, lse)
        workspace = first[len(inputs):-2]
        assert len(workspace) == (2 if split > 1 else 0)
        if split > 1:
            assert [tuple(w.shape) for w in workspace] == [(2, 16, split), (2, 16, split, 512)]
            assert all(a is b for a, b in zip(workspace, second[len(inputs):-2]))  # one per device, reused


def test_a_shape_holding_lengths_is_the_table_random_inputs_build_and_the_dense_shape_is_at_the_mean():
    lengths = [1, 64, 65, 4097]
    shape = p.PagedShape.holding(lengths, 16, 64, "bfloat16")
    *_, block_table, seqlens = p.random_paged_inputs(4, 16, lengths, 64, "bfloat16")
    assert (shape.batch, shape.max_pages, shape.page_size) == (4, block_table.shape[1], 64) == (4, 65, 64)
    assert p.PagedShape.holding(lengths, 16, 1).max_pages == 4097
    dense = shape.at_mean_length(lengths)
    assert (dense.batch, dense.seqlen, dense.heads, dense.dtype) == (4, sum(lengths) // 4, 16, "bfloat16")


def test_a_balanced_launch_passes_the_schedule_and_its_workspace_before_out_and_lse(monkeypatch):
    calls = []
    monkeypatch.setattr(m.tilelang, "compile", lambda program, **kw: lambda *args: calls.append(args))
    lengths = [1, 200, 70]
    inputs = p.random_paged_inputs(3, 16, lengths, 64, s_q=2)
    kernel = p.CompiledPagedDecode(p.PagedShape.holding(lengths, 16, 64, s_q=2), m.HOPPER, "sm_90a", 132)
    out, lse = torch.empty_like(inputs[0]), torch.empty(3, 2, 16)
    kernel(*inputs, out, lse)  # builds the schedule from the lengths
    got = calls[-1]
    # share: ceil((1 + 4 + 2 tiles + 3 x 4) / 132) + 4 = 5, so sequence 1's 4 tiles go one per partition
    sched = p.balanced_schedule(lengths, 64, 132)
    assert sched.pieces == ((0, 0, 1), (1, 0, 64), (1, 64, 128), (1, 128, 192), (1, 192, 200), (2, 0, 64),
                            (2, 64, 70))
    assert [tuple(t.shape) for t in got[6:11]] == [(132, 2), (7, 3), (3, 2), (7, 32), (7, 32, 512)]
    assert got[7].tolist() == [list(piece) for piece in sched.pieces]
    assert got[8].tolist() == [[0, 1], [1, 5], [5, 7]] and got[6].tolist() == [list(r) for r in sched.parts]
    assert tuple(got[-1].shape) == (3, 32) and got[-2].data_ptr() == out.data_ptr()
    bound = p.BatchLaunch(kernel, lengths, "cpu")
    bound(*inputs, out, lse)
    assert torch.equal(calls[-1][7], got[7]) and bound.schedule == sched


def test_a_piece_costs_256_tokens_of_work_whatever_the_tile():
    """The pipelined kernel's 64-token tiles pay 4 a piece, the seesaw's pairs 2, cdna3's 32-token tiles 8; the
    default schedule charges it."""
    assert [p.piece_cost_tiles(n) for n in (32, 64, 128)] == [8, 4, 2]
    lengths = [47, 32768, 100, 4096]
    assert p.balanced_schedule(lengths, 128, 8) == p.balanced_schedule(lengths, 128, 8, piece_cost=2)
    assert p.balanced_schedule(lengths, 128, 8) != p.balanced_schedule(lengths, 128, 8, piece_cost=4)

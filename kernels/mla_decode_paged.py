"""TileLang FlashMLA decode over a paged KV cache, for ragged batches.

Serving keeps the latent KV cache in pages of ``page_size`` tokens: sequence b
owns the pages ``block_table[b, :ceil(len_b / page_size)]``, in any order, and
its length ``cache_seqlens[b]`` is runtime data. The kernel is compiled per
(batch, heads, max_pages, page_size, dtype, config, arch); the number of pages
in the cache is a runtime dimension.

Tiles and pages: a K/V tile of ``block_N`` tokens starts at a multiple of
block_N. Where page_size is a multiple of block_N the tile lies in one page and
is one copy (TMA on Hopper); otherwise (page_size 1, say) each token row is
gathered through the block table.

Schedules. A config of num_split 0 ("fill the device") runs the balanced schedule:
the batch's tiles are dealt evenly over one partition per SM and head block, across
sequence boundaries (balanced_schedule, computed on the host once per batch); each
thread block runs its partition's pieces in turn, and a combine merges each
sequence's pieces by their log-sum-exp. A fixed ``num_split`` gives every sequence
that many splits (FlashDecoding): sequence b's split covers ``ceil(len_b /
num_split)`` tokens rounded up to block_N; a split that starts past len_b runs no
tile and writes a neutral partial (lse -inf, output 0), and the combine reads only
the splits that hold tokens.

Bounds: a tile is loaded only when it starts before len_b, so the block table
is read at most at the sequence's last page; a gathered row past len_b re-reads
the last token (its score is masked). The host checks lengths and the used
table entries before a launch. Rows past len_b inside a tile-path page are read
and masked out of the softmax, so they must hold finite values (stale is fine).
"""

import math
from dataclasses import dataclass, replace

import tilelang.language as T

from mlagate.kernels import mla_decode as dense
from mlagate.kernels.mla_decode import (
    DTYPES,
    LOG2E,
    TileConfig,
    check_device,
    device_arch,
)


@dataclass(frozen=True)
class PagedShape:
    batch: int
    heads: int
    max_pages: int  # block table entries per sequence
    page_size: int
    dtype: str = "float16"
    dim: int = 512
    pe_dim: int = 64
    s_q: int = 1  # query tokens per sequence, causal among themselves (mla_decode's module docstring)
    kv_dtype: str | None = None  # the page pool's dtype: the query's (None gives it), or an fp8 format

    def __post_init__(self):
        if self.kv_dtype is None:
            object.__setattr__(self, "kv_dtype", self.dtype)

    @property
    def kv_fp8(self) -> bool:
        return self.kv_dtype in dense.FP8_DTYPES

    @classmethod
    def holding(cls, lengths, heads: int, page_size: int, dtype: str = "float16", dim: int = 512,
                pe_dim: int = 64, s_q: int = 1, kv_dtype: str | None = None) -> "PagedShape":
        """The shape of a batch of sequences of ``lengths`` tokens: a block table just wide enough."""
        return cls(batch=len(lengths), heads=heads, max_pages=max(math.ceil(n / page_size) for n in lengths),
                   page_size=page_size, dtype=dtype, dim=dim, pe_dim=pe_dim, s_q=s_q, kv_dtype=kv_dtype)

    def at_mean_length(self, lengths) -> dense.Shape:
        """The dense shape of this batch at its mean length: whose tuned config the paged kernel runs."""
        return dense.Shape(batch=self.batch, seqlen=sum(lengths) // self.batch, heads=self.heads,
                           dtype=self.dtype, dim=self.dim, pe_dim=self.pe_dim, s_q=self.s_q, kv_dtype=self.kv_dtype)

    @property
    def rows(self) -> int:
        """Query rows per sequence: s_q tokens x heads."""
        return self.s_q * self.heads

    @property
    def capacity(self) -> int:
        """The longest sequence the block table can hold."""
        return self.max_pages * self.page_size

    @property
    def scale(self) -> float:
        """Softmax scale folded with log2(e), so the kernel can use exp2."""
        return (self.dim + self.pe_dim) ** -0.5 * LOG2E

    def dense(self) -> dense.Shape:
        """The dense shape of a batch at full capacity, for the dense kernel's split and thread rules."""
        return dense.Shape(batch=self.batch, seqlen=self.capacity, heads=self.heads, dtype=self.dtype,
                           dim=self.dim, pe_dim=self.pe_dim, s_q=self.s_q, kv_dtype=self.kv_dtype)

    def check(self) -> None:
        for name in ("batch", "heads", "max_pages", "page_size", "dim", "pe_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        dense.check_kv_dtype(self.kv_dtype, self.dtype)
        dense.check_s_q(self.s_q)


@dataclass(frozen=True)
class PagedPlan:
    shape: PagedShape
    config: TileConfig
    num_split: int  # per launch; a short sequence leaves its later splits empty
    block_H: int
    threads: int
    parts: int = 0  # the balanced schedule's partitions (one thread block each per head block); 0: fixed splits
    converters: int = 0  # the dense plan's converter warpgroup for an fp8 cache (mla_decode.converter_threads), where
    # a page holds whole tiles: it reads them by TMA (mla_decode.converting_attend_macro)

    @property
    def block_threads(self) -> int:
        """The thread block: the consumers and the converters (mla_decode.Plan.block_threads)."""
        return self.threads + self.converters

    @property
    def gather(self) -> bool:
        """Whether tiles are gathered row by row: a page does not hold whole tiles."""
        return self.shape.page_size % self.config.block_N != 0

    @property
    def num_stages(self) -> int:
        """The config's stages; at most one for a gathered tile: TileLang 0.1.15 drains a deeper
        cp.async pipeline over a runtime tile count with a wait count that varies per epilogue
        step, which its CUDA code generation cannot emit ("Downcast from tirx.Sub to IntImm")."""
        return min(self.config.num_stages, 1) if self.gather else self.config.num_stages


def plan(shape: PagedShape, config: TileConfig, arch: str, sm_count: int | None = None) -> PagedPlan:
    """The dense plan at full capacity: its head block and threads are the dense kernel's. A config of num_split 0
    runs the balanced schedule (balanced_schedule) over one partition per SM and head block; a fixed num_split
    gives every sequence that many splits, capped at the tiles the longest possible sequence has."""
    shape.check()
    p = dense.plan(shape.dense(), config, arch, sm_count)
    if p.config.schedule == "seesaw":  # (a capacity of one tile, or an fp8 cache, runs the pipelined kernel)
        tile = p.config.block_N // 2
        if shape.page_size != tile or config.num_split != 0:
            raise ValueError(f"config {config.name}: the seesaw over pages takes pages of {tile} tokens (one per "
                             f"warpgroup tile) and the balanced schedule (num_split 0), got pages of "
                             f"{shape.page_size} and num_split {config.num_split}")
    num_split, parts = p.num_split, 0
    if config.num_split == 0:  # "fill the device": the balanced schedule, one partition per SM and head block
        sms = sm_count or dense.SM_COUNT.get(arch.split(":")[0], 132)
        num_split, parts = 0, max(1, sms // (shape.rows // p.block_H))
    plain = PagedPlan(shape, p.config, num_split, p.block_H, p.threads, parts=parts)
    return plain if plain.gather else replace(plain, converters=p.converters)  # a gathered tile is no TMA box


def split_tokens(seqlen, num_split: int, block_N: int):
    """Tokens per split of one sequence (an int, or the kernel's expression of its runtime length):
    a whole number of tiles, so no tile crosses a split, and num_split of them cover the sequence."""
    return T.ceildiv(T.ceildiv(seqlen, num_split), block_N) * block_N


# The fixed cost of one piece of the balanced schedule, in tokens of work: loading its queries, its softmax's setup
# and its partial's write and combine. FlashMLA's scheduler charges one too (5 of its 64-token blocks per sequence).
# 256: 4 of the pipelined kernel's 64-token tiles, 2 of the seesaw's pairs (at 16 heads the seesaw over pages was
# faster at 2 than at 4 on 7 of 8 workload points, and even at 128: docs/measurements.md, 2026-12-03).
PIECE_COST_TOKENS = 256


def piece_cost_tiles(block_N: int) -> int:
    """A piece's fixed cost in tiles of ``block_N`` tokens."""
    return max(1, PIECE_COST_TOKENS // block_N)


@dataclass(frozen=True)
class Schedule:
    """A batch's work dealt evenly over ``len(parts)`` partitions (balanced_schedule): ``pieces`` (sequence,
    first token, end token) in request order; ``parts`` each partition's (first piece, end piece); ``seq_pieces``
    each sequence's (first piece, end piece), the partials its combine merges."""

    pieces: tuple
    parts: tuple
    seq_pieces: tuple

    @property
    def merged(self) -> tuple:
        """The sequences split into more than one piece: the ones whose partials a combine merges."""
        return tuple(seq for seq, (first, end) in enumerate(self.seq_pieces) if end - first > 1)

    def tiles_per_part(self, block_N: int, piece_cost: int | None = None) -> list:
        """Each partition's work in tiles, a piece's fixed cost (default: piece_cost_tiles) included: the makespan is
        the largest."""
        piece_cost = piece_cost_tiles(block_N) if piece_cost is None else piece_cost
        return [sum(math.ceil((end - first) / block_N) + piece_cost for _, first, end in self.pieces[a:b])
                for a, b in self.parts]


def balanced_schedule(lengths, block_N: int, parts: int, piece_cost: int | None = None) -> Schedule:
    """Deal a ragged batch's tiles of ``block_N`` tokens evenly over ``parts`` partitions, across sequence boundaries
    (the idea of FlashMLA's and FlashInfer's decode schedulers): each partition takes up to an even share of the
    batch's work (tiles plus a fixed cost per piece, in tiles; default piece_cost_tiles), filled in request order, a
    sequence split where a partition fills. Pieces start on tile boundaries, so only a sequence's last tile is
    partial. Every partition's load is at most the share plus one piece's cost; trailing partitions may be empty."""
    piece_cost = piece_cost_tiles(block_N) if piece_cost is None else piece_cost
    if parts < 1 or block_N < 1 or piece_cost < 0:
        raise ValueError(f"parts and block_N must be >= 1 and piece_cost >= 0, got {parts}, {block_N}, {piece_cost}")
    tiles = [math.ceil(n / block_N) for n in lengths]
    if not tiles or min(lengths) < 1:
        raise ValueError(f"lengths: need at least one sequence, each of >= 1 token, got {list(lengths)}")
    # A partition that splits a sequence pays for one piece more than the share counts: + piece_cost.
    share = math.ceil((sum(tiles) + piece_cost * len(tiles)) / parts) + piece_cost
    pieces, part_ranges, seq_first = [], [], [0] * len(tiles)
    seq, done = 0, 0  # the next sequence to deal, and its tiles already dealt
    for _ in range(parts):
        first_piece, room = len(pieces), share
        while seq < len(tiles) and room > piece_cost:
            take = min(tiles[seq] - done, room - piece_cost)
            if done == 0:
                seq_first[seq] = len(pieces)
            end = min((done + take) * block_N, lengths[seq])
            pieces.append((seq, done * block_N, end))
            room -= take + piece_cost
            done += take
            if done == tiles[seq]:
                seq, done = seq + 1, 0
        part_ranges.append((first_piece, len(pieces)))
    assert seq == len(tiles), "the share covers the batch"  # share x parts >= every tile and piece cost
    seq_pieces = tuple(zip(seq_first, seq_first[1:] + [len(pieces)]))
    return Schedule(tuple(pieces), tuple(part_ranges), seq_pieces)


def balanced_piece(Seq_pieces):
    """The combine's index of partial k of sequence bid on the balanced schedule: its pieces are consecutive."""
    return lambda bid, hid, k: (Seq_pieces[bid, 0] + k, hid)


def program(p: PagedPlan):
    """The TileLang program for a plan: balanced, split + combine, or no-split; the seesaw's own (balanced)."""
    if p.config.schedule == "seesaw":
        return dense.schedule_module("seesaw").paged_program(p)
    s, c = p.shape, p.config
    batch, rows, max_pages, page_size, dim, pe_dim = s.batch, s.rows, s.max_pages, s.page_size, s.dim, s.pe_dim
    dtype, accum, index = s.dtype, "float32", "int32"
    block_N, block_H, num_split = c.block_N, p.block_H, p.num_split
    head_blocks = rows // block_H
    kv_dtype, kv_scale_t = s.kv_dtype, dense.kv_scale_param(s)
    in_shared = c.operands_in_shared
    gather = p.gather
    num_pages = T.dynamic("num_pages")

    @T.macro
    def load_tile(KV, K_pe, Block_table, bx, start, seqlen, KV_shared, K_pe_shared):
        """Tokens start .. start + block_N of sequence bx; start < seqlen."""
        if gather:
            for r, d in T.Parallel(block_N, dim):
                token = T.min(start + r, seqlen - 1)  # past the end: a valid row, masked later
                KV_shared[r, d] = KV[Block_table[bx, token // page_size], token % page_size, d]
            for r, d in T.Parallel(block_N, pe_dim):
                token = T.min(start + r, seqlen - 1)
                K_pe_shared[r, d] = K_pe[Block_table[bx, token // page_size], token % page_size, d]
        else:
            page = Block_table[bx, start // page_size]
            offset = start % page_size
            T.copy(KV[page, offset:offset + block_N, :], KV_shared)
            T.copy(K_pe[page, offset:offset + block_N, :], K_pe_shared)

    @T.macro
    def tma_tile(KV, K_pe, Block_table, bx, start, KV_stage, K_pe_stage, loaded):
        """Tokens start .. start + block_N of sequence bx by TMA into fp8 stages, counted on ``loaded[0]``."""
        page = Block_table[bx, start // page_size]
        offset = start % page_size
        T.tma_copy(KV[page, offset:offset + block_N, :], KV_stage, barrier=loaded[0])
        T.tma_copy(K_pe[page, offset:offset + block_N, :], K_pe_stage, barrier=loaded[0])

    # Lengths are runtime data: every tile may hold a tail, and a split past a sequence's end none.
    attend = dense.attend_macro(s, c, block_H, p.num_stages, load_tile, masked=True, empty_splits=True,
                                converters=p.converters, tma_tile=tma_tile)
    consumers = p.threads  # the epilogues' threads: every thread but an fp8 cache's converters
    combine = dense.combine_macro(dim)
    write_unsplit = dense.write_unsplit_macro(s, block_H, in_shared)

    parts = p.parts
    if parts:  # traced where defined: only the program this plan runs (a split of 0 splits is none)
        num_pieces = T.dynamic("num_pieces")

        @T.prim_func
        def main_balanced(
                Q: T.Tensor([batch, rows, dim], dtype),
                Q_pe: T.Tensor([batch, rows, pe_dim], dtype),
                KV: T.Tensor([num_pages, page_size, dim], kv_dtype),
                K_pe: T.Tensor([num_pages, page_size, pe_dim], kv_dtype),
                Kv_scale: kv_scale_t,
                Block_table: T.Tensor([batch, max_pages], index),
                Cache_seqlens: T.Tensor([batch], index),
                Parts: T.Tensor([parts, 2], index),
                Pieces: T.Tensor([num_pieces, 3], index),
                Seq_pieces: T.Tensor([batch, 2], index),
                glse: T.Tensor([num_pieces, rows], accum),
                O_partial: T.Tensor([num_pieces, rows, dim], accum),
                Output: T.Tensor([batch, rows, dim], dtype),
                Lse: T.Tensor([batch, rows], accum),
        ):
            # One thread block per (partition, head block) runs its partition's pieces one after another.
            with T.Kernel(parts, head_blocks, threads=p.block_threads) as (bx, by):
                acc_o = T.alloc_fragment([block_H, dim], accum)
                logsum = T.alloc_fragment([block_H], accum)
                scores_max = T.alloc_fragment([block_H], accum)
                for w in T.serial(Parts[bx, 1] - Parts[bx, 0]):
                    piece = Parts[bx, 0] + w
                    seq = Pieces[piece, 0]
                    first_token = Pieces[piece, 1]
                    attend(Q, Q_pe, KV, K_pe, Kv_scale, Block_table, seq, by, Cache_seqlens[seq], first_token,
                           T.ceildiv(Pieces[piece, 2] - first_token, block_N), acc_o, logsum, scores_max)
                    if T.get_thread_binding() < consumers:
                        for i in T.Parallel(block_H):
                            logsum[i] = T.log2(logsum[i]) + scores_max[i] * dense.score_scale(s, Kv_scale)
                        T.copy(logsum, glse[piece, by * block_H:(by + 1) * block_H])
                        T.copy(acc_o, O_partial[piece, by * block_H:(by + 1) * block_H, :])

            with T.Kernel(rows, batch, threads=128) as (hid, bid):
                dense.combine_macro(dim, balanced_piece(Seq_pieces))(
                    glse, O_partial, Output, Lse, bid, hid, Seq_pieces[bid, 1] - Seq_pieces[bid, 0])
        return main_balanced

    @T.prim_func
    def main_split(
            Q: T.Tensor([batch, rows, dim], dtype),
            Q_pe: T.Tensor([batch, rows, pe_dim], dtype),
            KV: T.Tensor([num_pages, page_size, dim], kv_dtype),
            K_pe: T.Tensor([num_pages, page_size, pe_dim], kv_dtype),
            Kv_scale: kv_scale_t,
            Block_table: T.Tensor([batch, max_pages], index),
            Cache_seqlens: T.Tensor([batch], index),
            glse: T.Tensor([batch, rows, num_split], accum),
            O_partial: T.Tensor([batch, rows, num_split, dim], accum),
            Output: T.Tensor([batch, rows, dim], dtype),
            Lse: T.Tensor([batch, rows], accum),
    ):
        with T.Kernel(batch, head_blocks, num_split, threads=p.block_threads) as (bx, by, bz):
            acc_o = T.alloc_fragment([block_H, dim], accum)
            logsum = T.alloc_fragment([block_H], accum)
            scores_max = T.alloc_fragment([block_H], accum)
            T.use_swizzle(10)
            seqlen = Cache_seqlens[bx]
            split_len = split_tokens(seqlen, num_split, block_N)
            first_token = bz * split_len
            # Tiles up to the split's end or the sequence's, whichever is first: none for a split past the end.
            n_blocks = T.ceildiv(T.max(T.min(split_len, seqlen - first_token), 0), block_N)
            attend(Q, Q_pe, KV, K_pe, Kv_scale, Block_table, bx, by, seqlen, first_token, n_blocks, acc_o, logsum,
                   scores_max)
            if T.get_thread_binding() < consumers:
                for i in T.Parallel(block_H):
                    logsum[i] = T.if_then_else(logsum[i] > 0,
                                               T.log2(logsum[i]) + scores_max[i] * dense.score_scale(s, Kv_scale),
                                               -T.infinity(accum))
                T.copy(logsum, glse[bx, by * block_H:(by + 1) * block_H, bz])
                T.copy(acc_o, O_partial[bx, by * block_H:(by + 1) * block_H, bz, :])

        with T.Kernel(rows, batch, threads=128) as (hid, bid):
            seqlen = Cache_seqlens[bid]
            live_splits = T.ceildiv(seqlen, split_tokens(seqlen, num_split, block_N))  # split 0 always holds a token
            combine(glse, O_partial, Output, Lse, bid, hid, live_splits)

    @T.prim_func
    def main_no_split(
            Q: T.Tensor([batch, rows, dim], dtype),
            Q_pe: T.Tensor([batch, rows, pe_dim], dtype),
            KV: T.Tensor([num_pages, page_size, dim], kv_dtype),
            K_pe: T.Tensor([num_pages, page_size, pe_dim], kv_dtype),
            Kv_scale: kv_scale_t,
            Block_table: T.Tensor([batch, max_pages], index),
            Cache_seqlens: T.Tensor([batch], index),
            Output: T.Tensor([batch, rows, dim], dtype),
            Lse: T.Tensor([batch, rows], accum),
    ):
        with T.Kernel(batch, head_blocks, threads=p.block_threads) as (bx, by):
            acc_o = T.alloc_fragment([block_H, dim], accum)
            logsum = T.alloc_fragment([block_H], accum)
            scores_max = T.alloc_fragment([block_H], accum)
            T.use_swizzle(10)
            seqlen = Cache_seqlens[bx]
            attend(Q, Q_pe, KV, K_pe, Kv_scale, Block_table, bx, by, seqlen, 0, T.ceildiv(seqlen, block_N),
                   acc_o, logsum, scores_max)
            if T.get_thread_binding() < consumers:
                write_unsplit(acc_o, logsum, scores_max, Kv_scale, Lse, Output, bx, by)

    return main_split if num_split > 1 else main_no_split


# ----------------------------------------------------------------------------
# Compilation and the Python entry point.

def lowered(p: PagedPlan, arch: str):
    """TileLang's lowered artifact of a plan (device module and source), without a GPU."""
    return dense.lowered(p, arch, program)


def lower(shape: PagedShape, config: TileConfig, arch: str) -> str:
    """Device source code for one kernel, without a GPU (codegen only)."""
    return lowered(plan(shape, config, arch), arch).kernel_source


class CompiledPagedDecode(dense.CompiledProgram):
    """The paged kernel compiled for one (shape, config): its own launch arguments (the block table and
    the lengths, and a balanced plan's schedule) on the dense kernel's compile and workspace."""

    def __init__(self, shape: PagedShape, config: TileConfig, arch: str, sm_count: int):
        super().__init__(plan(shape, config, arch, sm_count), program, arch)

    def schedule(self, lengths) -> Schedule:
        """A balanced plan's schedule of a batch of ``lengths``: computed on the host once per batch."""
        return balanced_schedule(lengths, self.plan.config.block_N, self.plan.parts)

    def batch(self, sched: Schedule, device) -> tuple:
        """``sched`` as the kernel reads it (Parts, Pieces, Seq_pieces, and the seesaw's Merged: its combine's
        sequences, [-1] for none; int32) with its workspace (glse, O_partial, float32)."""
        import torch

        rows, dim = self.plan.shape.rows, self.plan.shape.dim
        i32 = dict(dtype=torch.int32, device=device)
        merged = (torch.tensor(sched.merged or (-1,), **i32),) if self.plan.config.schedule == "seesaw" else ()
        return (torch.tensor(sched.parts, **i32), torch.tensor(sched.pieces, **i32),
                torch.tensor(sched.seq_pieces, **i32), *merged,
                torch.empty(len(sched.pieces), rows, device=device, dtype=torch.float32),
                torch.empty(len(sched.pieces), rows, dim, device=device, dtype=torch.float32))

    def __call__(self, q, q_pe, kv_cache, k_pe_cache, block_table, cache_seqlens, out, lse, batch=None,
                 kv_scale=None):
        """Launch on checked inputs; writes ``out`` and ``lse`` in place (3-D or 4-D q, as the dense kernel). A
        balanced plan takes its ``batch`` (CompiledPagedDecode.batch of these lengths' schedule), else reads the
        lengths and builds it (a host sync). An fp8 cache's ``kv_scale``: float32 [1] on the device
        (mla_decode.scale_tensor)."""
        rows = dense.as_rows
        scale = (kv_scale,) if self.plan.shape.kv_fp8 else ()
        inputs = (rows(q, 3), rows(q_pe, 3), kv_cache, k_pe_cache, *scale, block_table, cache_seqlens)
        if self.plan.parts:
            inputs += batch or self.batch(self.schedule(cache_seqlens.tolist()), q.device)
        return self.launch(inputs, rows(out, 3), rows(lse, 2))


class BatchLaunch:
    """A compiled paged kernel with one batch's schedule: launches for those lengths only (compiled(..., lengths))."""

    def __init__(self, kernel: CompiledPagedDecode, lengths, device):
        self.kernel, self.plan = kernel, kernel.plan
        self.schedule = kernel.schedule(lengths)
        self._batch = kernel.batch(self.schedule, device)

    def __call__(self, *args, kv_scale=None):
        return self.kernel(*args, batch=self._batch, kv_scale=kv_scale)


_compiled: dict = {}


def compiled(shape: PagedShape, config: TileConfig, device=None, lengths=None):
    """Compile once per (shape, config, device architecture) in this process. With the batch's ``lengths``, a
    balanced plan comes bound to their schedule (a BatchLaunch: no host work per launch)."""
    import torch

    device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    arch = device_arch(device)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    key = (shape, config, arch)
    if key not in _compiled:
        _compiled[key] = CompiledPagedDecode(shape, config, arch, sms)
    kernel = _compiled[key]
    return BatchLaunch(kernel, list(lengths), device) if lengths and kernel.plan.parts else kernel


def check_paged_inputs(q, q_pe, kv_cache, k_pe_cache, block_table, cache_seqlens, kv_scale=None) -> PagedShape:
    """Validate paged decode inputs before any launch; returns their PagedShape.

    Layout: q [batch, heads, dim] or [batch, s_q, heads, dim], q_pe likewise, kv_cache [num_pages, page_size, dim],
    k_pe_cache [num_pages, page_size, pe_dim] (in q's dtype, or both fp8 with ``kv_scale``), block_table
    [batch, max_pages] int32, cache_seqlens [batch] int32. Reads the lengths and the used table entries (a host sync).
    """
    import torch

    named = {"q": q, "q_pe": q_pe, "kv_cache": kv_cache, "k_pe_cache": k_pe_cache,
             "block_table": block_table, "cache_seqlens": cache_seqlens}
    kv_dtype = dense.check_dtypes({k: named[k] for k in ("q", "q_pe", "kv_cache", "k_pe_cache")},
                                  ("kv_cache", "k_pe_cache"), kv_scale)
    for name, t in named.items():
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name}: must be a torch.Tensor, got {type(t).__name__}")
    for name in ("block_table", "cache_seqlens"):
        if named[name].dtype != torch.int32:
            raise ValueError(f"{name}: dtype must be torch.int32, got {named[name].dtype}")
    for name, ndim in (("kv_cache", 3), ("k_pe_cache", 3), ("block_table", 2), ("cache_seqlens", 1)):
        if named[name].dim() != ndim:
            raise ValueError(f"{name}: must have {ndim} dimensions, got shape {tuple(named[name].shape)}")
    batch, s_q, heads, dim, pe_dim = dense.check_query(named)
    num_pages, page_size = kv_cache.shape[0], kv_cache.shape[1]
    max_pages = block_table.shape[1]
    for name, value in (("q: batch", batch), ("kv_cache: num_pages", num_pages),
                        ("kv_cache: page_size", page_size), ("block_table: max_pages", max_pages)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    expected = {
        "kv_cache": (num_pages, page_size, dim),
        "k_pe_cache": (num_pages, page_size, pe_dim),
        "block_table": (batch, max_pages),
        "cache_seqlens": (batch,),
    }
    for name, want in expected.items():
        if tuple(named[name].shape) != want:
            raise ValueError(f"{name}: shape must be {want} to match q {tuple(q.shape)}, q_pe, kv_cache "
                             f"{tuple(kv_cache.shape)} and block_table, got {tuple(named[name].shape)}")
    for name, t in named.items():
        if not t.is_contiguous():
            raise ValueError(f"{name}: must be contiguous (call .contiguous())")
    for name in ("q", "q_pe"):
        if not bool(torch.isfinite(named[name]).all()):
            raise ValueError(f"{name}: contains NaN or Inf")
    lengths = cache_seqlens.tolist()
    capacity = max_pages * page_size
    for b, n in enumerate(lengths):
        if not 1 <= n <= capacity:
            raise ValueError(f"cache_seqlens: sequence {b} has length {n}; each must be >= 1 and <= "
                             f"max_pages * page_size = {capacity}")
        if n < s_q:
            raise ValueError(f"cache_seqlens: sequence {b}: {dense.causal_refusal(n, s_q)}")
    pages_used = torch.tensor([math.ceil(n / page_size) for n in lengths], device=block_table.device)
    used = torch.arange(max_pages, device=block_table.device)[None, :] < pages_used[:, None]
    ids = block_table[used]
    if bool(((ids < 0) | (ids >= num_pages)).any()):
        raise ValueError(f"block_table: a sequence's page id is outside 0 .. {num_pages - 1} (num_pages) "
                         f"within its first ceil(length / page_size) entries")
    check_device(named)
    dtype = "float16" if q.dtype == torch.float16 else "bfloat16"
    shape = PagedShape(batch=batch, heads=heads, max_pages=max_pages, page_size=page_size, dtype=dtype,
                       dim=dim, pe_dim=pe_dim, s_q=s_q, kv_dtype=kv_dtype)
    shape.check()
    return shape


def mla_decode_paged(q, q_pe, kv_cache, k_pe_cache, block_table, cache_seqlens, *, kv_scale: float | None = None,
                     config: TileConfig | None = None, return_lse: bool = False):
    """MLA decode over a paged KV cache: per sequence b, softmax(q·kᵀ / sqrt(dim + pe_dim)) · v
    over its cache_seqlens[b] tokens, found through block_table[b].

    q as mla_decode.mla_decode takes it (3-D, or [batch, s_q, heads, dim]: causal, the new tokens are each
    sequence's last s_q positions). Returns ``out`` of q's shape in the input dtype, and with ``return_lse``
    also the natural-log log-sum-exp of q's shape less dim (float32). ``config`` defaults to the device
    architecture's family config. An fp8 cache (both pools in the arch's mla_decode.FP8_FORMAT) takes
    ``kv_scale``: dequantized = fp8 value x kv_scale.
    """
    import torch

    shape = check_paged_inputs(q, q_pe, kv_cache, k_pe_cache, block_table, cache_seqlens, kv_scale)
    dense.check_kv_format(shape.kv_dtype, device_arch(q.device))
    config = config or dense.config_for_arch(device_arch(q.device))
    kernel = compiled(shape, config, q.device, cache_seqlens.tolist())  # check_paged_inputs read them already
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:-1], device=q.device, dtype=torch.float32)
    scale = dense.scale_tensor(kv_scale, q.device) if shape.kv_fp8 else None
    kernel(q, q_pe, kv_cache, k_pe_cache, block_table, cache_seqlens, out, lse, kv_scale=scale)
    return (out, lse) if return_lse else out


# ----------------------------------------------------------------------------
# Reference and inputs.

def gather_sequence(kv_cache, block_table, b: int, length: int):
    """Sequence b's first ``length`` cache rows, in token order, through its block table."""
    page_size = kv_cache.shape[1]
    pages = block_table[b, :math.ceil(length / page_size)].long()
    return kv_cache[pages].reshape(-1, kv_cache.shape[2])[:length]


def reference_paged(q, q_pe, kv_cache, k_pe_cache, block_table, cache_seqlens, compute_dtype=None, *,
                    kv_scale=None):
    """kernels/mla_decode.py's dense reference (its causal mask at 4-D q), per sequence, on the tokens its
    block table names: float32 out of q's shape and natural-log lse of q's shape less dim. An fp8 cache is
    dequantized first (``kv_scale``)."""
    import torch

    kv_cache, k_pe_cache = dense.dequantized(kv_cache, k_pe_cache, kv_scale)
    outs, lses = [], []
    for b, length in enumerate(cache_seqlens.tolist()):
        kv = gather_sequence(kv_cache, block_table, b, length)[None, :, None]
        k_pe = gather_sequence(k_pe_cache, block_table, b, length)[None, :, None]
        out, lse = dense.reference(q[b:b + 1], q_pe[b:b + 1], kv, k_pe, compute_dtype)
        outs.append(out)
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses)


def random_paged_inputs(batch: int, heads: int, lengths, page_size: int, dtype: str = "float16",
                        device="cpu", seed: int = 0, shuffle: bool = True, dim: int = 512, pe_dim: int = 64,
                        s_q: int = 1, kv_dtype: str | None = None):
    """Seeded standard-normal inputs for sequences of ``lengths`` tokens: q, q_pe, kv_cache,
    k_pe_cache, block_table, cache_seqlens. The cache holds exactly the pages the sequences use,
    handed out in a shuffled order (``shuffle``) or in sequence order; unused table entries are -1.
    q and q_pe are [batch, s_q, heads, d] where s_q > 1. An fp8 ``kv_dtype`` gives both pools quantized
    (mla_decode.quantize) and their scale last: ..., block_table, cache_seqlens, kv_scale."""
    import torch

    lengths = list(lengths)
    if len(lengths) != batch or min(lengths) < 1:
        raise ValueError(f"lengths: need {batch} lengths (one per sequence), each >= 1, got {lengths}")
    gen = torch.Generator(device=device).manual_seed(seed)
    torch_dtype = getattr(torch, dtype)

    def randn(*size):
        return torch.randn(*size, generator=gen, device=device, dtype=torch.float32).to(torch_dtype)

    pages_per_seq = [math.ceil(n / page_size) for n in lengths]
    num_pages, max_pages = sum(pages_per_seq), PagedShape.holding(lengths, heads, page_size).max_pages
    order = torch.randperm(num_pages, generator=gen, device=device) if shuffle else \
        torch.arange(num_pages, device=device)
    block_table = torch.full((batch, max_pages), -1, dtype=torch.int32, device=device)
    taken = 0
    for b, n in enumerate(pages_per_seq):
        block_table[b, :n] = order[taken:taken + n].to(torch.int32)
        taken += n
    cache_seqlens = torch.tensor(lengths, dtype=torch.int32, device=device)
    lead = dense.query_lead(batch, s_q, heads)
    q, q_pe, kv_cache, k_pe_cache = (randn(*lead, dim), randn(*lead, pe_dim), randn(num_pages, page_size, dim),
                                     randn(num_pages, page_size, pe_dim))
    if kv_dtype in (None, dtype):
        return q, q_pe, kv_cache, k_pe_cache, block_table, cache_seqlens
    dense.check_kv_dtype(kv_dtype, dtype)
    kv_cache, k_pe_cache, kv_scale = dense.quantize(kv_cache, k_pe_cache, kv_dtype)
    return q, q_pe, kv_cache, k_pe_cache, block_table, cache_seqlens, kv_scale

"""FlashMLA's "seesaw" decode schedule for Hopper, written for this project in TileLang.

Two warpgroups take alternate 64-token K/V tiles of a pair: warpgroup 0 scores the even tile, warpgroup 1
the odd one, each over the full 576 dims. The output's 512 latent columns are split instead: warpgroup 0
holds the left 256, warpgroup 1 the right 256, and each multiplies both tiles' probabilities into its half.
So each warpgroup's softmax runs while the other's matrix units work (deepseek-ai/FlashMLA,
docs/20250422-new-kernel-deep-dive.md; TileLang's examples/warp_specialize has a port it learns from).

Per pair, with m the running row max kept in shared memory:
  wg0: S0 = Q K0ᵀ; m0 = max(m, rowmax S0); P0 = exp2(S0 - m0); O_l = O_l e(m - m0) + P0 V0_l
  wg1: S1 = Q K1ᵀ; m1 = max(m0, rowmax S1); P1 = exp2(S1 - m1); O_r = O_r e(m - m1) + P1 V1_r
  wg0: O_l = O_l e(m0 - m1) + P1 V1_l         wg1: O_r += (P0 e(m0 - m1)) V0_r
Each loads the next pair's tiles (TMA, 64-column boxes) as soon as its own reads of the old ones are done,
and starts the next pair's scores before its last product has drained, in the order the boxes land: wg0 loads
K0_l and K0_pe early (no product reads K0_pe) and scores them before K0_r, which wg1 can only request once its
P0 V0_r is done; wg1 scores K1_r, its own early load, before K1_l and K1_pe. In the fixed left-right-pe order
each warpgroup's largest stall was its wait for the late half, K1_l in wg1 and K0_r in wg0 (docs/measurements.md,
seventh session).

What the project's pipelined kernel promises, this one keeps: any seqlen (the tail is masked, a split's loop
stops at its last pair holding tokens; a cache of one tile or less runs the pipelined kernel, mla_decode.plan),
fp16 and bf16, the natural-log lse, 16 to 128 heads at s_q 1..8 query tokens (a head block is one 64-row wgmma tile of
the s_q x heads query rows, causal among the new tokens; fewer rows fill the others with zeros and never store them),
split-KV with the shared combine, and mla_decode's input checks.
mla_decode.program builds it for a config of schedule "seesaw", whose block_N is the 128 tokens of a pair.
"""

import tilelang.language as T

from mlagate.kernels import mla_decode

ROWS = 64  # one wgmma tile of rows per warpgroup: the head block, whatever the heads
K_TILE = 64  # columns per TMA box and per wgmma of the scores: 128 bytes of fp16 or bf16


def attend_macro(shape, config, valid: int, finish, *, masked: bool, paged: bool = False):
    """The schedule's macro for a head block of ``valid`` real heads (all 64, or the 16 or 32 of a smaller model
    shard), over ``n_pairs`` pairs of tiles from ``first_token`` on, ending in
    ``finish(acc_o, O_s, col, m, l, writes_lse, out, lse_out, bx, by, bz)``: each warpgroup's normalised output
    half (columns col .. col + half) with the row max m and sum l. ``mlagate ladder`` wraps it (its arguments:
    mlagate.ladder.rules.SEESAW_ATTEND_ARGS). ``paged``: the macro reads a page pool KV [pages, 64, dim] through
    Block_table (one 64-token page per warpgroup tile) for each piece of partition bz in turn (Parts, Pieces:
    mla_decode_paged.Schedule), at each sequence's runtime length, as ``attend(Q, Q_pe, KV, K_pe, Block_table,
    Cache_seqlens, Parts, Pieces, 0, by, bz, 0, 0, out, lse_out)``, ending each piece in ``finish(..., seq, by,
    piece)``."""
    heads, rows, s_q, dim, pe_dim = shape.heads, shape.rows, shape.s_q, shape.dim, shape.pe_dim
    seqlen = getattr(shape, "seqlen", None)  # a dense cache's; a paged batch's is each sequence's, at run time
    dtype, accum = shape.dtype, "float32"
    tile = config.block_N // 2  # tokens per warpgroup (TileConfig.check: 64, and mla_decode.plan: seqlen > 64)
    half = dim // 2
    k_tiles = half // K_TILE
    scale = shape.scale
    neg_inf = -T.infinity(accum)

    def box(Cache, at, lo, hi):
        """Columns lo .. hi of a tile's tokens: a dense cache's rows from ``at`` = (sequence, first token), a page
        pool's page ``at`` (rows past a dense cache read 0)."""
        return Cache[at, 0:tile, lo:hi] if paged else Cache[at[0], at[1]:at[1] + tile, 0, lo:hi]

    def tile_at(Block_table, seqlen, bx, start):
        """Where tokens start .. start + tile of sequence bx lie: a dense cache's (sequence, first token), or a page
        of the pool, read from the block table (a tile past the sequence's end is its last page: masked)."""
        return Block_table[bx, T.min(start, seqlen - 1) // tile] if paged else (bx, start)

    @T.macro
    def load_tile(KV, K_pe, at, K_l, K_r, K_pe_s, ready_l, ready_r, ready_pe, left, right, pe):
        """TMA the chosen parts of the tile ``at`` (tile_at)."""
        if left:
            for j in T.unroll(k_tiles):
                T.tma_copy(box(KV, at, j * K_TILE, (j + 1) * K_TILE), K_l[:, j * K_TILE:(j + 1) * K_TILE],
                           barrier=ready_l[j])
                T.barrier_arrive(ready_l[j])
        if right:
            for j in T.unroll(k_tiles):
                T.tma_copy(box(KV, at, half + j * K_TILE, half + (j + 1) * K_TILE), K_r[:, j * K_TILE:(j + 1) * K_TILE],
                           barrier=ready_r[j])
                T.barrier_arrive(ready_r[j])
        if pe:
            T.tma_copy(box(K_pe, at, 0, pe_dim), K_pe_s, barrier=ready_pe)
            T.barrier_arrive(ready_pe)

    @T.macro
    def scores_half(Q_h, K_h, ready, acc_s, parity, first):
        """One 256-column half of the scores, box by box as each lands; ``first`` clears acc_s."""
        for j in T.unroll(k_tiles):
            T.barrier_wait(ready[j], parity)
            T.wgmma_gemm(Q_h[:, j * K_TILE:(j + 1) * K_TILE], K_h[:, j * K_TILE:(j + 1) * K_TILE], acc_s,
                         transpose_B=True, clear_accum=(j == 0) if first else False)

    @T.macro
    def scores_pe(Q_pe_regs, K_pe_s, ready_pe, acc_s, parity):
        T.barrier_wait(ready_pe, parity)
        T.wgmma_gemm(Q_pe_regs, K_pe_s, acc_s, transpose_B=True)

    @T.macro
    def mask_past(acc_s, start, seqlen):
        for i, j in T.Parallel(ROWS, tile):
            acc_s[i, j] = T.if_then_else(start + j < seqlen, acc_s[i, j], mla_decode.MASKED)

    @T.macro
    def mask_tail(acc_s, start, by, seqlen):
        """Scores past the cache become MASKED (mla_decode's module docstring says why not -inf); with s_q > 1 every
        tile that holds one of the last s_q positions is masked causally: row i of head block by is token
        (by * valid + i) // heads of the new ones."""
        if s_q > 1:
            if start + tile > seqlen - (s_q - 1):  # only a tile holding one of the last s_q positions
                for i, j in T.Parallel(ROWS, tile):
                    acc_s[i, j] = T.if_then_else(
                        start + j < seqlen - (s_q - 1) + T.min(by * valid + i, rows - 1) // heads, acc_s[i, j],
                        mla_decode.MASKED)
        elif paged:  # pieces start on pair boundaries: only a sequence's last pair holds its end
            if start + tile > seqlen:
                mask_past(acc_s, start, seqlen)
        elif masked:
            mask_past(acc_s, start, seqlen)

    @T.macro
    def load_q(Q, Q_pe, bx, by, Q_l, Q_r, Q_pe_s):
        """The head block's queries; rows past ``valid`` are zeros (their scores are 0, never stored)."""
        h0 = by * valid
        for i, j in T.Parallel(ROWS, half):
            Q_l[i, j] = T.if_then_else(i < valid, Q[bx, T.min(h0 + i, rows - 1), j], 0)
        for i, j in T.Parallel(ROWS, half):
            Q_r[i, j] = T.if_then_else(i < valid, Q[bx, T.min(h0 + i, rows - 1), half + j], 0)
        for i, j in T.Parallel(ROWS, pe_dim):
            Q_pe_s[i, j] = T.if_then_else(i < valid, Q_pe[bx, T.min(h0 + i, rows - 1), j], 0)


    def pieces_of(Parts, bz):
        """A partition's pieces one after another over pages; a dense cache's one piece, unrolled at trace time."""
        return T.serial(Parts[bz, 1] - Parts[bz, 0]) if paged else (0,)

    @T.macro
    def attend_any(Q, Q_pe, KV, K_pe, Block_table, Cache_seqlens, Parts, Pieces, bx, by, bz, first_token, n_pairs,
                   out, lse_out):
        """Online softmax over n_pairs pairs of tiles from first_token on; over pages, over each piece of partition
        bz in turn (bx, first_token and n_pairs are the piece's)."""
        Q_l = T.alloc_shared([ROWS, half], dtype)
        Q_r = T.alloc_shared([ROWS, half], dtype)
        Q_pe_s = T.alloc_shared([ROWS, pe_dim], dtype)
        K0_l = T.alloc_shared([tile, half], dtype)
        K0_r = T.alloc_shared([tile, half], dtype)
        K0_pe = T.alloc_shared([tile, pe_dim], dtype)
        K1_l = T.alloc_shared([tile, half], dtype)
        K1_r = T.alloc_shared([tile, half], dtype)
        K1_pe = T.alloc_shared([tile, pe_dim], dtype)
        P0_s = T.alloc_shared([ROWS, tile], dtype)
        P1_s = Q_pe_s  # both warpgroups hold Q_pe in registers before the first P1 is written
        row_max = T.alloc_shared([ROWS], accum)
        rescale_0 = T.alloc_shared([ROWS], accum)
        rescale_1 = T.alloc_shared([ROWS], accum)
        row_sum = T.alloc_shared([ROWS], accum)

        q_ready = T.alloc_barrier(arrive_count=256)
        k0_l_ready = T.alloc_barrier(arrive_count=[128] * k_tiles)
        k0_r_ready = T.alloc_barrier(arrive_count=[128] * k_tiles)
        k0_pe_ready = T.alloc_barrier(arrive_count=128)
        k1_l_ready = T.alloc_barrier(arrive_count=[128] * k_tiles)
        k1_r_ready = T.alloc_barrier(arrive_count=[128] * k_tiles)
        k1_pe_ready = T.alloc_barrier(arrive_count=128)
        max0_ready = T.alloc_barrier(arrive_count=128)  # wg0 wrote m0 and rescale_0
        max1_ready = T.alloc_barrier(arrive_count=128)  # wg1 wrote m1 and rescale_1
        p0_ready = T.alloc_barrier(arrive_count=128)  # wg0 wrote P0 e(m0 - m1)
        p1_ready = T.alloc_barrier(arrive_count=128)  # wg1 wrote P1
        sum0_ready = T.alloc_barrier(arrive_count=128)
        sum_ready = T.alloc_barrier(arrive_count=128)

        tx = T.get_thread_binding()
        seqlen = Cache_seqlens
        seq, piece = bx, bz
        pairs_before = 0  # pairs of the block's earlier pieces: a pair-paced barrier's parity goes on from there
        if paged:
            pairs_done = T.alloc_var("int32", init=0)
        for w in pieces_of(Parts, bz):
            if paged:
                piece = Parts[bz, 0] + w
                seq = Pieces[piece, 0]
                first_token = Pieces[piece, 1]
                n_pairs = T.ceildiv(Pieces[piece, 2] - first_token, 2 * tile)
                seqlen = Cache_seqlens[seq]
                pairs_before = pairs_done
            load_q(Q, Q_pe, seq, by, Q_l, Q_r, Q_pe_s)
            T.fill(row_max, neg_inf)
            T.fence_proxy_async()  # generic-proxy stores of Q, read next by wgmma (the async proxy)
            T.barrier_arrive(q_ready)
            T.barrier_wait(q_ready, w % 2)

            if tx < 128:
                # Each warpgroup's own fragments: one fragment laid out over both would give each
                # warpgroup's branch only its half of the threads.
                Q_pe_regs = T.alloc_fragment([ROWS, pe_dim], dtype)
                acc_s = T.alloc_fragment([ROWS, tile], accum)
                P_regs = T.alloc_fragment([ROWS, tile], dtype)
                acc_o = T.alloc_fragment([ROWS, half], accum)
                m_prev = T.alloc_fragment([ROWS], accum)
                m_new = T.alloc_fragment([ROWS], accum)
                tile_sum = T.alloc_fragment([ROWS], accum)
                l_part = T.alloc_fragment([ROWS], accum)
                T.copy(Q_pe_s, Q_pe_regs)
                T.fill(acc_o, 0)
                T.fill(l_part, 0)
                load_tile(KV, K_pe, tile_at(Block_table, seqlen, seq, first_token + 1 * tile), K1_l, K1_r, K1_pe,
                          k1_l_ready, k1_r_ready, k1_pe_ready, True, True, True)
                scores_half(Q_l, K0_l, k0_l_ready, acc_s, pairs_before % 2, True)
                scores_half(Q_r, K0_r, k0_r_ready, acc_s, pairs_before % 2, False)
                scores_pe(Q_pe_regs, K0_pe, k0_pe_ready, acc_s, pairs_before % 2)
                T.wait_wgmma(0)
                for k in T.serial(n_pairs):
                    # the next pair's pages, read while this pair's softmax runs (at its TMA issue, the read's
                    # latency would hold up the warpgroup)
                    at_even = tile_at(Block_table, seqlen, seq, first_token + (2 * k + 2) * tile)
                    at_odd = tile_at(Block_table, seqlen, seq, first_token + (2 * k + 3) * tile)
                    mask_tail(acc_s, first_token + (2 * k) * tile, by, seqlen)
                    T.copy(row_max, m_prev)
                    T.copy(m_prev, m_new)
                    T.reduce_max(acc_s, m_new, dim=1, clear=False)
                    T.copy(m_new, row_max)
                    for i, j in T.Parallel(ROWS, tile):
                        acc_s[i, j] = T.exp2(acc_s[i, j] * scale - m_new[i] * scale)
                    for i in T.Parallel(ROWS):
                        rescale_0[i] = T.exp2(m_prev[i] * scale - m_new[i] * scale)
                    T.reduce_sum(acc_s, tile_sum, dim=1)
                    T.copy(acc_s, P_regs)
                    for i, j in T.Parallel(ROWS, half):
                        acc_o[i, j] *= rescale_0[i]
                    for i in T.Parallel(ROWS):
                        l_part[i] = l_part[i] * rescale_0[i] + tile_sum[i]
                    T.barrier_arrive(max0_ready)
                    T.wgmma_gemm(P_regs, K0_l, acc_o)
                    T.wait_wgmma(0)
                    T.barrier_wait(max1_ready, (pairs_before + k) % 2)
                    # K0_l is wg0's alone, free once P0 V0_l is done; K0_pe is read only by wg0's scores, done before
                    # its softmax
                    if k < n_pairs - 1:
                        load_tile(KV, K_pe, at_even, K0_l, K0_r, K0_pe,
                                  k0_l_ready, k0_r_ready, k0_pe_ready, True, False, True)
                    for i, j in T.Parallel(ROWS, tile):
                        P_regs[i, j] = acc_s[i, j] * rescale_1[i]
                    T.copy(P_regs, P0_s)
                    T.fence_proxy_async()  # wg1's wgmma reads P0_s
                    T.barrier_arrive(p0_ready)
                    for i, j in T.Parallel(ROWS, half):
                        acc_o[i, j] *= rescale_1[i]
                    for i in T.Parallel(ROWS):
                        l_part[i] = l_part[i] * rescale_1[i]
                    T.barrier_wait(p1_ready, (pairs_before + k) % 2)
                    T.wgmma_gemm(P1_s, K1_l, acc_o)
                    if k < n_pairs - 1:
                        # the next scores in the order their tiles land: K0_l and K0_pe (loaded here), K0_r (by wg1)
                        scores_half(Q_l, K0_l, k0_l_ready, acc_s, (pairs_before + k + 1) % 2, True)
                        scores_pe(Q_pe_regs, K0_pe, k0_pe_ready, acc_s, (pairs_before + k + 1) % 2)
                        T.wait_wgmma(k_tiles + 1)  # P1 V1_l done; the next scores' first parts may still run
                        load_tile(KV, K_pe, at_odd, K1_l, K1_r, K1_pe,
                                  k1_l_ready, k1_r_ready, k1_pe_ready, True, False, True)
                        scores_half(Q_r, K0_r, k0_r_ready, acc_s, (pairs_before + k + 1) % 2, False)
                    T.wait_wgmma(0)
                T.copy(l_part, row_sum)
                T.barrier_arrive(sum0_ready)
                T.barrier_wait(sum_ready, w % 2)
                for i, j in T.Parallel(ROWS, half):
                    acc_o[i, j] /= row_sum[i]
                finish(acc_o, Q_l, 0, row_max, row_sum, False, out, lse_out, seq, by, piece)
            else:
                # Each warpgroup's own fragments: one fragment laid out over both would give each
                # warpgroup's branch only its half of the threads.
                Q_pe_regs = T.alloc_fragment([ROWS, pe_dim], dtype)
                acc_s = T.alloc_fragment([ROWS, tile], accum)
                P_regs = T.alloc_fragment([ROWS, tile], dtype)
                acc_o = T.alloc_fragment([ROWS, half], accum)
                m_prev = T.alloc_fragment([ROWS], accum)
                m_new = T.alloc_fragment([ROWS], accum)
                tile_sum = T.alloc_fragment([ROWS], accum)
                l_part = T.alloc_fragment([ROWS], accum)
                T.copy(Q_pe_s, Q_pe_regs)
                T.fill(acc_o, 0)
                T.fill(l_part, 0)
                load_tile(KV, K_pe, tile_at(Block_table, seqlen, seq, first_token + 0 * tile), K0_l, K0_r, K0_pe,
                          k0_l_ready, k0_r_ready, k0_pe_ready, True, True, True)
                scores_half(Q_l, K1_l, k1_l_ready, acc_s, pairs_before % 2, True)
                scores_half(Q_r, K1_r, k1_r_ready, acc_s, pairs_before % 2, False)
                scores_pe(Q_pe_regs, K1_pe, k1_pe_ready, acc_s, pairs_before % 2)
                T.wait_wgmma(0)
                for k in T.serial(n_pairs):
                    at_even = tile_at(Block_table, seqlen, seq, first_token + (2 * k + 2) * tile)
                    at_odd = tile_at(Block_table, seqlen, seq, first_token + (2 * k + 3) * tile)
                    mask_tail(acc_s, first_token + (2 * k + 1) * tile, by, seqlen)
                    T.barrier_wait(max0_ready, (pairs_before + k) % 2)
                    T.copy(row_max, m_prev)
                    T.copy(m_prev, m_new)
                    T.reduce_max(acc_s, m_new, dim=1, clear=False)
                    T.copy(m_new, row_max)
                    for i in T.Parallel(ROWS):
                        rescale_1[i] = T.exp2(m_prev[i] * scale - m_new[i] * scale)
                    for i, j in T.Parallel(ROWS, tile):
                        acc_s[i, j] = T.exp2(acc_s[i, j] * scale - m_new[i] * scale)
                    T.reduce_sum(acc_s, tile_sum, dim=1)
                    for i, j in T.Parallel(ROWS, half):
                        acc_o[i, j] *= rescale_0[i] * rescale_1[i]
                    for i in T.Parallel(ROWS):
                        l_part[i] = l_part[i] * rescale_0[i] * rescale_1[i] + tile_sum[i]
                    T.barrier_arrive(max1_ready)
                    T.copy(acc_s, P_regs)
                    T.copy(P_regs, P1_s)
                    T.fence_proxy_async()  # wg0's wgmma reads P1_s
                    T.wgmma_gemm(P_regs, K1_r, acc_o)
                    T.barrier_arrive(p1_ready)
                    T.barrier_wait(p0_ready, (pairs_before + k) % 2)
                    T.wgmma_gemm(P0_s, K0_r, acc_o)
                    if k < n_pairs - 1:
                        T.wait_wgmma(1)  # P1 V1_r done: K1_r is free
                        load_tile(KV, K_pe, at_odd, K1_l, K1_r, K1_pe,
                                  k1_l_ready, k1_r_ready, k1_pe_ready, False, True, False)
                        T.wait_wgmma(0)  # P0 V0_r done: K0_r is free (wg0's scores of K0 finished long ago)
                        load_tile(KV, K_pe, at_even, K0_l, K0_r, K0_pe,
                                  k0_l_ready, k0_r_ready, k0_pe_ready, False, True, False)
                        # K1_r (loaded here, above) lands before K1_l and K1_pe (by wg0, after its P1 V1_l)
                        scores_half(Q_r, K1_r, k1_r_ready, acc_s, (pairs_before + k + 1) % 2, True)
                        scores_half(Q_l, K1_l, k1_l_ready, acc_s, (pairs_before + k + 1) % 2, False)
                        scores_pe(Q_pe_regs, K1_pe, k1_pe_ready, acc_s, (pairs_before + k + 1) % 2)
                    T.wait_wgmma(0)
                T.barrier_wait(sum0_ready, w % 2)
                for i in T.Parallel(ROWS):
                    row_sum[i] += l_part[i]
                T.barrier_arrive(sum_ready)
                for i, j in T.Parallel(ROWS, half):
                    acc_o[i, j] /= row_sum[i]
                finish(acc_o, Q_r, half, row_max, row_sum, True, out, lse_out, seq, by, piece)
            if paged:
                pairs_done = pairs_done + n_pairs
                T.sync_threads()  # wg1's lse still reads row_max, which the next piece clears

    if paged:
        return attend_any

    @T.macro
    def attend(Q, Q_pe, KV, K_pe, bx, by, bz, first_token, n_pairs, out, lse_out):
        attend_any(Q, Q_pe, KV, K_pe, KV, seqlen, KV, KV, bx, by, bz, first_token, n_pairs, out, lse_out)  # no pages

    return attend


def program(p: mla_decode.Plan):
    """The seesaw program of a plan: split + combine, or no split."""
    s, c = p.shape, p.config
    batch, rows, seqlen, dim, pe_dim = s.batch, s.rows, s.seqlen, s.dim, s.pe_dim
    dtype, accum = s.dtype, "float32"
    valid = p.block_H  # rows of one block that exist: all 64, or the 16 or 32 of a smaller model shard at s_q = 1
    half = dim // 2
    num_split, split_len = p.num_split, p.split_len
    pairs_per_split = split_len // c.block_N
    head_blocks = rows // valid
    scale = s.scale

    combine = mla_decode.combine_macro(dim)

    def pairs_here(first_token):
        """Pairs of this split that hold a token: a short last split stops at its last one."""
        return T.min(pairs_per_split, T.ceildiv(seqlen - first_token, c.block_N))

    @T.macro
    def finish_split(acc_o, O_s, col, row_max, row_sum, writes_lse, O_partial, glse, bx, by, bz):
        for i, j in T.Parallel(ROWS, half):
            if i < valid:
                O_partial[bx, by * valid + i, bz, col + j] = acc_o[i, j]
        if writes_lse:
            for i in T.Parallel(ROWS):
                if i < valid:
                    glse[bx, by * valid + i, bz] = T.log2(row_sum[i]) + row_max[i] * scale

    @T.macro
    def finish_no_split(acc_o, O_s, col, row_max, row_sum, writes_lse, Output, Lse, bx, by, bz):
        if valid == ROWS:
            T.copy(acc_o, O_s)  # the warpgroup's half of Q is read no more: stage its output there
            T.copy(O_s, Output[bx, by * ROWS:(by + 1) * ROWS, col:col + half])
        else:  # a TMA store of some rows of a swizzled tile does not lower: store from registers
            for i, j in T.Parallel(ROWS, half):
                if i < valid:
                    Output[bx, by * valid + i, col + j] = acc_o[i, j]
        if writes_lse:
            for i in T.Parallel(ROWS):
                if i < valid:
                    Lse[bx, by * valid + i] = (T.log2(row_sum[i]) + row_max[i] * scale) * mla_decode.LN2

    attend_split = attend_macro(s, c, valid, finish_split, masked=p.masked)
    attend_no_split = attend_macro(s, c, valid, finish_no_split, masked=p.masked)

    @T.prim_func
    def main_split(
            Q: T.Tensor([batch, rows, dim], dtype),
            Q_pe: T.Tensor([batch, rows, pe_dim], dtype),
            KV: T.Tensor([batch, seqlen, 1, dim], dtype),
            K_pe: T.Tensor([batch, seqlen, 1, pe_dim], dtype),
            glse: T.Tensor([batch, rows, num_split], accum),
            O_partial: T.Tensor([batch, rows, num_split, dim], accum),
            Output: T.Tensor([batch, rows, dim], dtype),
            Lse: T.Tensor([batch, rows], accum),
    ):
        # Head blocks vary fastest: a sequence's head blocks run side by side and read its K/V once from DRAM.
        with T.Kernel(head_blocks, batch, num_split, threads=256) as (by, bx, bz):
            attend_split(Q, Q_pe, KV, K_pe, bx, by, bz, bz * split_len, pairs_here(bz * split_len), O_partial, glse)

        with T.Kernel(rows, batch, threads=128) as (hid, bid):
            combine(glse, O_partial, Output, Lse, bid, hid, num_split)

    @T.prim_func
    def main_no_split(
            Q: T.Tensor([batch, rows, dim], dtype),
            Q_pe: T.Tensor([batch, rows, pe_dim], dtype),
            KV: T.Tensor([batch, seqlen, 1, dim], dtype),
            K_pe: T.Tensor([batch, seqlen, 1, pe_dim], dtype),
            Output: T.Tensor([batch, rows, dim], dtype),
            Lse: T.Tensor([batch, rows], accum),
    ):
        with T.Kernel(head_blocks, batch, threads=256) as (by, bx):
            attend_no_split(Q, Q_pe, KV, K_pe, bx, by, 0, 0, pairs_here(0), Output, Lse)

    return main_split if num_split > 1 else main_no_split


def paged_program(p):
    """The seesaw over a paged cache (mla_decode_paged.PagedPlan of a seesaw config, pages of 64 tokens): one thread
    block per (head block, partition of mla_decode_paged.balanced_schedule over 128-token pairs), one wave on the
    GPU, running its partition's pieces in turn; the shared combine merges the partials of each sequence split
    into pieces, a sequence of one piece writes its output at once. The barriers' parities go on across a block's
    pieces."""
    from mlagate.kernels import mla_decode_paged

    s, c = p.shape, p.config
    batch, rows, max_pages, page_size, dim, pe_dim = s.batch, s.rows, s.max_pages, s.page_size, s.dim, s.pe_dim
    dtype, accum, index = s.dtype, "float32", "int32"
    valid = p.block_H
    half = dim // 2
    head_blocks = rows // valid
    scale = s.scale
    parts = p.parts
    num_pages, num_pieces, num_merged = T.dynamic("num_pages"), T.dynamic("num_pieces"), T.dynamic("num_merged")

    @T.macro
    def finish_piece(acc_o, O_s, col, row_max, row_sum, writes_lse, outs, lses, seq, by, piece):
        """A sequence of one piece writes its output and lse, as FlashMLA's does; another piece its partial.
        ``outs``: (O_partial, Output); ``lses``: (glse, Lse, Seq_pieces)."""
        O_partial, Output = outs
        glse, Lse, Seq_pieces = lses
        if Seq_pieces[seq, 1] - Seq_pieces[seq, 0] == 1:
            for i, j in T.Parallel(ROWS, half):
                if i < valid:
                    Output[seq, by * valid + i, col + j] = acc_o[i, j]
            if writes_lse:
                for i in T.Parallel(ROWS):
                    if i < valid:
                        Lse[seq, by * valid + i] = (T.log2(row_sum[i]) + row_max[i] * scale) * mla_decode.LN2
        else:
            for i, j in T.Parallel(ROWS, half):
                if i < valid:
                    O_partial[piece, by * valid + i, col + j] = acc_o[i, j]
            if writes_lse:
                for i in T.Parallel(ROWS):
                    if i < valid:
                        glse[piece, by * valid + i] = T.log2(row_sum[i]) + row_max[i] * scale

    attend = attend_macro(s, c, valid, finish_piece, masked=True, paged=True)

    @T.prim_func
    def main_balanced(
            Q: T.Tensor([batch, rows, dim], dtype),
            Q_pe: T.Tensor([batch, rows, pe_dim], dtype),
            KV: T.Tensor([num_pages, page_size, dim], dtype),
            K_pe: T.Tensor([num_pages, page_size, pe_dim], dtype),
            Block_table: T.Tensor([batch, max_pages], index),
            Cache_seqlens: T.Tensor([batch], index),
            Parts: T.Tensor([parts, 2], index),
            Pieces: T.Tensor([num_pieces, 3], index),
            Seq_pieces: T.Tensor([batch, 2], index),
            Merged: T.Tensor([num_merged], index),
            glse: T.Tensor([num_pieces, rows], accum),
            O_partial: T.Tensor([num_pieces, rows, dim], accum),
            Output: T.Tensor([batch, rows, dim], dtype),
            Lse: T.Tensor([batch, rows], accum),
    ):
        # Head blocks vary fastest: a partition's head blocks run side by side and read its pages once from DRAM.
        with T.Kernel(head_blocks, parts, threads=256) as (by, bz):
            attend(Q, Q_pe, KV, K_pe, Block_table, Cache_seqlens, Parts, Pieces, 0, by, bz, 0, 0, (O_partial, Output),
                   (glse, Lse, Seq_pieces))

        # Only the sequences split into pieces (Schedule.merged; -1 where none is): a thread block per (row, sequence)
        # of the whole batch costs microseconds when few or none are split.
        with T.Kernel(rows, num_merged, threads=128) as (hid, m):
            bid = Merged[m]
            if bid >= 0:
                mla_decode.combine_macro(dim, mla_decode_paged.balanced_piece(Seq_pieces))(
                    glse, O_partial, Output, Lse, bid, hid, Seq_pieces[bid, 1] - Seq_pieces[bid, 0])

    return main_balanced

"""A Triton split-KV MLA decode kernel: the portable baseline the seed compares
TileLang against (Triton runs on ROCm and CUDA alike).

Stage 1: one program per (batch, head block, split) runs an online softmax over
its slice of the sequence and writes a partial output with its log2-sum-exp.
Stage 2: one program per (batch, head) merges the splits.
"""

import math

import torch
import triton
import triton.language as tl

LOG2E = 1.44269504


@triton.jit
def _split_kernel(Q, Q_pe, KV, K_pe, O_part, Lse_part, seqlen, split_len, scale_log2,
                  DIM: tl.constexpr, PE: tl.constexpr, HEADS: tl.constexpr, NUM_SPLIT: tl.constexpr,
                  BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr):
    b = tl.program_id(0)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    split = tl.program_id(2)
    d = tl.arange(0, DIM)
    e = tl.arange(0, PE)
    q = tl.load(Q + (b * HEADS + heads[:, None]) * DIM + d[None, :])
    q_pe = tl.load(Q_pe + (b * HEADS + heads[:, None]) * PE + e[None, :])
    start = split * split_len
    end = tl.minimum(start + split_len, seqlen)
    m = tl.full([BLOCK_H], float("-inf"), tl.float32)
    row_sum = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, DIM], tl.float32)
    for n0 in range(start, end, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        valid = n < end
        row = b.to(tl.int64) * seqlen + n
        k = tl.load(KV + row[:, None] * DIM + d[None, :], mask=valid[:, None], other=0.0)
        k_pe = tl.load(K_pe + row[:, None] * PE + e[None, :], mask=valid[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) + tl.dot(q_pe, tl.trans(k_pe))
        s = tl.where(valid[None, :], s * scale_log2, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(s - m_new[:, None])
        row_sum = row_sum * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(k.dtype), k)
        m = m_new
    acc = acc / row_sum[:, None]
    base = (b * HEADS + heads) * NUM_SPLIT + split
    tl.store(O_part + base[:, None] * DIM + d[None, :], acc)
    tl.store(Lse_part + base, m + tl.log2(row_sum))


@triton.jit
def _combine_kernel(O_part, Lse_part, Out, Lse, DIM: tl.constexpr, NUM_SPLIT: tl.constexpr,
                    BLOCK_S: tl.constexpr):
    bh = tl.program_id(0)
    s = tl.arange(0, BLOCK_S)
    d = tl.arange(0, DIM)
    lse = tl.load(Lse_part + bh * NUM_SPLIT + s, mask=s < NUM_SPLIT, other=float("-inf"))
    lse_max = tl.max(lse, 0)
    weights = tl.exp2(lse - lse_max)
    total = tl.sum(weights, 0)
    part = tl.load(O_part + (bh * NUM_SPLIT + s[:, None]) * DIM + d[None, :], mask=(s < NUM_SPLIT)[:, None],
                   other=0.0)
    out = tl.sum(part * (weights / total)[:, None], 0)
    tl.store(Out + bh * DIM + d, out.to(Out.dtype.element_ty))
    tl.store(Lse + bh, (tl.log2(total) + lse_max) / 1.4426950408889634)


class TritonDecode:
    """Split-KV Triton decode for one problem size; workspace allocated once."""

    def __init__(self, batch, heads, seqlen, dim, pe_dim, device, block_h=32, block_n=32, num_warps=4):
        block_h = min(block_h, heads)  # tensor-parallel shapes: 16 heads fill one 16-row tile
        if heads % block_h:
            raise ValueError(f"heads ({heads}) must be a multiple of block_h ({block_h})")
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        programs = batch * (heads // block_h)
        wanted = max(1, min(32, math.ceil(2 * sms / programs)))  # two waves of programs
        self.split_len = math.ceil(math.ceil(seqlen / wanted) / block_n) * block_n
        self.num_split = math.ceil(seqlen / self.split_len)
        self.grid = (batch, heads // block_h, self.num_split)
        self.args = dict(DIM=dim, PE=pe_dim, HEADS=heads, NUM_SPLIT=self.num_split, BLOCK_H=block_h,
                         BLOCK_N=block_n, num_warps=num_warps)
        self.seqlen, self.batch, self.heads, self.dim = seqlen, batch, heads, dim
        self.o_part = torch.empty(batch, heads, self.num_split, dim, device=device, dtype=torch.float32)
        self.lse_part = torch.empty(batch, heads, self.num_split, device=device, dtype=torch.float32)
        self.scale_log2 = (dim + pe_dim) ** -0.5 * LOG2E

    def __call__(self, q, q_pe, kv, k_pe, out, lse):
        _split_kernel[self.grid](q, q_pe, kv, k_pe, self.o_part, self.lse_part, self.seqlen, self.split_len,
                                 self.scale_log2, **self.args)
        _combine_kernel[(self.batch * self.heads,)](self.o_part, self.lse_part, out, lse, DIM=self.dim,
                                                   NUM_SPLIT=self.num_split,
                                                   BLOCK_S=triton.next_power_of_2(self.num_split))
        return out, lse

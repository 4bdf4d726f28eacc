"""The inputs' layouts every implementation is handed (measure/impls.py): a dense batch or a paged one,
query rows of one token or of s_q, and the conversions between them, done once, outside any timed region."""

import itertools
import math
from typing import NamedTuple

import torch


class Unavailable(Exception):
    """This implementation cannot run here (library missing, wrong architecture)."""


class Paged(NamedTuple):
    """A batch over a paged KV cache: sequence b's tokens are in the pages block_table[b, :ceil(len / page)],
    in any order; unused table entries are -1."""

    q: torch.Tensor  # [batch, heads, dim], or [batch, s_q, heads, dim] for s_q > 1
    q_pe: torch.Tensor  # likewise, pe_dim
    kv_cache: torch.Tensor  # [num_pages, page_size, dim]
    k_pe_cache: torch.Tensor  # [num_pages, page_size, pe_dim]
    block_table: torch.Tensor  # [batch, max_pages] int32
    seqlens: torch.Tensor  # [batch] int32
    kv_scale: float | None = None  # an fp8 cache's per-tensor scale (value = fp8 x kv_scale); None: 16-bit

    @property
    def page_size(self) -> int:
        return self.kv_cache.shape[1]

    @property
    def s_q(self) -> int:
        return query_tokens(self.q)

    def page_lists(self) -> tuple:
        """The used pages as CSR lists, int32 on the cache's device: (indptr [batch + 1], counted in pages;
        the page ids, sequence by sequence)."""
        pages = [math.ceil(n / self.page_size) for n in self.seqlens.tolist()]
        device = self.block_table.device
        used = torch.arange(self.block_table.shape[1], device=device)[None, :] < \
            torch.tensor(pages, device=device)[:, None]
        indptr = torch.tensor([0, *itertools.accumulate(pages)], dtype=torch.int32, device=device)
        return indptr, self.block_table[used].contiguous()


def split_scale(inputs) -> tuple:
    """(the four dense tensors q, q_pe, kv, k_pe; the fp8 cache's scale or None): kernels/mla_decode.py's
    random_inputs returns a fifth item, the per-tensor kv_scale, for an fp8 kv_dtype."""
    if isinstance(inputs, Paged):
        return inputs, inputs.kv_scale
    return tuple(inputs[:4]), (float(inputs[4]) if len(inputs) > 4 else None)


def query_tokens(q: torch.Tensor) -> int:
    """s_q of a query tensor: [batch, heads, dim] is one token, [batch, s_q, heads, dim] s_q."""
    return q.shape[1] if q.dim() == 4 else 1


def lse_like(q: torch.Tensor) -> torch.Tensor:
    """The kernels' lse buffer for ``q``: [batch, heads] or [batch, s_q, heads], float32."""
    return torch.empty(q.shape[:-1], device=q.device, dtype=torch.float32)


def as_rows(q: torch.Tensor, pe: torch.Tensor) -> tuple:
    """q and q_pe as [batch * s_q, heads, d] query rows in sequence order (the vendors' ragged layout)."""
    return q.reshape(-1, *q.shape[-2:]), pe.reshape(-1, *pe.shape[-2:])


def as_pages(inputs, impl: str, page_size: int) -> Paged:
    """``inputs`` as a Paged batch: a dense batch as contiguous pages of ``page_size`` (views, no copy)."""
    if isinstance(inputs, Paged):
        if inputs.page_size != page_size:
            raise Unavailable(f"{impl}: takes pages of {page_size} tokens, this cache has {inputs.page_size}")
        return inputs
    (q, q_pe, kv, k_pe), kv_scale = split_scale(inputs)
    batch, seqlen = kv.shape[0], kv.shape[1]
    if seqlen % page_size:
        raise Unavailable(f"{impl}: this harness pages the cache in blocks of {page_size}; seqlen {seqlen} is not "
                          "a multiple")
    i32 = dict(dtype=torch.int32, device=q.device)
    return Paged(q, q_pe, kv.view(-1, page_size, kv.shape[-1]), k_pe.view(-1, page_size, k_pe.shape[-1]),
                 torch.arange(batch * seqlen // page_size, **i32).view(batch, -1), torch.full((batch,), seqlen, **i32),
                 kv_scale)

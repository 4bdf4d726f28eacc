"""A workload case's schedule diagnosis: how evenly a ragged batch's work is dealt over the GPU's partitions.

For one batch of sequence lengths, each scheduler's planned work per partition against the ideal even share:
the makespan over the mean (the longest partition's work, a piece's fixed cost included, over the average) and
the same for the tiles alone. 1.00x is a perfect deal; 2.3x means the kernel waits on a partition holding 2.3
times its share. Two schedulers on the same lengths:

- TileLang's: ``mla_decode_paged.balanced_schedule`` over the partitions ``mla_decode_paged.plan`` gives the case's
  config (one per SM and head block), its tiles of the config's block_N tokens.
- FlashMLA's, replayed here from its source (flash_mla_schedule). The pinned wheel, sgl-flash-mla==1.0.0, runs
  dense decode on its legacy extension, built from a frozen snapshot of upstream's kernels
  (``csrc_legacy/kernels/smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu``, as the wheel's
  ``_C_legacy.abi3.so`` names it); that snapshot is not stored. The replay follows the same files where they are:
  deepseek-ai/FlashMLA 9241ae3ef9bac614dd25e45e507e089f888280e0 ``csrc/smxx/decode/get_decoding_sched_meta/
  get_decoding_sched_meta.cu`` (``get_mla_metadata_kernel``) and ``csrc/api/dense_decode.h`` (num_sm_parts,
  block_size_n 64, fixed_overhead_num_blocks 5), and the fork that builds the wheel, sgl-project/FlashMLA
  df022ebafb88578eab9f0300606ee765608d8b5c (setup.py version 1.0.0; the same deal, plus a low-shared-memory
  fallback kernel with the same arithmetic). The H200 run of docs/vendor-apis.md saw its metadata shaped
  (66, 8) at 128 heads: 66 partitions, as flash_mla_sm_parts gives.

Pure Python: the kernels (and tilelang) are imported only by tilelang_balance, when a diagnosis asks for them.
"""

import math
from dataclasses import dataclass

from mlagate.case import TILELANG_PREFIX

# FlashMLA's dense decode (csrc/api/dense_decode.h): 64-token blocks, 5 blocks' fixed cost per piece, and a
# partition per 64 query rows of a KV head.
FLASH_MLA_BLOCK = 64
FLASH_MLA_FIXED_OVERHEAD = 5
FLASH_MLA_ROWS_PER_PART = 64


@dataclass(frozen=True)
class Balance:
    """One scheduler's deal of one batch: per partition, its work (tiles plus a fixed cost per piece, in the
    scheduler's own units) and its tiles alone."""

    scheduler: str
    block: int  # tokens per tile (block)
    loads: tuple
    tiles: tuple

    @property
    def parts(self) -> int:
        return len(self.loads)

    @property
    def makespan_ratio(self) -> float:
        """The longest partition's work over the mean: the ideal even share is 1.0."""
        return max(self.loads) * len(self.loads) / sum(self.loads)

    @property
    def tile_ratio(self) -> float:
        """The most tiles a partition holds over the mean tiles."""
        return max(self.tiles) * len(self.tiles) / sum(self.tiles)

    @property
    def idle(self) -> int:
        """Partitions dealt no work."""
        return sum(1 for t in self.tiles if t == 0)

    def text(self) -> str:
        return f"{self.scheduler}: longest partition {self.makespan_ratio:.2f}x the mean"


def flash_mla_sm_parts(sm_count: int, heads: int, q_len: int = 1, kv_heads: int = 1) -> int:
    """FlashMLA's num_sm_parts (dense_decode.h): the SMs over the KV heads and the 64-row blocks of queries."""
    rows = q_len * heads // kv_heads
    return max(sm_count // kv_heads // math.ceil(rows / FLASH_MLA_ROWS_PER_PART), 1)


def flash_mla_schedule(lengths, num_sm_parts: int, block: int = FLASH_MLA_BLOCK,
                       overhead: int = FLASH_MLA_FIXED_OVERHEAD) -> list:
    """FlashMLA's deal (get_mla_metadata_kernel), replayed: per partition its pieces (sequence, first block, end
    block). Every sequence counts ceil(len / block) blocks (an empty one, one) plus ``overhead``; each partition
    takes up to ceil(total / parts) + overhead of that, in request order, whole sequences while they fit, then
    the rest of its room less ``overhead`` blocks of the next one (a split), if that is more than none."""
    if num_sm_parts < 1 or block < 1 or overhead < 0:
        raise ValueError(f"num_sm_parts and block must be >= 1 and overhead >= 0, got {num_sm_parts}, {block}, "
                         f"{overhead}")
    if not lengths or min(lengths) < 0:
        raise ValueError(f"lengths: need at least one sequence, none negative, got {list(lengths)}")
    blocks = [max(n - 1, 0) // block + 1 for n in lengths]
    payload = math.ceil(sum(b + overhead for b in blocks) / num_sm_parts) + overhead
    parts, seq, done = [], 0, 0  # done: blocks of sequence `seq` dealt already
    for _ in range(num_sm_parts):
        pieces, room = [], payload
        while seq < len(blocks):
            rest = blocks[seq] - done
            if room >= rest + overhead:  # the whole rest of the sequence fits
                pieces.append((seq, done, blocks[seq]))
                room -= rest + overhead
                seq, done = seq + 1, 0
                continue
            if room - overhead > 0:  # split it where the partition fills
                pieces.append((seq, done, done + room - overhead))
                done += room - overhead
            break
        parts.append(tuple(pieces))
    if seq != len(blocks):
        raise AssertionError("FlashMLA's payload covers the batch")  # its FLASH_DEVICE_ASSERT
    return parts


def flash_mla_balance(lengths, num_sm_parts: int) -> Balance:
    parts = flash_mla_schedule(lengths, num_sm_parts)
    tiles = tuple(sum(end - first for _, first, end in p) for p in parts)
    loads = tuple(t + FLASH_MLA_FIXED_OVERHEAD * len(p) for t, p in zip(tiles, parts))
    return Balance("FlashMLA", FLASH_MLA_BLOCK, loads, tiles)


def tilelang_balance(lengths, block_N: int, parts: int) -> Balance:
    """TileLang's balanced schedule of ``lengths`` (kernels/mla_decode_paged.py, its piece cost)."""
    from mlagate.kernels.mla_decode_paged import balanced_schedule

    schedule = balanced_schedule(lengths, block_N, parts)
    return Balance("TileLang", block_N, tuple(schedule.tiles_per_part(block_N)),
                   tuple(schedule.tiles_per_part(block_N, piece_cost=0)))


@dataclass(frozen=True)
class Diagnosis:
    """A workload case's schedules: TileLang's balanced plan (None where its kernel refuses the case: ``why``) and
    the vendor's replay (None where the vendor is not FlashMLA on this architecture)."""

    tilelang: Balance | None
    vendor: Balance | None
    why: str = ""  # why TileLang's plan is missing, where its kernel refuses the case here

    def text(self) -> str:
        shown = [b.text() if i == 0 else f"{b.scheduler}: {b.makespan_ratio:.2f}x"
                 for i, b in enumerate(b for b in (self.tilelang, self.vendor) if b)]
        return "; ".join(shown + ([f"TileLang: not planned ({self.why})"] if self.why else []))


def diagnose(case, arch: str) -> Diagnosis | None:
    """The diagnosis of a workload case (mlagate.case.Case with its lengths) on ``arch``; None for a dense case.
    TileLang's partitions and block_N are those the case's kernel plans with (its paged config and plan, as
    measure.impls.case_kernel builds them; none for another implementation); FlashMLA's partitions come from the
    same SM count (mla_decode.SM_COUNT)."""
    if not case.paged:
        return None
    from mlagate.kernels import mla_decode, mla_decode_paged
    from mlagate.measure.impls import paged_config

    tilelang, why = None, ""
    if case.impl.startswith(TILELANG_PREFIX):
        shape = mla_decode_paged.PagedShape.holding(case.lengths, case.heads, case.page_size, case.dtype,
                                                    s_q=case.q_len, kv_dtype=case.kv_dtype)
        try:
            config = paged_config(case.impl, shape.at_mean_length(case.lengths), arch)
            plan = mla_decode_paged.plan(shape, config, arch)
        except ValueError as e:  # the kernel refuses the case here (the launch says so too)
            why = str(e)
        else:
            tilelang = tilelang_balance(case.lengths, config.block_N, plan.parts)  # paged: always balanced
    vendor = None
    if arch.startswith("sm_90"):
        sms = mla_decode.SM_COUNT[arch.split(":")[0]]
        vendor = flash_mla_balance(case.lengths, flash_mla_sm_parts(sms, case.heads, case.q_len))
    return Diagnosis(tilelang, vendor, why)


def diagnose_cases(cases, arch: str | None) -> dict | None:
    """{case key: Diagnosis} of the TileLang workload cases among ``cases``; None where the arch is not known."""
    planned = [c for c in cases if c.paged and c.impl.startswith(TILELANG_PREFIX)]
    if planned and arch is None:
        return None
    return {c.key: diagnose(c, arch) for c in planned}

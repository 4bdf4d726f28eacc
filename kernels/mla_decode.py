"""TileLang FlashMLA decode: one builder, one tile config per architecture.

DeepSeek MLA decode attends ``s_q`` new query tokens per sequence (1, or 2-4 with
multi-token prediction), each of ``heads`` query heads of dim 512 + 64 RoPE, to a
single shared latent KV head. The s_q x heads query rows of a sequence share one
pass over its cache: they fold into the head block as rows (token-major), causal
among the new tokens, which are the cache's last s_q positions (FlashMLA's
``causal=True``): token i sees positions 0 .. seqlen - s_q + i. Every launch is
specialised on the problem shape, as in TileLang's own examples.

Split-KV (FlashDecoding): ``num_split`` blocks share one (batch, head block);
each writes a partial output and its log2-sum-exp, and a combine kernel merges
them with max-subtracted ``exp2`` weights. ``num_split == 1`` takes the
no-split path. A sequence length that is not a multiple of the tile is masked.

Masked scores are a finite ``MASKED`` rather than -inf: with s_q > 1 a row may see no token
of a whole tile or split (token 0's row in a last split shorter than s_q), and a finite floor
keeps its running max finite. Such a partial's log-sum-exp lies near MASKED, so the combine
gives it weight exp2(MASKED - real) = 0.
"""

import dataclasses
import importlib
import math
from dataclasses import dataclass
from pathlib import Path

import tilelang
import tilelang.language as T

from mlagate.kernels.tile_rules import FP8_DTYPES, FP8_FORMAT, MAX_STAGES, MULTIPLE_OF, POLICIES, POLICY_CHOICES

LOG2E = 1.44269504
LN2 = 0.6931471805599453
DTYPES = ("float16", "bfloat16")
SCHEDULES = ("pipelined", "seesaw")
PASS_CONFIGS = {tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True}
# A masked score: finite after the softmax scale (~0.06), and a power of two, so MASKED x scale is exact and a row of
# MASKED scores minus its MASKED max is exactly 0 under FMA contraction too (-1e30 gave a rounding error of ~1e21
# there, whose exp2 is inf: NaN rows on the H200); exp2 of its difference to a real score is 0.
MASKED = -2.0 ** 100
MAX_S_Q = 8  # query tokens per sequence: 1, or MTP's 2-4 (speculative decoding rarely goes past 8)
# An e4m3fn pair to a bf16 pair by its bits, for the fp8 cache's conversion on sm_90 (attend_macro imports it):
# the byte becomes a bf16 with e4m3's 4 exponent and 3 mantissa bits in place (bias 7 read as bf16's 127), so one
# exact bf16 multiply by 2^120 gives its value, subnormals and zeros included (every non-NaN code:
# tests/test_fp8_gpu.py). TileLang 0.1.15 goes through fp16 instead, two F2F per pair at a quarter of the issue rate:
# on the H100 the conversion then held the 16-head fp8 kernel to the bf16 cache's speed. Its pair converter is
# renamed to this one, the header included first so its own definition keeps its name.
E4M3_TO_BF16 = r"""
#include <tl_templates/cuda/cuda_fp8.h>
__device__ __forceinline__ __nv_bfloat162 mlagate_e4m3x2_to_bf16x2(const __nv_fp8x2_storage_t x) {
  unsigned int lanes = __byte_perm((unsigned int)x, 0u, 0x1404u);  // byte i to the high byte of half i
  unsigned int bits = ((lanes & 0x7F007F00u) >> 4) | (lanes & 0x80008000u);
  return __hmul2(*reinterpret_cast<__nv_bfloat162*>(&bits), __float2bfloat162_rn(0x1p120f));
}
#define __tl_cvt_e4m3x2_to_bfloat162 mlagate_e4m3x2_to_bf16x2
"""


@dataclass(frozen=True)
class Shape:
    batch: int
    seqlen: int
    heads: int = 128
    dtype: str = "float16"
    dim: int = 512
    pe_dim: int = 64
    s_q: int = 1  # query tokens per sequence
    kv_dtype: str | None = None  # the cache's dtype: the query's (None gives it), or an fp8 format (FP8_FORMAT)

    def __post_init__(self):
        if self.kv_dtype is None:
            object.__setattr__(self, "kv_dtype", self.dtype)

    @property
    def kv_fp8(self) -> bool:
        return self.kv_dtype in FP8_DTYPES

    @property
    def scale(self) -> float:
        """Softmax scale folded with log2(e), so the kernel can use exp2."""
        return (self.dim + self.pe_dim) ** -0.5 * LOG2E

    @property
    def rows(self) -> int:
        """Query rows per sequence, the M the kernels tile: s_q tokens x heads."""
        return self.s_q * self.heads

    def check(self) -> None:
        for name in ("batch", "seqlen", "heads", "dim", "pe_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        check_kv_dtype(self.kv_dtype, self.dtype)
        check_s_q(self.s_q)
        if self.seqlen < self.s_q:
            raise ValueError(causal_refusal(self.seqlen, self.s_q))


def check_kv_dtype(kv_dtype, dtype: str) -> None:
    """A cache in the query's 16-bit dtype or in an fp8 format (either arch's: check_kv_format matches it to one)."""
    if kv_dtype != dtype and kv_dtype not in FP8_DTYPES:
        raise ValueError(f"kv_dtype must be the query's dtype {dtype!r} or an fp8 format {FP8_DTYPES}, "
                         f"got {kv_dtype!r}")


def check_kv_format(kv_dtype: str, arch: str) -> None:
    """Refuse an fp8 cache in another architecture's fp8 format (its bits would be read as other values)."""
    if kv_dtype not in FP8_DTYPES:
        return
    base = arch.split(":")[0]
    if base not in FP8_FORMAT:
        raise ValueError(f"kv_dtype {kv_dtype}: no fp8 cache format known for architecture {arch!r}; "
                         f"known: {FP8_FORMAT}")
    if kv_dtype != FP8_FORMAT[base]:
        raise ValueError(f"kv_dtype: a {kv_dtype} cache on {base}, whose fp8 format is {FP8_FORMAT[base]} "
                         f"(FP8_FORMAT); quantize the cache to {FP8_FORMAT[base]}")


def check_kv_scale(kv_scale, kv_fp8: bool) -> None:
    """An fp8 cache needs its per-tensor scale (dequantized = fp8 value x kv_scale): a positive finite float; a
    16-bit cache takes none."""
    if not kv_fp8:
        if kv_scale is not None:
            raise ValueError(f"kv_scale: given ({kv_scale!r}) for a 16-bit cache, which takes none")
        return
    if kv_scale is None:
        raise ValueError("kv_scale: an fp8 cache needs its per-tensor scale (dequantized = fp8 value x kv_scale)")
    if isinstance(kv_scale, bool) or not isinstance(kv_scale, (int, float)):
        raise ValueError(f"kv_scale: must be a float, got {type(kv_scale).__name__}")
    if not math.isfinite(kv_scale) or kv_scale <= 0:
        raise ValueError(f"kv_scale: must be positive and finite, got {kv_scale!r}")


def kv_scale_param(shape):
    """The annotation of the kernels' ``Kv_scale`` parameter: a float32 [1] tensor for an fp8 cache; None for a
    16-bit one, which TileLang takes as a constant, so the 16-bit kernels keep their signature."""
    return T.Tensor([1], "float32") if shape.kv_fp8 else None


def score_scale(shape, Kv_scale):
    """The factor from a raw score to log2 units: the softmax scale, times kv_scale for an fp8 cache, whose tiles
    the GEMMs read as stored (dequantizing a score costs one multiply, a K element one each)."""
    return shape.scale * Kv_scale[0] if shape.kv_fp8 else shape.scale


def check_s_q(s_q) -> None:
    if not isinstance(s_q, int) or isinstance(s_q, bool) or not 1 <= s_q <= MAX_S_Q:
        raise ValueError(f"s_q (query tokens per sequence) must be an integer in 1..{MAX_S_Q}, got {s_q!r}")


def causal_refusal(seqlen: int, s_q: int) -> str:
    """Why a cache of ``seqlen`` tokens cannot take ``s_q`` new ones: they are its last s_q positions, so the first
    new token would see no token at all. Refused rather than given an empty softmax."""
    return (f"seqlen: a cache of {seqlen} tokens is shorter than s_q = {s_q}; the s_q new tokens are the cache's "
            f"last s_q positions, so it must hold at least s_q tokens")


@dataclass(frozen=True)
class TileConfig:
    """How one architecture tiles the problem.

    ``operands_in_shared``: Q, Q_pe and the probabilities P are staged in shared
    memory (Hopper: wgmma reads them there, 228 KB per SM) instead of being held
    in registers (CDNA3: 64 KB of LDS is kept for the K/V tiles alone).
    ``num_split`` of 0 means "fill the device": see :func:`resolve_num_split`.
    ``schedule``: "pipelined" (this module's program) or "seesaw" (kernels/mla_decode_seesaw.py: two
    warpgroups on alternate tiles, Hopper only; its block_N is the 128 tokens of a pair of 64-token tiles).
    """

    name: str
    block_N: int
    block_H: int
    num_split: int
    threads: int
    num_stages: int
    policy: str
    operands_in_shared: bool
    schedule: str = "pipelined"

    def check(self) -> None:
        """Refuse, naming the field, what no GPU could run, before anything is lowered or launched."""
        for name, multiple in MULTIPLE_OF.items():  # tile_rules says why each
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"config {self.name}: {name} must be an integer >= 1, got {value!r}")
            if value % multiple:
                raise ValueError(f"config {self.name}: {name} must be a multiple of {multiple}, got {value}")
        if not isinstance(self.num_split, int) or self.num_split < 0:
            raise ValueError(f"config {self.name}: num_split must be an integer >= 0 (0 = auto), "
                             f"got {self.num_split!r}")
        if not isinstance(self.num_stages, int) or self.num_stages < 0:
            raise ValueError(f"config {self.name}: num_stages must be >= 0, got {self.num_stages!r}")
        if self.num_stages > MAX_STAGES:
            raise ValueError(f"config {self.name}: num_stages must be <= {MAX_STAGES}, got {self.num_stages}")
        if self.policy not in POLICIES:
            raise ValueError(f"config {self.name}: policy must be {POLICY_CHOICES}, got {self.policy!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"config {self.name}: schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.schedule == "seesaw":  # one 64-row wgmma tile per warpgroup, two warpgroups, 64 tokens each
            for name, value in (("block_N", 128), ("block_H", 64), ("threads", 256), ("operands_in_shared", True)):
                if getattr(self, name) != value:
                    raise ValueError(f"config {self.name}: the seesaw schedule takes {name}={value}, "
                                     f"got {getattr(self, name)!r}")

    def refuses_rows(self, rows: int) -> str | None:
        """Why this config cannot run ``rows`` query rows per sequence (s_q x heads), or None. The pipelined
        schedule's head block (block_H rows, or all rows where there are fewer) is the M of its score GEMM: whole
        16-row MMA/MFMA tiles, or TileLang stops while lowering ("M must be divisible by 16"). The seesaw pads its
        64-row tile, so it runs TP16's 8 heads."""
        block_H = min(self.block_H, rows)
        if self.schedule == "pipelined" and block_H % ROWS_PER_WARP:
            return (f"config {self.name}: {rows} query rows (s_q x heads) make a head block of {block_H} rows; the "
                    f"pipelined schedule needs a multiple of {ROWS_PER_WARP} (one MMA row tile)")
        return None

    def runs_on(self, arch: str) -> bool:
        """Whether TileLang can build it for ``arch`` (the seesaw schedule needs Hopper's wgmma and TMA); whether a
        GPU has the shared memory it asks is the launch's business (impls, the build report)."""
        return self.schedule != "seesaw" or arch.startswith("sm_9")

    def with_(self, **changes) -> "TileConfig":
        return dataclasses.replace(self, **changes)


# The seed's MI300X config: Q in registers, only K/V tiles in LDS, no pipelining.
CDNA3 = TileConfig("cdna3", block_N=32, block_H=64, num_split=4, threads=128, num_stages=0,
                   policy="FullRow", operands_in_shared=False)
# TileLang's Hopper example: Q in shared memory, 2 stages, FullCol, 256 threads, 64x64.
HOPPER = TileConfig("hopper", block_N=64, block_H=64, num_split=0, threads=256, num_stages=2,
                    policy="FullCol", operands_in_shared=True)
# FlashMLA's schedule (kernels/mla_decode_seesaw.py): 64-token tiles alternate between two warpgroups.
SEESAW = TileConfig("seesaw", block_N=128, block_H=64, num_split=0, threads=256, num_stages=2,
                    policy="FullCol", operands_in_shared=True, schedule="seesaw")
CONFIGS = {c.name: c for c in (CDNA3, HOPPER, SEESAW)}

# Streaming multiprocessors / compute units, for the "fill the device" split rule.
SM_COUNT = {"sm_90": 132, "sm_90a": 132, "gfx942": 304}
# Threads per warp (NVIDIA) or wavefront (CDNA).
WARP_SIZE = {"gfx942": 64}
# A register-resident score tile gives each warp 16 rows of the head block (one MFMA/MMA row tile):
# more warps than block_H / 16 leave a warp without rows, which TileLang cannot lay out.
ROWS_PER_WARP = 16
WGMMA_ROWS, WARPGROUP = 64, 128  # Hopper: a wgmma tile's rows, and the threads of the warpgroup issuing it
CHUNK = 8  # fp8 elements a converter thread moves at a time: one 16-byte bf16 store (converting_attend_macro)
ARCH_CONFIG = {"gfx942": "cdna3", "sm_90": "hopper", "sm_90a": "hopper"}


def config_for_arch(arch: str) -> TileConfig:
    """The default config of a device architecture's family ('gfx942': cdna3, 'sm_90': hopper); the config a
    shape runs may be that family's tuned one instead (kernels/tuned.py: tuned_config)."""
    base = arch.split(":")[0]
    if base not in ARCH_CONFIG:
        raise ValueError(f"no tuned config for architecture {arch!r}; known: {sorted(ARCH_CONFIG)} "
                         f"(pass a config explicitly to run elsewhere)")
    return CONFIGS[ARCH_CONFIG[base]]


def resolve_num_split(shape: Shape, config: TileConfig, sm_count: int) -> int:
    """The config's split count, or for 0 the smallest power of two (<= 32) whose
    blocks occupy at least 90% of the SMs. Splitting costs a combine pass and
    shorter loops, so a grid that already fills the SMs runs faster unsplit
    (measured on an H200: docs/measurements.md, split probe, 2026-11-29)."""
    if config.num_split:
        return config.num_split
    blocks = shape.batch * math.ceil(shape.rows / min(config.block_H, shape.rows))
    split = 1
    while blocks * split < 0.9 * sm_count and split < 32:
        split *= 2
    return split


@dataclass(frozen=True)
class Plan:
    """What a launch really does once the split is fitted to the sequence."""

    shape: Shape
    config: TileConfig
    num_split: int  # splits that hold at least one token
    split_len: int  # tokens per split, a multiple of block_N
    block_H: int  # the config's head block, or all query rows (s_q x heads) when there are fewer
    threads: int  # the config's threads, fewer where a small head block cannot feed them all
    converters: int = 0  # threads of the warpgroup converting an fp8 cache's tiles (converter_threads), if any

    @property
    def masked(self) -> bool:
        return self.num_split * self.split_len != self.shape.seqlen

    @property
    def block_threads(self) -> int:
        """The thread block: the consumers (``threads``: the GEMMs and the softmax) and the converters, which only
        the attend macro's converting branch runs."""
        return self.threads + self.converters


def threads_for(config: TileConfig, block_H: int, arch: str) -> int:
    """The config's threads, capped for register-resident scores at one warp per
    16 rows of the head block (TP8's 16 heads: one warp on sm_90, one wavefront on gfx942)."""
    if config.operands_in_shared:
        return config.threads
    warp = WARP_SIZE.get(arch.split(":")[0], 32)
    return min(config.threads, max(1, block_H // ROWS_PER_WARP) * warp)


def converter_threads(shape, config: TileConfig, block_H: int, arch: str) -> int:
    """The threads of a warpgroup that converts an fp8 cache's tiles beside the consumers (attend_macro), or 0.
    Under a wgmma tile (16 heads) on sm_90 one consumer warpgroup runs the GEMMs on mma.sync; converting each tile
    itself as well held the fp8 kernel to its own speed, below the bf16 cache's on the H200, whose bf16 kernel
    follows the memory. With a converting warpgroup the dense kernel ran 1.33x the bf16 cache's speed at s_q 1 on
    the H100, 1.02-1.06x at s_q 2; over pages (tiles by TMA, mla_decode_paged.plan) 1.18-1.31x and 1.04-1.10x
    (docs/measurements.md, 2026-12-06, seventh session). A head block of two consumer warpgroups leaves no
    registers for a third; gfx942 has no mbarriers to hand tiles over with."""
    pipelined_in_shared = config.schedule == "pipelined" and config.operands_in_shared
    hopper = arch.split(":")[0].startswith("sm_9")
    return WARPGROUP if shape.kv_fp8 and hopper and pipelined_in_shared and block_H < WGMMA_ROWS else 0


def kernel_config(shape: Shape, config: TileConfig) -> TileConfig:
    """The config whose kernel ``shape`` runs under ``config``.

    A seesaw cache of one tile or less runs HOPPER: a cache shorter than a tile cannot be a TMA box, and at one
    tile TileLang folds the second warpgroup's all-masked tile away with its softmax: one short launch either way.
    So does an fp8 seesaw cache: the seesaw's Q and K tiles fill the shared memory wgmma reads in the query's dtype,
    leaving no room for fp8 staging tiles (case.FP8_KERNEL_OF names it in the case's label).
    A shared-operand (Hopper) head block of fewer than 64 rows (16 heads; 32 rows: 16 heads at s_q 2) is no wgmma
    tile, so its GEMMs run mma.sync, and a second warpgroup only splits the columns: it runs one warpgroup whose
    warps split the rows (FullRow), the config every such shape of the tuned table holds and the fastest one at 16
    and 32 rows on the H200, dense and paged (docs/measurements.md, 2026-12-02)."""
    if config.schedule == "seesaw" and (shape.seqlen <= config.block_N // 2 or shape.kv_fp8):
        config = HOPPER
    if config.schedule == "pipelined" and config.operands_in_shared and min(config.block_H, shape.rows) < WGMMA_ROWS:
        return config.with_(threads=WARPGROUP, policy="FullRow")
    return config


def plan(shape: Shape, config: TileConfig, arch: str, sm_count: int | None = None) -> Plan:
    """What one launch does on ``arch``; ``sm_count`` defaults to the arch's known count."""
    shape.check()
    config.check()
    if not config.runs_on(arch):
        raise ValueError(f"config {config.name}: the {config.schedule} schedule needs Hopper (wgmma, TMA), not {arch}")
    if config.schedule == "seesaw" and (shape.dim, shape.pe_dim) != (512, 64):
        # its P1 tile reuses Q_pe's 64 columns, and each warpgroup's 256 latent columns are 4 TMA boxes of 64
        raise ValueError(f"config {config.name}: the seesaw schedule is built for dim 512 + pe_dim 64 (DeepSeek's), "
                         f"got {shape.dim} + {shape.pe_dim}")
    check_kv_format(shape.kv_dtype, arch)
    config = kernel_config(shape, config)
    refused = config.refuses_rows(shape.rows)
    if refused:
        raise ValueError(refused)
    block_H = min(config.block_H, shape.rows)
    if shape.rows % block_H:
        raise ValueError(f"query rows ({shape.rows} = s_q {shape.s_q} x heads {shape.heads}) must be a multiple of "
                         f"the head block block_H={config.block_H} (config {config.name})")
    base = arch.split(":")[0]
    sm_count = sm_count or SM_COUNT.get(base, 132)
    requested = resolve_num_split(shape, config, sm_count)
    per_split = math.ceil(shape.seqlen / requested)
    split_len = math.ceil(per_split / config.block_N) * config.block_N
    # Drop splits that would start past the end: an empty split has no softmax.
    num_split = math.ceil(shape.seqlen / split_len)
    return Plan(shape, config, num_split, split_len, block_H, threads_for(config, block_H, base),
                converter_threads(shape, config, block_H, base))


def softmax_step_macro(block_H: int, block_N: int, dim: int):
    """One tile's online-softmax step, after its scores (acc_s, masked) and before its PV GEMM: the running max,
    the tile's probabilities into P_buf, the logsum and the output rescaled to the new max (attend_macro's
    tile_step)."""

    @T.macro
    def softmax_step(acc_s, P_buf, acc_o, logsum, scores_max, scores_max_prev, scores_scale, scores_sum, scale):
        T.copy(scores_max, scores_max_prev)
        T.reduce_max(acc_s, scores_max, dim=1, clear=False)  # running max
        for i in T.Parallel(block_H):
            scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
        for i, j in T.Parallel(block_H, block_N):
            acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
        T.reduce_sum(acc_s, scores_sum, dim=1)
        T.copy(acc_s, P_buf)
        for i in T.Parallel(block_H):
            logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
        for i, j in T.Parallel(block_H, dim):
            acc_o[i, j] *= scores_scale[i]

    return softmax_step


def attend_macro(shape, config: TileConfig, block_H: int, num_stages: int, load_tile, *, masked: bool,
                 empty_splits: bool, converters: int = 0, tma_tile=None):
    """The online-softmax ``attend`` macro of both decode kernels (this one and mla_decode_paged.py's).

    ``shape`` gives dtype, dim, pe_dim and scale (a Shape or a PagedShape). ``load_tile(KV, K_pe, Block_table,
    bx, start, seqlen, KV_tile, K_pe_tile)`` is a macro filling K/V tiles (shared, or a converter's registers) with
    tokens start .. start + block_N of sequence bx. ``masked``: scores of tokens at or past ``seqlen`` become
    MASKED; with s_q > 1 a tile holding one of the last s_q positions is masked causally (query row r is token
    r // heads: it sees seqlen - s_q + 1 + r // heads positions), and a tail past seqlen with it.
    ``empty_splits``: a split may run no tile, so a zero logsum gives output 0 instead of 0 / 0.
    An fp8 cache (``shape.kv_fp8``): its tiles are converted to the query's dtype for the GEMMs (exact: every e4m3
    value is a bf16 and an fp16; E4M3_TO_BF16 on sm_90), by a warpgroup of ``converters`` threads of their own
    where the plan has one (converting_attend_macro; ``tma_tile`` as it takes it), otherwise in the loop: load_tile
    fills fp8 staging tiles, read into registers and written back converted. kv_scale (``Kv_scale[0]``) is folded
    into the score scale and into the output's normalisation, never multiplied into a K or V element.
    """
    dtype, accum = shape.dtype, "float32"
    dim, pe_dim = shape.dim, shape.pe_dim
    kv_fp8, kv_dtype = shape.kv_fp8, shape.kv_dtype
    block_N = config.block_N
    policy = getattr(T.GemmWarpPolicy, config.policy)
    in_shared = config.operands_in_shared
    softmax_step = softmax_step_macro(block_H, block_N, dim)
    mask, normalise = mask_macro(shape, block_H, block_N, masked), normalise_macro(shape, block_H, empty_splits)

    @T.macro
    def start_rows(Q, Q_pe, bx, by, Q_buf, Q_pe_buf, acc_o, logsum, scores_max):
        """The head block's queries in, the running output, logsum and max reset."""
        T.copy(Q[bx, by * block_H:(by + 1) * block_H, :], Q_buf)
        T.copy(Q_pe[bx, by * block_H:(by + 1) * block_H, :], Q_pe_buf)
        T.fill(acc_o, 0)
        T.fill(logsum, 0)
        T.fill(scores_max, -T.infinity(accum))

    @T.macro
    def tile_step(Q_buf, Q_pe_buf, P_buf, KV_tile, K_pe_tile, start, seqlen, by, scale, acc_s, acc_o, logsum,
                  scores_max, scores_max_prev, scores_scale, scores_sum):
        """One K/V tile in the query's dtype: its scores, masked, the softmax step, and its PV product."""
        T.gemm(Q_buf, KV_tile, acc_s, transpose_B=True, policy=policy, clear_accum=True)
        T.gemm(Q_pe_buf, K_pe_tile, acc_s, transpose_B=True, policy=policy)
        mask(acc_s, start, seqlen, by)
        softmax_step(acc_s, P_buf, acc_o, logsum, scores_max, scores_max_prev, scores_scale, scores_sum, scale)
        T.gemm(P_buf, KV_tile, acc_o, policy=policy)

    if converters:
        return converting_attend_macro(shape, config, block_H, start_rows, tile_step, normalise, tma_tile)

    @T.macro
    def attend(Q, Q_pe, KV, K_pe, Kv_scale, Block_table, bx, by, seqlen, first_token, n_blocks, acc_o, logsum, scores_max):  # noqa: E501 (mlagate ladder matches this line)
        """Online softmax over n_blocks K/V tiles from first_token on."""
        scale = score_scale(shape, Kv_scale)
        if kv_dtype == FP8_FORMAT["sm_90"] and dtype == "bfloat16":
            T.import_source(E4M3_TO_BF16)
        if in_shared:
            Q_buf = T.alloc_shared([block_H, dim], dtype)
            Q_pe_buf = T.alloc_shared([block_H, pe_dim], dtype)
            P_buf = T.alloc_shared([block_H, block_N], dtype)
        else:
            Q_buf = T.alloc_fragment([block_H, dim], dtype)
            Q_pe_buf = T.alloc_fragment([block_H, pe_dim], dtype)
            P_buf = T.alloc_fragment([block_H, block_N], dtype)
        KV_shared = T.alloc_shared([block_N, dim], dtype)
        K_pe_shared = T.alloc_shared([block_N, pe_dim], dtype)
        if kv_fp8:
            KV_stage = T.alloc_shared([block_N, dim], kv_dtype)
            K_pe_stage = T.alloc_shared([block_N, pe_dim], kv_dtype)
            KV_reg = T.alloc_fragment([block_N, dim], kv_dtype)
            K_pe_reg = T.alloc_fragment([block_N, pe_dim], kv_dtype)
        acc_s = T.alloc_fragment([block_H, block_N], accum)
        scores_max_prev = T.alloc_fragment([block_H], accum)
        scores_scale = T.alloc_fragment([block_H], accum)
        scores_sum = T.alloc_fragment([block_H], accum)

        start_rows(Q, Q_pe, bx, by, Q_buf, Q_pe_buf, acc_o, logsum, scores_max)
        for k in T.Pipelined(n_blocks, num_stages=num_stages):
            start = first_token + k * block_N
            if kv_fp8:
                load_tile(KV, K_pe, Block_table, bx, start, seqlen, KV_stage, K_pe_stage)
                # Through registers: the stage is freed at once, and the one barrier before the converted tile
                # overwrites the last one comes after all its reads (a shared-to-shared copy put it inside the
                # converting loop, once per step: 1.8x the bf16 cache's time at 16 heads).
                T.copy(KV_stage, KV_reg)
                T.copy(K_pe_stage, K_pe_reg)
                T.copy(KV_reg, KV_shared)
                T.copy(K_pe_reg, K_pe_shared)
            else:
                load_tile(KV, K_pe, Block_table, bx, start, seqlen, KV_shared, K_pe_shared)
            tile_step(Q_buf, Q_pe_buf, P_buf, KV_shared, K_pe_shared, start, seqlen, by, scale, acc_s, acc_o, logsum,
                      scores_max, scores_max_prev, scores_scale, scores_sum)
        normalise(acc_o, logsum, scores_scale, Kv_scale)

    return attend


def mask_macro(shape, block_H: int, block_N: int, masked: bool):
    """attend's mask of one tile's scores (attend_macro says which)."""
    heads, s_q = shape.heads, shape.s_q

    @T.macro
    def mask(acc_s, start, seqlen, by):
        if s_q > 1:
            if start + block_N > seqlen - (s_q - 1):  # only a tile holding one of the last s_q positions
                for i, j in T.Parallel(block_H, block_N):
                    acc_s[i, j] = T.if_then_else(start + j < seqlen - (s_q - 1) + (by * block_H + i) // heads,
                                                 acc_s[i, j], MASKED)
        elif masked:
            for i, j in T.Parallel(block_H, block_N):
                acc_s[i, j] = T.if_then_else(start + j < seqlen, acc_s[i, j], MASKED)

    return mask


def normalise_macro(shape, block_H: int, empty_splits: bool):
    """attend's last step: the output over its logsum (an fp8 cache's V scale with it; 0 for an empty split)."""
    dim = shape.dim

    @T.macro
    def normalise(acc_o, logsum, scores_scale, Kv_scale):
        if shape.kv_fp8:  # V was read as stored: its scale joins the normalisation
            for i in T.Parallel(block_H):
                scores_scale[i] = T.if_then_else(logsum[i] > 0, Kv_scale[0] / logsum[i], 0)
            for i, j in T.Parallel(block_H, dim):
                acc_o[i, j] *= scores_scale[i]
        elif empty_splits:
            for i, j in T.Parallel(block_H, dim):
                acc_o[i, j] = T.if_then_else(logsum[i] > 0, acc_o[i, j] / logsum[i], 0)
        else:
            for i, j in T.Parallel(block_H, dim):
                acc_o[i, j] /= logsum[i]

    return normalise


def converting_attend_macro(shape, config: TileConfig, block_H: int, start_rows, tile_step, normalise, tma_tile=None):
    """attend_macro's ``attend`` for an fp8 cache under one consumer warpgroup, with a converter warpgroup beside it
    (threads WARPGROUP .. 2 x WARPGROUP of the block): a converter gets a tile into its registers (the next one's load
    issued before it goes on), waits until the consumers are done with the bf16 tile it overwrites (two, alternating:
    mbarriers ``empty``), writes it converted and signals it (``full``); the consumers wait, multiply and run the
    softmax. How a tile reaches the registers: straight from a dense cache into one of two register tiles, or, where
    ``tma_tile(KV, K_pe, Block_table, bx, start, KV_stage, K_pe_stage, loaded)`` is given (pages), by TMA into one fp8
    shared stage (mbarrier ``loaded``), read out before the next tile's copy is issued into it: loads through the page
    table from the converters' own threads cost a bounds check per 16 bytes and spilled, 0.80x the bf16 cache's speed;
    the stage reads 1.04-1.31x (docs/measurements.md, 2026-12-06, fourth and seventh sessions). The tiles go over in
    rounds of four slots, a staged round per loop iteration with constant parities (two slots per iteration, parities
    read at run time, spilled at s_q 2 and ran 0.91-0.94x there: sixth session). A round's slots past n_blocks are
    handed over empty (at most three per call; the stage's copy for one is an arrival without bytes), so each call
    leaves every barrier in the phase it found it: correct however often a thread block calls attend (the paged kernel's
    balanced schedule calls it per piece). The caller's epilogue runs on the consumers only (threads below
    ``Plan.threads``).
    The register tiles hold CHUNK-element chunks, chunk q of a tile (row-major) on converter q mod 128: eight
    neighbouring converters write eight neighbouring 16-byte bf16 chunks of a row, one per bank group of the
    swizzled tile. TileLang's own layout (16 elements a thread) put two converters on each group, a 2-way conflict
    on every store: 4-6% of the dense kernel's time at 16 heads on the H100 (docs/measurements.md, 2026-12-07)."""
    dtype, accum, kv_dtype = shape.dtype, "float32", shape.kv_dtype
    dim, pe_dim, block_N = shape.dim, shape.pe_dim, config.block_N
    staged = tma_tile is not None
    kv_chunks, pe_chunks = [block_N, dim // CHUNK, CHUNK], [block_N, pe_dim // CHUNK, CHUNK]

    @T.macro
    def into_chunks(tile, chunks, width):
        """A [block_N, width] tile into [block_N, width / CHUNK, CHUNK] registers."""
        for r, a, e in T.Parallel(block_N, width // CHUNK, CHUNK):
            chunks[r, a, e] = tile[r, a * CHUNK + e]

    @T.macro
    def out_of_chunks(chunks, tile, width):
        """into_chunks undone: chunked registers into a [block_N, width] tile (converted on the way)."""
        for r, c in T.Parallel(block_N, width):
            tile[r, c] = chunks[r, c // CHUNK, c % CHUNK]

    @T.macro
    def fetch(KV, K_pe, bx, first_token, n_blocks, t, KV_reg, K_pe_reg):
        """Tile t of a dense cache (KV[bx, token, 0, :]) into chunked registers, 8 bytes a thread."""
        if t < n_blocks:
            start = first_token + t * block_N
            # two names: TileLang takes a view of a kernel argument into the launch's checks by its name
            KV_chunks = T.view(KV, [KV.shape[0], KV.shape[1], dim // CHUNK, CHUNK])
            K_pe_chunks = T.view(K_pe, [K_pe.shape[0], K_pe.shape[1], pe_dim // CHUNK, CHUNK])
            T.copy(KV_chunks[bx, start:start + block_N, :, :], KV_reg)
            T.copy(K_pe_chunks[bx, start:start + block_N, :, :], K_pe_reg)

    @T.macro
    def issue(KV, K_pe, Block_table, bx, first_token, n_blocks, t, KV_stage, K_pe_stage, loaded):
        """Tile t's TMA copy into the stage; past n_blocks, an arrival that completes the stage's phase alone. The
        arrival stays in each branch: after the copy TileLang folds it into the copy's arrive_and_expect_tx (hoisted,
        it emits a separate expect and arrive: other code than was measured)."""
        if t < n_blocks:
            tma_tile(KV, K_pe, Block_table, bx, first_token + t * block_N, KV_stage, K_pe_stage, loaded)
            if T.shuffle_elect(WARPGROUP):
                T.barrier_arrive(loaded[0])
        else:
            if T.shuffle_elect(WARPGROUP):
                T.barrier_arrive(loaded[0])

    @T.macro
    def unstage(KV, K_pe, Block_table, bx, first_token, n_blocks, t, KV_stage, K_pe_stage, loaded, parity, ahead,
                KV_reg, K_pe_reg):
        """Tile t from the stage into registers, then tile t + 1's copy into the stage (if ``ahead``)."""
        T.barrier_wait(loaded[0], parity)
        if t < n_blocks:
            into_chunks(KV_stage, KV_reg, dim)
            into_chunks(K_pe_stage, K_pe_reg, pe_dim)
        if ahead:
            issue(KV, K_pe, Block_table, bx, first_token, n_blocks, t + 1, KV_stage, K_pe_stage, loaded)

    @T.macro
    def deliver(KV_reg, K_pe_reg, KV_tile, K_pe_tile, full, empty, b, parity, real):
        T.barrier_wait(empty[b], 1 - parity)  # on a fresh barrier, the phase before the first: passes
        if real:
            out_of_chunks(KV_reg, KV_tile, dim)
            out_of_chunks(K_pe_reg, K_pe_tile, pe_dim)
        T.barrier_arrive(full[b])

    @T.macro
    def take(Q_buf, Q_pe_buf, P_buf, KV_tile, K_pe_tile, full, empty, b, parity, start, seqlen, by, real, scale,
             acc_s, acc_o, logsum, scores_max, scores_max_prev, scores_scale, scores_sum):
        T.barrier_wait(full[b], parity)
        if real:
            tile_step(Q_buf, Q_pe_buf, P_buf, KV_tile, K_pe_tile, start, seqlen, by, scale, acc_s, acc_o, logsum,
                      scores_max, scores_max_prev, scores_scale, scores_sum)
        T.barrier_arrive(empty[b])

    @T.macro
    def attend(Q, Q_pe, KV, K_pe, Kv_scale, Block_table, bx, by, seqlen, first_token, n_blocks, acc_o, logsum, scores_max):  # noqa: E501 (mlagate ladder matches this line)
        """Online softmax over n_blocks K/V tiles from first_token on."""
        if kv_dtype == FP8_FORMAT["sm_90"] and dtype == "bfloat16":
            T.import_source(E4M3_TO_BF16)
        Q_buf = T.alloc_shared([block_H, dim], dtype)
        Q_pe_buf = T.alloc_shared([block_H, pe_dim], dtype)
        P_buf = T.alloc_shared([block_H, block_N], dtype)
        KV_0 = T.alloc_shared([block_N, dim], dtype)
        KV_1 = T.alloc_shared([block_N, dim], dtype)
        K_pe_0 = T.alloc_shared([block_N, pe_dim], dtype)
        K_pe_1 = T.alloc_shared([block_N, pe_dim], dtype)
        if staged:
            KV_stage = T.alloc_shared([block_N, dim], kv_dtype)
            K_pe_stage = T.alloc_shared([block_N, pe_dim], kv_dtype)
            loaded = T.alloc_barrier(arrive_count=[1])
        full = T.alloc_barrier(arrive_count=[WARPGROUP, WARPGROUP])
        empty = T.alloc_barrier(arrive_count=[WARPGROUP, WARPGROUP])
        # Slots per loop iteration, over whole rounds of four: the staged converters a round, every barrier's parity
        # a constant (two slots per iteration spilled at s_q 2 and read 13-17% slower there than this code's lab
        # twin: docs/measurements.md, 2026-12-06, sixth session); the register tiles a pair.
        per = 4 if staged else 2
        steps = T.ceildiv(n_blocks, 4) * (4 // per)
        KV_tiles, K_pe_tiles = (KV_0, KV_1), (K_pe_0, K_pe_1)
        if T.get_thread_binding() >= WARPGROUP:
            if staged:
                KV_reg = T.alloc_fragment(kv_chunks, kv_dtype)
                K_pe_reg = T.alloc_fragment(pe_chunks, kv_dtype)
                if 0 < n_blocks:  # no tile, no slot: a bare arrival here would leave the stage a phase ahead
                    issue(KV, K_pe, Block_table, bx, first_token, n_blocks, 0, KV_stage, K_pe_stage, loaded)
                for r in T.serial(steps):
                    for s in (0, 1, 2, 3):  # a Python tuple: unrolled as the program is built
                        t = 4 * r + s
                        # the stage completes a phase per slot, a bf16 tile one per use: both parities constants
                        unstage(KV, K_pe, Block_table, bx, first_token, n_blocks, t, KV_stage, K_pe_stage, loaded,
                                s % 2, r + 1 < steps if s == 3 else True, KV_reg, K_pe_reg)
                        deliver(KV_reg, K_pe_reg, KV_tiles[s % 2], K_pe_tiles[s % 2], full, empty, s % 2, s // 2,
                                t < n_blocks)
            else:
                # Two register tiles: the next tile's loads are in flight while this one waits for its bf16 tile
                # (1-2% faster than one at s_q 2 on the H100; ptxas: 255 registers, 8-12 bytes spilled with the chunks).
                KV_reg_0 = T.alloc_fragment(kv_chunks, kv_dtype)
                K_pe_reg_0 = T.alloc_fragment(pe_chunks, kv_dtype)
                KV_reg_1 = T.alloc_fragment(kv_chunks, kv_dtype)
                K_pe_reg_1 = T.alloc_fragment(pe_chunks, kv_dtype)
                fetch(KV, K_pe, bx, first_token, n_blocks, 0, KV_reg_0, K_pe_reg_0)
                for k in T.serial(steps):
                    fetch(KV, K_pe, bx, first_token, n_blocks, 2 * k + 1, KV_reg_1, K_pe_reg_1)
                    deliver(KV_reg_0, K_pe_reg_0, KV_0, K_pe_0, full, empty, 0, k % 2, 2 * k < n_blocks)
                    fetch(KV, K_pe, bx, first_token, n_blocks, 2 * k + 2, KV_reg_0, K_pe_reg_0)
                    deliver(KV_reg_1, K_pe_reg_1, KV_1, K_pe_1, full, empty, 1, k % 2, 2 * k + 1 < n_blocks)
        else:
            acc_s = T.alloc_fragment([block_H, block_N], accum)
            scores_max_prev = T.alloc_fragment([block_H], accum)
            scores_scale = T.alloc_fragment([block_H], accum)
            scores_sum = T.alloc_fragment([block_H], accum)
            scale = score_scale(shape, Kv_scale)
            start_rows(Q, Q_pe, bx, by, Q_buf, Q_pe_buf, acc_o, logsum, scores_max)
            for k in T.serial(steps):
                for s in (0, 1, 2, 3)[:per]:
                    t = per * k + s
                    take(Q_buf, Q_pe_buf, P_buf, KV_tiles[s % 2], K_pe_tiles[s % 2], full, empty, s % 2,
                         s // 2 if staged else k % 2, first_token + t * block_N, seqlen, by, t < n_blocks, scale,
                         acc_s, acc_o, logsum, scores_max, scores_max_prev, scores_scale, scores_sum)
            normalise(acc_o, logsum, scores_scale, Kv_scale)

    return attend


def combine_macro(dim: int, piece=None):
    """The split-KV combine of the decode kernels: one (sequence, head row) merges ``n_splits`` partial outputs with
    max-subtracted exp2 weights of their log2-sum-exps, and writes the output and the natural-log lse.
    ``piece(bid, hid, k)`` gives the index of partial k in glse[...] and O_partial[...]: by default (bid, hid, k),
    the fixed split's layout; the paged kernel's balanced schedule keeps a sequence's pieces in one row range."""
    accum = "float32"
    piece = piece or (lambda bid, hid, k: (bid, hid, k))

    @T.macro
    def combine(glse, O_partial, Output, Lse, bid, hid, n_splits):
        o_accum = T.alloc_fragment([dim], accum)
        lse_max = T.alloc_local([1], accum)
        lse_sum = T.alloc_local([1], accum)
        weight = T.alloc_local([1], accum)
        T.clear(o_accum)
        lse_max[0] = -T.infinity(accum)
        lse_sum[0] = 0
        for k in T.serial(n_splits):
            lse_max[0] = T.max(lse_max[0], glse[piece(bid, hid, k)])
        for k in T.serial(n_splits):
            lse_sum[0] += T.exp2(glse[piece(bid, hid, k)] - lse_max[0])
        lse_sum[0] = T.log2(lse_sum[0]) + lse_max[0]
        for k in T.serial(n_splits):
            weight[0] = T.exp2(glse[piece(bid, hid, k)] - lse_sum[0])
            for i in T.Parallel(dim):
                o_accum[i] += O_partial[(*piece(bid, hid, k), i)] * weight[0]
        for i in T.Parallel(dim):
            Output[bid, hid, i] = o_accum[i]
        Lse[bid, hid] = lse_sum[0] * LN2

    return combine


def write_unsplit_macro(shape, block_H: int, in_shared: bool):
    """An unsplit launch's epilogue (both decode kernels'): the natural-log lse and the output of head block by of
    sequence bx, staged through shared memory where the operands live there."""

    @T.macro
    def write_unsplit(acc_o, logsum, scores_max, Kv_scale, Lse, Output, bx, by):
        for i in T.Parallel(block_H):
            logsum[i] = (T.log2(logsum[i]) + scores_max[i] * score_scale(shape, Kv_scale)) * LN2
        T.copy(logsum, Lse[bx, by * block_H:(by + 1) * block_H])
        if in_shared:
            O_shared = T.alloc_shared([block_H, shape.dim], shape.dtype)
            T.copy(acc_o, O_shared)
            T.copy(O_shared, Output[bx, by * block_H:(by + 1) * block_H, :])
        else:
            T.copy(acc_o, Output[bx, by * block_H:(by + 1) * block_H, :])

    return write_unsplit


# The module of kernels/ that builds each other schedule's program, and those modules once imported. A kernel
# file loaded as it was at another commit (measure.interleaved) gets that commit's modules put in
# schedule_modules, so a re-measure builds each commit's own seesaw.
SCHEDULE_MODULES = {"seesaw": "mla_decode_seesaw"}
schedule_modules = {}


def paged_config(config: TileConfig, family_config=None) -> TileConfig:
    """The config a paged batch runs, given ``config``, the one the dense kernel runs at the batch's mean length:
    the same family's kernel over pages (the seesaw's is mla_decode_seesaw.paged_program), dealing a ragged batch's
    work evenly over the SMs (mla_decode_paged.balanced_schedule, num_split 0) where the dense kernel's split count
    would give a long sequence as many splits as a short one. ``family_config(name)``, another family's config at
    the shape, is what older commits' rule took (their seesaw ran the hopper family's paged kernel); the re-measure
    passes it to every commit's rule (measure/interleaved.py)."""
    return config.with_(num_split=0)


def schedule_module(schedule: str):
    if schedule not in schedule_modules:
        schedule_modules[schedule] = importlib.import_module(f"mlagate.kernels.{SCHEDULE_MODULES[schedule]}")
    return schedule_modules[schedule]


def kernel_source(config: TileConfig) -> bytes:
    """The source files ``config``'s kernel is built from: this file, and its schedule's module if it has one."""
    files = [__file__] + ([schedule_module(config.schedule).__file__] if config.schedule in SCHEDULE_MODULES else [])
    return b"".join(Path(f).read_bytes() for f in files)


def program(p: Plan):
    """The TileLang program for a plan: split + combine, or no-split."""
    if p.config.schedule != "pipelined":
        return schedule_module(p.config.schedule).program(p)
    s, c = p.shape, p.config
    batch, rows, seqlen, dim, pe_dim = s.batch, s.rows, s.seqlen, s.dim, s.pe_dim
    dtype, accum = s.dtype, "float32"
    block_N, block_H = c.block_N, p.block_H
    num_split, split_len = p.num_split, p.split_len
    blocks_per_split = split_len // block_N
    head_blocks = rows // block_H
    kv_dtype, kv_scale_t = s.kv_dtype, kv_scale_param(s)
    in_shared = c.operands_in_shared

    @T.macro
    def load_tile(KV, K_pe, Block_table, bx, start, seqlen, KV_shared, K_pe_shared):
        """Tokens start .. start + block_N of sequence bx, read in place (no block table)."""
        T.copy(KV[bx, start:start + block_N, 0, :], KV_shared)
        T.copy(K_pe[bx, start:start + block_N, 0, :], K_pe_shared)

    # Only a tail tile needs the mask, and every split holds tokens.
    attend = attend_macro(s, c, block_H, c.num_stages, load_tile, masked=p.masked, empty_splits=False,
                          converters=p.converters)
    combine = combine_macro(dim)
    write_unsplit = write_unsplit_macro(s, block_H, in_shared)

    @T.prim_func
    def main_split(
            Q: T.Tensor([batch, rows, dim], dtype),
            Q_pe: T.Tensor([batch, rows, pe_dim], dtype),
            KV: T.Tensor([batch, seqlen, 1, dim], kv_dtype),
            K_pe: T.Tensor([batch, seqlen, 1, pe_dim], kv_dtype),
            Kv_scale: kv_scale_t,
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
            attend(Q, Q_pe, KV, K_pe, Kv_scale, None, bx, by, seqlen, bz * split_len, blocks_per_split, acc_o,
                   logsum, scores_max)
            if T.get_thread_binding() < p.threads:  # the consumers: every thread but an fp8 cache's converters
                for i in T.Parallel(block_H):
                    logsum[i] = T.log2(logsum[i]) + scores_max[i] * score_scale(s, Kv_scale)
                T.copy(logsum, glse[bx, by * block_H:(by + 1) * block_H, bz])
                T.copy(acc_o, O_partial[bx, by * block_H:(by + 1) * block_H, bz, :])

        with T.Kernel(rows, batch, threads=128) as (hid, bid):
            combine(glse, O_partial, Output, Lse, bid, hid, num_split)

    @T.prim_func
    def main_no_split(
            Q: T.Tensor([batch, rows, dim], dtype),
            Q_pe: T.Tensor([batch, rows, pe_dim], dtype),
            KV: T.Tensor([batch, seqlen, 1, dim], kv_dtype),
            K_pe: T.Tensor([batch, seqlen, 1, pe_dim], kv_dtype),
            Kv_scale: kv_scale_t,
            Output: T.Tensor([batch, rows, dim], dtype),
            Lse: T.Tensor([batch, rows], accum),
    ):
        with T.Kernel(batch, head_blocks, threads=p.block_threads) as (bx, by):
            acc_o = T.alloc_fragment([block_H, dim], accum)
            logsum = T.alloc_fragment([block_H], accum)
            scores_max = T.alloc_fragment([block_H], accum)
            T.use_swizzle(10)
            attend(Q, Q_pe, KV, K_pe, Kv_scale, None, bx, by, seqlen, 0, blocks_per_split, acc_o, logsum,
                   scores_max)
            if T.get_thread_binding() < p.threads:  # the consumers: every thread but an fp8 cache's converters
                write_unsplit(acc_o, logsum, scores_max, Kv_scale, Lse, Output, bx, by)

    return main_split if num_split > 1 else main_no_split


# ----------------------------------------------------------------------------
# Targets, compilation and the Python entry point.

def target_for(arch: str) -> dict:
    """TileLang target for 'gfx942' or 'sm_90a'-style architecture names."""
    base = arch.split(":")[0]
    if base.startswith("gfx"):
        return {"kind": "hip", "mcpu": base}
    if base.startswith("sm_"):
        # wgmma and TMA need the arch-specific 'a' variant on Hopper.
        return {"kind": "cuda", "arch": base + "a" if base == "sm_90" else base}
    raise ValueError(f"unknown architecture {arch!r}: expected 'gfx...' (ROCm) or 'sm_..' (CUDA)")


def lowered(p: Plan, arch: str, build=program):
    """TileLang's lowered artifact of a plan (device module and source), without a GPU; ``build`` makes the
    plan's program (the paged kernel's, a lab kernel's), as CompiledProgram takes it."""
    from tvm.target import Target

    target = target_for(arch)
    with tilelang.transform.PassContext(config=PASS_CONFIGS), Target(target):
        return tilelang.lower(build(p), target=target)


def lower(shape: Shape, config: TileConfig, arch: str) -> str:
    """Device source code for one kernel, without a GPU (codegen only)."""
    return lowered(plan(shape, config, arch), arch).kernel_source


def device_arch(device) -> str:
    """'gfx942' on ROCm, 'sm_90' on CUDA, for a torch device."""
    import torch

    props = torch.cuda.get_device_properties(device)
    gcn = getattr(props, "gcnArchName", "")
    if getattr(torch.version, "hip", None) and gcn:
        return gcn.split(":")[0]
    return f"sm_{props.major}{props.minor}"


class CompiledProgram:
    """A plan's TileLang program compiled for ``arch`` (either decode kernel's), with the split path's
    workspace per device: partial lse [batch, rows, num_split] and outputs [..., dim], float32."""

    def __init__(self, p, build, arch: str):
        self.plan = p
        self.arch = arch
        self.kernel = tilelang.compile(build(p), target=target_for(arch), pass_configs=PASS_CONFIGS)
        self._workspace = {}

    def workspace(self, device):
        import torch

        if device not in self._workspace:
            s, n = self.plan.shape, self.plan.num_split
            self._workspace[device] = (
                torch.empty(s.batch, s.rows, n, device=device, dtype=torch.float32),
                torch.empty(s.batch, s.rows, n, s.dim, device=device, dtype=torch.float32),
            )
        return self._workspace[device]

    def launch(self, inputs: tuple, out, lse):
        """Launch on checked inputs; writes ``out`` and ``lse`` in place."""
        workspace = self.workspace(inputs[0].device) if self.plan.num_split > 1 else ()
        self.kernel(*inputs, *workspace, out, lse)
        return out, lse


def as_rows(t, dims: int):
    """The kernels' view of a query-side tensor: [batch, s_q, heads, ...] as [batch, s_q x heads, ...] (one row per
    query token and head, token-major); a tensor of ``dims`` dimensions (s_q = 1: q [batch, heads, d], lse
    [batch, heads]) as it is."""
    return t if t.dim() == dims else t.flatten(1, 2)


class CompiledDecode(CompiledProgram):
    """The dense kernel compiled for one (shape, config)."""

    def __init__(self, shape: Shape, config: TileConfig, arch: str, sm_count: int):
        super().__init__(plan(shape, config, arch, sm_count), program, arch)

    def __call__(self, q, q_pe, kv, k_pe, out, lse, kv_scale=None):
        """Launch on checked inputs; writes ``out`` and ``lse`` in place. q, q_pe and out may be 3-D or
        [batch, s_q, heads, d], lse [batch, heads] or [batch, s_q, heads]: the kernel reads the rows view.
        An fp8 cache's ``kv_scale`` is a float32 tensor [1] on the device (scale_tensor)."""
        cache = (kv, k_pe) + ((kv_scale,) if self.plan.shape.kv_fp8 else ())
        return self.launch((as_rows(q, 3), as_rows(q_pe, 3), *cache), as_rows(out, 3), as_rows(lse, 2))


def scale_tensor(kv_scale: float, device):
    """An fp8 cache's kv_scale as the kernels read it: float32 [1] on ``device`` (make it outside a timed region)."""
    import torch

    return torch.tensor([kv_scale], dtype=torch.float32, device=device)


_compiled: dict = {}


def compiled(shape: Shape, config: TileConfig, device=None) -> CompiledDecode:
    """Compile once per (shape, config, device architecture) in this process;
    TileLang's own disk cache makes later processes cheap."""
    import torch

    device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    arch = device_arch(device)
    key = (shape, config, arch)
    if key not in _compiled:
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        _compiled[key] = CompiledDecode(shape, config, arch, sms)
    return _compiled[key]


def check_device(named: dict) -> None:
    """Every input on one GPU (torch calls ROCm's devices "cuda" too)."""
    q = named["q"]
    for name, t in named.items():
        if t.device.type != "cuda":
            raise ValueError(f"{name}: must be on a GPU (cuda or hip) device, got {t.device}")
        if t.device != q.device:
            raise ValueError(f"{name}: on {t.device}, but q is on {q.device}; all inputs must share one device")


def check_query(named: dict) -> tuple[int, int, int, int, int]:
    """q and q_pe's layout, either [batch, heads, d] (one query token per sequence) or [batch, s_q, heads, d]:
    (batch, s_q, heads, dim, pe_dim). Names the rule broken."""
    q, q_pe = named["q"], named["q_pe"]
    if q.dim() not in (3, 4):
        raise ValueError(f"q: must be [batch, heads, dim] or [batch, s_q, heads, dim], got shape {tuple(q.shape)}")
    if q_pe.dim() != q.dim():
        raise ValueError(f"q_pe: must have q's {q.dim()} dimensions, got shape {tuple(q_pe.shape)}")
    batch, s_q, heads, dim = q.shape if q.dim() == 4 else (q.shape[0], 1, *q.shape[1:])
    check_s_q(s_q)
    pe_dim = q_pe.shape[-1]
    if tuple(q_pe.shape[:-1]) != tuple(q.shape[:-1]):
        raise ValueError(f"q_pe: shape must be {(*q.shape[:-1], pe_dim)} to match q {tuple(q.shape)}, "
                         f"got {tuple(q_pe.shape)}")
    if batch < 1:
        raise ValueError(f"q: batch must be >= 1, got {batch}")
    return batch, s_q, heads, dim, pe_dim


def check_dtypes(named: dict, cache: tuple, kv_scale) -> str:
    """q and q_pe float16 or bfloat16; the ``cache`` tensors both in q's dtype or both in one fp8 format, which
    takes a kv_scale (check_kv_scale). Returns the cache's dtype name ('bfloat16', 'float8_e4m3fn', ...)."""
    import torch

    for name, t in named.items():
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name}: must be a torch.Tensor, got {type(t).__name__}")
    q = named["q"]
    fp8 = tuple(getattr(torch, f) for f in FP8_DTYPES)
    for name in ("q", "q_pe") + cache:
        t = named[name]
        if t.dtype not in (torch.float16, torch.bfloat16) + (fp8 if name in cache else ()):
            allowed = "float16 or bfloat16" + (f" (or an fp8 format: {', '.join(FP8_DTYPES)})" if name in cache else "")
            raise ValueError(f"{name}: dtype must be {allowed}, got {t.dtype}")
    kv_dtype = named[cache[0]].dtype
    for name in ("q_pe",) + cache:
        t = named[name]
        want = kv_dtype if name in cache and kv_dtype in fp8 else q.dtype
        if t.dtype != want:
            raise ValueError(f"{name}: dtype {t.dtype} differs from {'the cache' if want in fp8 else 'q'}'s {want}; "
                             f"q and q_pe share one dtype, the cache q's or one fp8 format")
    check_kv_scale(kv_scale, kv_dtype in fp8)
    return str(kv_dtype).removeprefix("torch.")


def check_inputs(q, q_pe, kv, k_pe, kv_scale=None) -> Shape:
    """Validate decode inputs before any launch; returns their Shape.

    Layout: q [batch, heads, dim] or [batch, s_q, heads, dim], q_pe likewise with pe_dim,
    kv [batch, seqlen, 1, dim], k_pe [batch, seqlen, 1, pe_dim]: in q's dtype, or both fp8 with ``kv_scale``.
    """
    import torch

    named = {"q": q, "q_pe": q_pe, "kv": kv, "k_pe": k_pe}
    kv_dtype = check_dtypes(named, ("kv", "k_pe"), kv_scale)
    for name in ("kv", "k_pe"):
        if named[name].dim() != 4:
            raise ValueError(f"{name}: must have 4 dimensions, got shape {tuple(named[name].shape)}")
    batch, s_q, heads, dim, pe_dim = check_query(named)
    seqlen, kv_heads = kv.shape[1], kv.shape[2]
    if seqlen < 1:
        raise ValueError(f"kv: seqlen (dimension 1) must be >= 1, got {seqlen}")
    if kv_heads != 1:
        raise ValueError(f"kv: MLA decode shares one latent KV head (dimension 2 must be 1), got {kv_heads}")
    if seqlen < s_q:
        raise ValueError(f"kv: {causal_refusal(seqlen, s_q)}")
    expected = {
        "kv": (batch, seqlen, 1, dim),
        "k_pe": (batch, seqlen, 1, pe_dim),
    }
    for name, want in expected.items():
        if tuple(named[name].shape) != want:
            raise ValueError(f"{name}: shape must be {want} to match q {tuple(q.shape)} and kv "
                             f"{tuple(kv.shape)}, got {tuple(named[name].shape)}")
    for name, t in named.items():
        if not t.is_contiguous():
            raise ValueError(f"{name}: must be contiguous (call .contiguous())")
    for name in ("q", "q_pe"):
        if not bool(torch.isfinite(named[name]).all()):
            raise ValueError(f"{name}: contains NaN or Inf")
    check_device(named)
    dtype = "float16" if q.dtype == torch.float16 else "bfloat16"
    shape = Shape(batch=batch, seqlen=seqlen, heads=heads, dtype=dtype, dim=dim, pe_dim=pe_dim, s_q=s_q,
                  kv_dtype=kv_dtype)
    shape.check()
    return shape


def mla_decode(q, q_pe, kv, k_pe, *, kv_scale: float | None = None, config: TileConfig | None = None,
               return_lse: bool = False):
    """MLA decode attention: softmax(q·kᵀ / sqrt(dim + pe_dim)) · kv.

    q [batch, heads, dim] (one query token per sequence) or [batch, s_q, heads, dim] (s_q new tokens, causal:
    token i sees the cache up to position seqlen - s_q + i). Returns ``out`` of q's shape in the input dtype,
    and with ``return_lse`` also the natural-log log-sum-exp of q's shape less dim (float32).
    ``config`` defaults to the device architecture's family config, as tuned for this
    shape in kernels/tuned/<arch>.yaml where the table lists it.
    An fp8 cache (kv and k_pe in the arch's FP8_FORMAT) takes ``kv_scale``: dequantized = fp8 value x kv_scale.
    """
    import torch

    shape = check_inputs(q, q_pe, kv, k_pe, kv_scale)
    arch = device_arch(q.device)
    check_kv_format(shape.kv_dtype, arch)
    if config is None:
        from mlagate.kernels import tuned  # here, not at the top: tuned imports this module

        config = tuned.tuned_config(config_for_arch(arch).name, shape, arch)
    kernel = compiled(shape, config, q.device)
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:-1], device=q.device, dtype=torch.float32)
    scale = scale_tensor(kv_scale, q.device) if shape.kv_fp8 else None
    kernel(q, q_pe, kv, k_pe, out, lse, scale)
    return (out, lse) if return_lse else out


# ----------------------------------------------------------------------------
# Reference and inputs.

def causal_mask(s_q: int, heads: int, seqlen: int, device):
    """[rows, seqlen] True where query row r (token r // heads of the s_q new ones) sees a cache position: the new
    tokens are the cache's last s_q positions, token i sees positions 0 .. seqlen - s_q + i."""
    import torch

    token = torch.arange(s_q * heads, device=device) // heads
    return torch.arange(seqlen, device=device)[None, :] < (seqlen - s_q + 1 + token)[:, None]


def dequantized(kv, k_pe, kv_scale):
    """An fp8 cache as the values it stands for, in float64 (exact: fp8 x a float32 scale needs < 53 bits); a
    16-bit cache as it is."""
    import torch

    if kv.dtype not in tuple(getattr(torch, f) for f in FP8_DTYPES):
        return kv, k_pe
    return kv.to(torch.float64) * kv_scale, k_pe.to(torch.float64) * kv_scale


def reference(q, q_pe, kv, k_pe, compute_dtype=None, *, kv_scale=None):
    """The seed's ref_program: concatenate latent + RoPE parts, softmax at scale
    (dim + pe_dim) ** -0.5, times the latent part; plus the natural-log lse.
    A 4-D q [batch, s_q, heads, dim] gets the kernels' causal mask (causal_mask); out and lse have q's shape.
    An fp8 cache is dequantized first (``kv_scale``), so the reference is the kernel's task, not the quantization's.

    ``compute_dtype`` float32 (default) or float64 gives a reference; the input
    dtype gives torch's eager working-precision version (softmax in float32).
    """
    import torch

    kv, k_pe = dequantized(kv, k_pe, kv_scale)
    cd = compute_dtype or torch.float32
    lead = q.shape[:-1]  # [batch, heads] or [batch, s_q, heads]
    s_q, heads = (q.shape[1], q.shape[2]) if q.dim() == 4 else (1, q.shape[1])
    q, q_pe = q.reshape(q.shape[0], s_q * heads, -1), q_pe.reshape(q.shape[0], s_q * heads, -1)
    seqlen = kv.shape[1]
    visible = causal_mask(s_q, heads, seqlen, q.device) if s_q > 1 else None
    # A reference takes a few sequences at a time: float32 copies of a 16k-token cache are large.
    step = q.shape[0] if cd == q.dtype else max(1, (1 << 27) // (seqlen * (kv.shape[3] + k_pe.shape[3])))
    outs, lses = [], []
    for b in range(0, q.shape[0], step):
        sl = slice(b, b + step)
        query = torch.cat([q[sl], q_pe[sl]], dim=-1).to(cd)  # [b, rows, dim + pe_dim]
        key = torch.cat([kv[sl], k_pe[sl]], dim=-1)[:, :, 0].to(cd)  # [b, s, dim + pe_dim]
        scores = torch.bmm(query, key.transpose(1, 2)).to(torch.promote_types(cd, torch.float32))
        scores = scores * query.shape[-1] ** -0.5
        if visible is not None:
            scores = scores.masked_fill(~visible, -torch.inf)
        lses.append(torch.logsumexp(scores, dim=-1))
        probs = torch.softmax(scores, dim=-1).to(cd)
        outs.append(torch.bmm(probs, kv[sl, :, 0].to(cd)))
    out, lse = torch.cat(outs), torch.cat(lses)
    return out.reshape(*lead, out.shape[-1]), lse.reshape(lead)


def random_inputs(shape: Shape, device="cpu", seed: int = 0):
    """Seeded standard-normal inputs (never zeros): q, q_pe, kv, k_pe; q and q_pe [batch, s_q, heads, d] where
    s_q > 1, else [batch, heads, d]. An fp8 ``shape.kv_dtype`` gives the cache quantized (quantize) and its scale
    fifth: q, q_pe, kv, k_pe, kv_scale."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape.dtype)
    b, s, lead = shape.batch, shape.seqlen, query_lead(shape.batch, shape.s_q, shape.heads)

    def randn(*size):
        return torch.randn(*size, generator=gen, device=device, dtype=torch.float32).to(dtype)

    inputs = (randn(*lead, shape.dim), randn(*lead, shape.pe_dim), randn(b, s, 1, shape.dim),
              randn(b, s, 1, shape.pe_dim))
    return inputs[:2] + quantize(*inputs[2:], shape.kv_dtype) if shape.kv_fp8 else inputs


def quantize(kv, k_pe, kv_dtype: str):
    """A 16-bit cache in ``kv_dtype`` (fp8) as a serving engine writes it: one per-tensor scale, amax / the format's
    largest value, over both parts. Returns kv, k_pe, kv_scale (a float)."""
    import torch

    fp8 = getattr(torch, kv_dtype)
    amax = max(kv.abs().max().item(), k_pe.abs().max().item())
    # a float32 value, as the kernels read it; an all-zero cache: any scale dequantizes it exactly
    kv_scale = torch.tensor(amax / torch.finfo(fp8).max, dtype=torch.float32).item() or 1.0
    return (*((t.float() / kv_scale).clamp(-torch.finfo(fp8).max, torch.finfo(fp8).max).to(fp8) for t in (kv, k_pe)),
            kv_scale)


def query_lead(batch: int, s_q: int, heads: int) -> tuple:
    """The leading dimensions of q: (batch, heads) for one token per sequence, else (batch, s_q, heads)."""
    return (batch, s_q, heads) if s_q > 1 else (batch, heads)

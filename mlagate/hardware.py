"""Per-architecture hardware facts, in one place. Facts, not thresholds (those are in perf.yml).

The kernel file keeps the few it plans with (SM counts, wavefront size): it stays self-contained,
so that the interleaved re-measure can load a base commit's kernel file on its own.
"""

from dataclasses import dataclass

from mlagate.kernels.tile_rules import FP8_FORMAT


@dataclass(frozen=True)
class Arch:
    """Per-SM (CUDA) or per-CU (CDNA) hardware facts; these are not thresholds."""

    warp: int
    max_warps: int  # resident warps (waves) per SM/CU
    max_blocks: int
    smem_per_sm: int  # bytes of shared memory (LDS) per SM/CU
    smem_reserved_per_block: int  # bytes the runtime keeps per resident block
    regs_per_sm: int | None  # None: registers are not counted this way (gfx942: see simds)
    reg_alloc_unit: int = 256  # registers are allocated per warp in units of this
    warp_alloc_granularity: int = 4
    simds: int = 0  # CDNA: SIMDs per CU; hipcc's occupancy (waves per SIMD) x simds = resident waves


ARCHS = {
    # H100/H200: 64K 32-bit registers, 228 KB shared memory (227 KB per block), 64 warps, 32 blocks.
    "sm_90": Arch(warp=32, max_warps=64, max_blocks=32, smem_per_sm=233472, smem_reserved_per_block=1024,
                  regs_per_sm=65536),
    # MI300X CU: 64 KB LDS, 4 SIMDs x 8 waves of 64. The register limit is hipcc's "Occupancy
    # [waves/SIMD]" remark (VGPRs + AGPRs in 512 per lane, SGPRs), where hipcc compiled the kernel.
    "gfx942": Arch(warp=64, max_warps=32, max_blocks=32, smem_per_sm=65536, smem_reserved_per_block=0,
                   regs_per_sm=None, simds=4),
}


def arch_key(arch: str) -> str:
    """'sm_90a' -> 'sm_90', 'gfx942:xnack-' -> 'gfx942' (the keys of perf.yml and ARCHS)."""
    base = arch.split(":")[0]
    return base[:-1] if base.startswith("sm_") and base.endswith("a") else base


# Last-level caches that torch does not report as L2: MI300X's 256 MB Infinity Cache.
LAST_LEVEL_CACHE_BYTES = {"gfx942": 256 << 20}

# The matrix instruction a kernel should compile to, as the SASS or the source names it.
EXPECTED_MATRIX = {"sm_90": "HGMMA", "gfx942": "MFMA"}

# gfx90a and later (MI300X's gfx942): AGPRs share one register file per lane with the VGPRs and
# start at the VGPR count aligned to this (LLVM's getTotalNumVGPRs).
UNIFIED_VGPR_ALIGNMENT = 4

# The fp8 format of a KV cache per platform, of its architecture (kernels/tile_rules.py FP8_FORMAT says why two).
FP8_KV_FORMAT = {"rocm": FP8_FORMAT["gfx942"], "cuda": FP8_FORMAT["sm_90"]}
# Bytes per element of every dtype a query or a cache is held in.
ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float8_e4m3fn": 1, "float8_e4m3fnuz": 1}

"""Compiler resources: occupancy from a kernel's registers, threads and shared
memory, and the decide step for build reports (head against base).
Pure: no I/O, no printing.

Rules (thresholds from perf.yml ``gate.build``), per kernel of one target:

- ``shared_memory``: static + dynamic shared memory (LDS) above
  ``shared_memory_limit[arch]``: the kernel cannot launch. Fails without a base.
- ``build``: a kernel that failed to lower or compile. Fails without a base.
- ``spills``: spill stores or loads grew by more than ``max_new_spill_bytes``
  (bytes per thread from ptxas; on gfx942, 4 B per lane x hipcc's "VGPRs Spill").
- ``occupancy``: fewer blocks per SM (CU) than base, e.g. registers crossed a step.
- ``matrix``: base used its tensor-core instruction (HGMMA, MFMA) and head does
  not, or ptxas now serializes wgmma (C7511).

Without a base (or for a kernel the base lacks) spills and a missing tensor-core
instruction are warnings: they are reported, but only a change fails. Spills and
register occupancy are compared only where the base has compiler numbers too (not
a source-level base against a compiled head: the toolchain warning says why).
"""

from dataclasses import dataclass
from enum import StrEnum

from mlagate.hardware import ARCHS, arch_key


class Rule(StrEnum):
    """A finding's rule; its value is the name reports print and JSON holds."""

    BUILD = "build"
    SHARED_MEMORY = "shared_memory"
    SPILLS = "spills"
    OCCUPANCY = "occupancy"
    MATRIX = "matrix"
    TOOLCHAIN = "toolchain"  # base and head built with different compilers
    REMOVED = "removed"  # kernels of the base missing from the head


class Severity(StrEnum):
    FAIL = "fail"  # turns a passing gate into a regression
    WARN = "warn"  # reported only


DEFAULT_TARGETS = ("cuda:sm_90a", "hip:gfx942")


def sidecar_kind(target: str) -> str:
    """'cuda:sm_90a' -> 'build-cuda-sm_90a': the store's sidecar kind for a build report."""
    return "build-" + target.replace(":", "-")


def occupancy(arch: str, threads: int, registers: int | None, smem: int, smem_limit: int | None,
              waves_per_simd: int | None = None) -> dict:
    """Resident blocks per SM/CU from each resource, the minimum, and what limits it
    ('registers+shared_memory' when both do). ``waves_per_simd``: the compiler's own
    register occupancy (CDNA), used instead of counting ``registers``.
    A block over ``smem_limit`` cannot launch: 0 blocks, limited by shared memory."""
    a = ARCHS.get(arch_key(arch))
    if a is None or not threads:
        return {"blocks": None, "limited_by": None, "limits": {}}
    warps = -(-threads // a.warp)
    limits = {"threads": min(a.max_warps // warps, a.max_blocks)}
    if waves_per_simd is not None and a.simds:
        limits["registers"] = waves_per_simd * a.simds // warps
    elif registers is not None and a.regs_per_sm:
        per_warp = -(-max(registers, 1) * a.warp // a.reg_alloc_unit) * a.reg_alloc_unit
        resident = a.regs_per_sm // per_warp // a.warp_alloc_granularity * a.warp_alloc_granularity
        limits["registers"] = resident // warps
    if smem_limit is not None and smem > smem_limit:
        limits["shared_memory"] = 0
    elif smem:
        limits["shared_memory"] = a.smem_per_sm // (smem + a.smem_reserved_per_block)
    blocks = min(limits.values())
    return {"blocks": blocks, "limited_by": "+".join(k for k, v in limits.items() if v == blocks), "limits": limits}


@dataclass(frozen=True)
class Finding:
    target: str
    kernel: str  # "" for the report as a whole
    rule: Rule
    status: Severity
    message: str  # for people: names the kernel and the numbers; code reads rule, status and kernel

    @property
    def failed(self) -> bool:
        return self.status == Severity.FAIL


def row_occupancy(row, arch, limit) -> dict:
    """occupancy() of one kernel row of a build report."""
    return occupancy(arch, row.get("threads") or 0, row.get("registers"), row.get("smem") or 0, limit,
                     row.get("waves_per_simd"))


def _kernel(target, head, base, arch, limit, g, found):
    k = head["kernel"]

    def add(rule: Rule, status: Severity, message: str):
        found.append(Finding(target, k, rule, status, f"{k}: {message}"))

    if head.get("error"):
        add(Rule.BUILD, Severity.FAIL, head["error"])
        return
    smem = head.get("smem") or 0
    if limit is not None and smem > limit:
        add(Rule.SHARED_MEMORY, Severity.FAIL,
            f"shared memory {smem} B (static {head.get('static_smem') or 0} + dynamic "
            f"{head.get('dynamic_smem') or 0}) exceeds the {arch_key(arch)} limit of "
            f"{limit} B (gate.build.shared_memory_limit): it cannot launch")
    expected = head.get("expected_matrix")
    has = (head.get("matrix") or {}).get(expected, 0) if expected else None
    if base is None or base.get("error"):
        if head.get("spill_stores") or head.get("spill_loads"):
            add(Rule.SPILLS, Severity.WARN,
                f"spills {_b(head['spill_stores'])} B stores / {_b(head['spill_loads'])} B loads "
                f"({head.get('registers')} registers; no base to compare)")
        if expected and not has:
            add(Rule.MATRIX, Severity.WARN, f"no {expected} instruction (no base to compare)")
        return
    compiled = all(r.get("registers") is not None for r in (base, head))  # not a source-level base
    new = max((head.get(f) or 0) - (base.get(f) or 0) for f in ("spill_stores", "spill_loads"))
    if new > g.max_new_spill_bytes and compiled:
        add(Rule.SPILLS, Severity.FAIL,
            f"spill stores {base.get('spill_stores') or 0} → {head.get('spill_stores') or 0} B, "
            f"loads {_b(base.get('spill_loads'), 0)} → {_b(head.get('spill_loads'), 0)} B "
            f"(registers {base.get('registers')} → {head.get('registers')}; +{new} B > "
            f"gate.build.max_new_spill_bytes = {g.max_new_spill_bytes})")
    elif new > g.max_new_spill_bytes:
        add(Rule.SPILLS, Severity.WARN,
            f"spills {_b(head.get('spill_stores'))} B stores / {_b(head.get('spill_loads'))} B "
            f"loads; the base has no compiler numbers to compare")
    b_occ, h_occ = row_occupancy(base, arch, limit), row_occupancy(head, arch, limit)
    if (b_occ["blocks"] is not None and h_occ["blocks"] is not None and h_occ["blocks"] < b_occ["blocks"]
            and ("registers" in b_occ["limits"]) == ("registers" in h_occ["limits"])):
        add(Rule.OCCUPANCY, Severity.FAIL,
            f"{b_occ['blocks']} → {h_occ['blocks']} blocks per SM, limited by "
            f"{h_occ['limited_by']} (registers {base.get('registers')} → {head.get('registers')}, "
            f"shared memory {base.get('smem')} → {smem} B, {head.get('threads')} threads)")
    b_has = (base.get("matrix") or {}).get(expected, 0) if expected else 0
    if b_has and not has:
        add(Rule.MATRIX, Severity.FAIL, f"lost {expected}: {b_has} in base, 0 in head")
    if head.get("wgmma_serialized") and not base.get("wgmma_serialized"):
        add(Rule.MATRIX, Severity.FAIL, f"ptxas now serializes wgmma: {head['wgmma_serialized']}")


def _b(value, none="n/a"):
    """A byte count for a message; ``none`` where the compiler does not report it (hipcc: reloads)."""
    return none if value is None else value


def evaluate_build(base: dict | None, head: dict, cfg) -> list:
    """Findings for one target's head build report against its base (or None)."""
    target, arch = head["target"], head["arch"]
    if base is not None and base.get("target") != target:
        raise ValueError(f"build reports of different targets: base {base.get('target')}, head {target}")
    g = cfg.gate
    limit = g.shared_memory_limit.get(arch_key(arch))
    found = []
    if limit is None:
        found.append(Finding(target, "", Rule.SHARED_MEMORY, Severity.FAIL,
                             f"{target}: no gate.build.shared_memory_limit.{arch_key(arch)} in perf.yml: "
                             f"the shared memory rule cannot be checked"))
    base_rows = {r["kernel"]: r for r in (base or {}).get("kernels", [])}
    for row in head.get("kernels", []):
        _kernel(target, row, base_rows.get(row["kernel"]), arch, limit, g, found)
    if base is not None:
        head_keys = {r["kernel"] for r in head.get("kernels", [])}
        gone = sorted(set(base_rows) - head_keys)
        if gone:
            found.append(Finding(target, "", Rule.REMOVED, Severity.WARN,
                                 f"{target}: {len(gone)} kernel(s) of the base are not in the head report "
                                 f"(grid or configs changed?): {', '.join(gone[:5])}"))
        if base.get("toolchain") != head.get("toolchain"):
            found.append(Finding(target, "", Rule.TOOLCHAIN, Severity.WARN,
                                 f"{target}: toolchain differs (base {base.get('toolchain')}, "
                                 f"head {head.get('toolchain')}): numbers may move with it"))
    return found

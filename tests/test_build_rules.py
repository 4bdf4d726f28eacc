"""The build report's rules one by one (mlagate.decide.build_rules), on hand-made report rows.

Each test pins a rule at its boundary with the exact findings it leaves (rule, status, kernel and the
message the report prints), so a changed comparison, default or message fails here. The thresholds are
set here (``_cfg``), not read from perf.yml, so these tests do not move with it.
"""

import dataclasses
import re

import pytest

from mlagate import config
from mlagate.decide import build_rules
from mlagate.decide.build_rules import Finding, Rule, Severity

CFG = config.load()
SPLIT = "hopper/float16/h128/b64/s4096/split"
CDNA = "cdna3/float16/h128/b64/s1024/split"


def _row(kernel=SPLIT, **kw):
    """A sm_90a row as ptxas reports it (test_build_report's too: this module needs neither torch nor tilelang)."""
    row = {"kernel": kernel, "threads": 128, "registers": 128, "spill_stores": 0, "spill_loads": 0,
           "static_smem": 0, "dynamic_smem": 36864, "smem": 36864, "matrix": {"HGMMA": 40},
           "expected_matrix": "HGMMA", "wgmma_serialized": None, "error": None}
    row.update(kw)
    return row


def _report(*rows, target="cuda:sm_90a", arch="sm_90a", toolchain=None):
    return {"target": target, "arch": arch, "toolchain": toolchain or {"nvcc": "13.0.88"}, "kernels": list(rows)}


def _cfg(sm_90=232448, gfx942=65536, max_new_spill_bytes=0):
    limits = {k: v for k, v in (("sm_90", sm_90), ("gfx942", gfx942)) if v is not None}
    gate = dataclasses.replace(CFG.gate, shared_memory_limit=limits, max_new_spill_bytes=max_new_spill_bytes)
    return dataclasses.replace(CFG, gate=gate)


def _hip_row(kernel=CDNA, **kw):
    """A gfx942 row as hipcc reports it: VGPRs + AGPRs, spill stores only (no reloads), waves per SIMD."""
    row = _row(kernel, threads=256, registers=384, spill_stores=0, spill_loads=None, waves_per_simd=1,
               dynamic_smem=37888, smem=37888, matrix={"MFMA": 64}, expected_matrix="MFMA")
    row.update(kw)
    return row


def _hip(*rows):
    return _report(*rows, target="hip:gfx942", arch="gfx942", toolchain={"hipcc": "6.4.43482"})


def _findings(base_row, head_row, cfg=None, report=_report):
    base = None if base_row is None else report(base_row)
    return build_rules.evaluate_build(base, report(head_row), cfg or _cfg())


def _cuda(kernel, rule, status, message):
    return Finding("cuda:sm_90a", kernel, rule, status, f"{kernel}: {message}" if kernel else message)


def _rocm(rule, status, message):
    return Finding("hip:gfx942", CDNA, rule, status, f"{CDNA}: {message}")


# -- occupancy ----------------------------------------------------------------------

UNKNOWN = {"blocks": None, "limited_by": None, "limits": {}}


def test_sidecar_kind_names_the_target_with_dashes():
    assert build_rules.sidecar_kind("cuda:sm_90a") == "build-cuda-sm_90a"
    assert build_rules.sidecar_kind("hip:gfx942") == "build-hip-gfx942"


def test_occupancy_is_unknown_for_an_unknown_architecture_or_a_row_without_threads():
    assert build_rules.occupancy("sm_80", 128, 128, 0, None) == UNKNOWN
    assert build_rules.occupancy("sm_90a", 0, 128, 36864, 232448) == UNKNOWN


def test_occupancy_counts_each_resource_and_names_every_one_at_the_minimum():
    # 384 threads = 12 warps: 64 // 12 = 5 by threads; 168 registers round to 5376 per warp: 12 warps fit, 1 block;
    # 116224 B + the 1024 B the runtime keeps per block: 233472 // 117248 = 1 block.
    assert build_rules.occupancy("sm_90a", 384, 168, 116224, 232448) == {
        "blocks": 1, "limited_by": "registers+shared_memory", "limits": {"threads": 5, "registers": 1,
                                                                         "shared_memory": 1}}
    assert build_rules.occupancy("sm_90a", 128, 64, 116224, 232448) == {
        "blocks": 1, "limited_by": "shared_memory", "limits": {"threads": 16, "registers": 8, "shared_memory": 1}}
    # No shared memory: no shared-memory limit; 0 registers still take one allocation unit per warp.
    assert build_rules.occupancy("sm_90a", 128, 0, 0, 232448) == {
        "blocks": 16, "limited_by": "threads", "limits": {"threads": 16, "registers": 64}}


def test_a_block_over_the_configured_limit_cannot_launch_even_where_the_hardware_has_room():
    assert build_rules.occupancy("sm_90a", 128, None, 100000, 50000) == {
        "blocks": 0, "limited_by": "shared_memory", "limits": {"threads": 16, "shared_memory": 0}}
    assert build_rules.occupancy("sm_90a", 128, None, 100000, 100000)["limits"]["shared_memory"] == 2  # at the limit
    assert build_rules.occupancy("sm_90a", 128, None, 100000, None)["limits"]["shared_memory"] == 2  # no limit


def test_gfx942_register_occupancy_is_hipccs_waves_per_simd_over_four_simds():
    # 512 threads = 8 waves of 64; 3 waves per SIMD x 4 SIMDs = 12 resident waves: one block.
    assert build_rules.occupancy("gfx942", 512, 384, 0, 65536, waves_per_simd=3) == {
        "blocks": 1, "limited_by": "registers", "limits": {"threads": 4, "registers": 1}}
    # Without hipcc's figure the registers are not counted on gfx942 (no per-CU register file in ARCHS).
    assert build_rules.occupancy("gfx942", 512, 384, 0, 65536) == {
        "blocks": 4, "limited_by": "threads", "limits": {"threads": 4}}


def test_row_occupancy_reads_threads_registers_shared_memory_and_waves_from_a_report_row():
    hip = {"threads": 512, "registers": 384, "smem": 0, "waves_per_simd": 3}
    assert build_rules.row_occupancy(hip, "gfx942", 65536) == {
        "blocks": 1, "limited_by": "registers", "limits": {"threads": 4, "registers": 1}}
    over = {"threads": 128, "registers": None, "smem": 100000}
    assert build_rules.row_occupancy(over, "sm_90a", 50000)["limits"] == {"threads": 16, "shared_memory": 0}
    assert build_rules.row_occupancy({"kernel": "k", "error": "boom"}, "sm_90a", 232448) == UNKNOWN  # no threads
    assert build_rules.row_occupancy({"threads": 128, "registers": 128}, "sm_90a", 232448) == {  # no smem
        "blocks": 4, "limited_by": "registers", "limits": {"threads": 16, "registers": 4}}


# -- _kernel: each rule's exact finding ---------------------------------------------

def test_a_shared_memory_finding_names_target_kernel_and_both_parts():
    head = _row(smem=232449, static_smem=None, dynamic_smem=232449)
    assert _findings(None, head) == [_cuda(SPLIT, Rule.SHARED_MEMORY, Severity.FAIL,
                                           "shared memory 232449 B (static 0 + dynamic 232449) exceeds the sm_90 "
                                           "limit of 232448 B (gate.build.shared_memory_limit): it cannot launch")]
    head = _hip_row(smem=65537, static_smem=65537, dynamic_smem=None)
    assert _findings(None, head, report=_hip) == [_rocm(Rule.SHARED_MEMORY, Severity.FAIL,
                                                        "shared memory 65537 B (static 65537 + dynamic 0) exceeds "
                                                        "the gfx942 limit of 65536 B (gate.build.shared_memory_limit):"
                                                        " it cannot launch")]


def test_without_a_base_spills_and_a_missing_matrix_instruction_are_exact_warnings():
    assert _findings(None, _hip_row(spill_stores=48), report=_hip) == [  # hipcc reports no reloads: n/a
        _rocm(Rule.SPILLS, Severity.WARN, "spills 48 B stores / n/a B loads (384 registers; no base to compare)")]
    assert _findings(None, _row(spill_stores=0, spill_loads=8, registers=255)) == [  # loads alone warn too
        _cuda(SPLIT, Rule.SPILLS, Severity.WARN, "spills 0 B stores / 8 B loads (255 registers; no base to compare)")]
    assert _findings(None, _row(matrix={"HMMA": 64})) == [  # no HGMMA count at all
        _cuda(SPLIT, Rule.MATRIX, Severity.WARN, "no HGMMA instruction (no base to compare)")]
    assert _findings(None, _row(expected_matrix=None, matrix={})) == []  # a combine kernel expects none


def test_a_base_kernel_that_failed_to_build_counts_as_no_base():
    base = _row(error="nvcc failed (exit 2): boom")
    assert _findings(base, _row(spill_stores=8, spill_loads=4)) == [
        _cuda(SPLIT, Rule.SPILLS, Severity.WARN, "spills 8 B stores / 4 B loads (128 registers; no base to compare)")]


def test_new_spill_stores_fail_with_the_numbers_of_both_sides():
    """hipcc: stores only; the loads it does not report read 0 → 0."""
    base, head = _hip_row(spill_stores=16, registers=376), _hip_row(spill_stores=48)
    assert _findings(base, head, report=_hip) == [
        _rocm(Rule.SPILLS, Severity.FAIL, "spill stores 16 → 48 B, loads 0 → 0 B (registers 376 → 384; +32 B > "
                                          "gate.build.max_new_spill_bytes = 0)")]


def test_new_spill_loads_alone_fail():
    base, head = _row(spill_stores=0, spill_loads=8, registers=160), _row(spill_stores=None, spill_loads=16)
    assert _findings(base, head) == [
        _cuda(SPLIT, Rule.SPILLS, Severity.FAIL, "spill stores 0 → 0 B, loads 8 → 16 B (registers 160 → 128; +8 B > "
                                                 "gate.build.max_new_spill_bytes = 0)")]


def test_one_new_spill_byte_fails_and_the_allowance_passes_it():
    base, head = _row(spill_stores=0, spill_loads=0), _row(spill_stores=1, spill_loads=1)
    (f,) = _findings(base, head)
    assert (f.rule, f.status) == (Rule.SPILLS, Severity.FAIL) and "+1 B > gate.build.max_new_spill_bytes" in f.message
    assert _findings(base, head, cfg=_cfg(max_new_spill_bytes=1)) == []


def test_spills_against_a_source_level_base_warn_and_only_when_they_grew():
    """A base without compiler numbers (no registers) cannot fail a spill rule, only warn of new spills."""
    base = _row(registers=None, spill_stores=None, spill_loads=None)
    assert _findings(base, _row(registers=168, spill_stores=8, spill_loads=4)) == [
        _cuda(SPLIT, Rule.SPILLS, Severity.WARN,
              "spills 8 B stores / 4 B loads; the base has no compiler numbers to compare")]
    hip_base = _hip_row(registers=None, spill_stores=None, waves_per_simd=None)
    assert _findings(hip_base, _hip_row(spill_stores=8), report=_hip) == [
        _rocm(Rule.SPILLS, Severity.WARN,
              "spills 8 B stores / n/a B loads; the base has no compiler numbers to compare")]
    assert _findings(base, _row(registers=168)) == []  # no new spills: nothing to say


def test_an_occupancy_drop_names_the_limit_and_both_sides():
    assert _findings(_row(registers=128), _row(registers=168)) == [
        _cuda(SPLIT, Rule.OCCUPANCY, Severity.FAIL, "4 → 3 blocks per SM, limited by registers (registers 128 → "
                                                    "168, shared memory 36864 → 36864 B, 128 threads)")]
    head = _row(registers=168)
    del head["smem"]  # a head row without its shared memory figure: 0 B
    (f,) = _findings(_row(registers=128), head)
    assert f.message.endswith("(registers 128 → 168, shared memory 36864 → 0 B, 128 threads)")


def test_a_head_over_a_configured_limit_the_hardware_would_fit_drops_to_zero_blocks():
    cfg = _cfg(sm_90=200000)
    head = _row(dynamic_smem=210000, smem=210000)
    assert _findings(_row(), head, cfg) == [
        _cuda(SPLIT, Rule.SHARED_MEMORY, Severity.FAIL, "shared memory 210000 B (static 0 + dynamic 210000) exceeds "
              "the sm_90 limit of 200000 B (gate.build.shared_memory_limit): it cannot launch"),
        _cuda(SPLIT, Rule.OCCUPANCY, Severity.FAIL, "4 → 0 blocks per SM, limited by shared_memory (registers 128 → "
                                                    "128, shared memory 36864 → 210000 B, 128 threads)")]
    (f,) = _findings(head, head, cfg)  # the base could not launch either: no occupancy drop
    assert f.rule == Rule.SHARED_MEMORY


def test_the_matrix_rule_compares_the_expected_instruction_only():
    assert _findings(_row(), _row(matrix={"HMMA": 64})) == [  # head has no HGMMA count at all
        _cuda(SPLIT, Rule.MATRIX, Severity.FAIL, "lost HGMMA: 40 in base, 0 in head")]
    assert _findings(_row(matrix={}), _row(matrix={})) == []  # never had it: nothing lost
    combine = {"expected_matrix": None, "matrix": {"HGMMA": 0}}
    assert _findings(_row(**combine), _row(**combine)) == []  # a combine kernel expects none


# -- evaluate_build: the report as a whole ------------------------------------------

def test_reports_of_different_targets_are_refused():
    with pytest.raises(ValueError, match=re.escape("build reports of different targets: base hip:gfx942, "
                                                   "head cuda:sm_90a")):
        build_rules.evaluate_build(_hip(_hip_row()), _report(_row()), _cfg())


def test_an_architecture_without_a_shared_memory_limit_fails_the_report():
    head = _report(_row(), target="cuda:sm_80", arch="sm_80")
    assert build_rules.evaluate_build(None, head, _cfg()) == [
        Finding("cuda:sm_80", "", Rule.SHARED_MEMORY, Severity.FAIL,
                "cuda:sm_80: no gate.build.shared_memory_limit.sm_80 in perf.yml: the shared memory rule cannot be "
                "checked")]


def test_same_kernels_and_toolchain_leave_no_finding():
    assert _findings(_row(), _row()) == []
    assert build_rules.evaluate_build(None, {"target": "cuda:sm_90a", "arch": "sm_90a"}, _cfg()) == []  # no kernels


def test_kernels_of_the_base_missing_from_the_head_warn_with_the_first_five_names():
    names = [f"hopper/float16/h128/b{b}/s4096/split" for b in (1, 2, 4, 8, 16, 32, 64)]
    base, head = _report(*(_row(n) for n in names)), _report(_row(names[-1]))
    assert build_rules.evaluate_build(base, head, _cfg()) == [
        _cuda("", Rule.REMOVED, Severity.WARN, "cuda:sm_90a: 6 kernel(s) of the base are not in the head report "
              "(grid or configs changed?): " + ", ".join(sorted(names[:-1])[:5]))]
    headless = {"target": "cuda:sm_90a", "arch": "sm_90a", "toolchain": {"nvcc": "13.0.88"}}
    assert build_rules.evaluate_build(_report(_row()), headless, _cfg()) == [
        _cuda("", Rule.REMOVED, Severity.WARN, f"cuda:sm_90a: 1 kernel(s) of the base are not in the head report "
              f"(grid or configs changed?): {SPLIT}")]


def test_a_changed_toolchain_warns_with_both():
    base = _report(_row(), toolchain={"nvcc": "12.8.93"})
    assert build_rules.evaluate_build(base, _report(_row()), _cfg()) == [
        _cuda("", Rule.TOOLCHAIN, Severity.WARN, "cuda:sm_90a: toolchain differs (base {'nvcc': '12.8.93'}, "
                                                 "head {'nvcc': '13.0.88'}): numbers may move with it")]

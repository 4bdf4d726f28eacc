"""The build report (mlagate build) and its rules (mlagate.decide.build_rules), on a CPU."""

import json
import os
import re
import sys

import pytest
import yaml

from mlagate import cli, config, gate
from mlagate.build import analyse, lower, plan, report, toolchain
from mlagate.decide import build_rules, verdict
from mlagate.decide.build_rules import Rule, Severity
from mlagate.kernels import mla_decode as m
from mlagate.report import build_report, text
from mlagate.store.results import Store
from test_build_rules import _report, _row  # one sm_90a row as ptxas reports it

CFG = config.load()

# ptxas -v of tilelang 0.1.15's cdna3 split program for sm_90a (nvcc 13.0), as captured.
PTXAS_SAMPLE = """\
ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized due to \
insufficient register resources for the wgmma pipeline in the function 'main_split_kernel'
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'main_split_kernel_1' for 'sm_90a'
ptxas info    : Function properties for main_split_kernel_1
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers
ptxas info    : Compile time = 8.292 ms
ptxas info    : Function properties for _ZN2tl9AllReduceIfE3runEv
    16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'main_split_kernel' for 'sm_90a'
ptxas info    : Function properties for main_split_kernel
    1720 bytes stack frame, 2716 bytes spill stores, 2596 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 1720 bytes cumulative stack size
ptxas info    : Compile time = 1194.149 ms
ptxas info    : Compiling entry function 'main_no_split_kernel' for 'sm_90a'
ptxas info    : Function properties for main_no_split_kernel
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 4 barriers, 1024 bytes smem
"""

SASS_SAMPLE = """\
\tcode for sm_90a
\t\tFunction : main_split_kernel_1
        /*0000*/                   LDC R1, c[0x0][0x28] ;
\t\tFunction : main_split_kernel
        /*2990*/                   HGMMA.64x32x16.F32 R152, R132, gdesc[UR4], RZ, !UPT, gsb0 ;
        /*29e0*/                   HGMMA.64x32x16.F32 R152, R136, gdesc[UR12], R152, gsb0 ;
        /*2a00*/                   HMMA.16816.F32 R4, R8, R12, R4 ;
"""

PTX_SAMPLE = """\
.visible .entry main_split_kernel(
\twgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%f1}, %rd1, %rd2, 1, 1, 1, 1;
\twgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%f1}, %rd1, %rd2, 1, 1, 1, 1;
}
.visible .entry main_split_kernel_1(
\tmma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1}, {%r1}, {%r2}, {%f1};
}
"""


def test_ptxas_parser_reads_every_entry_function():
    got = analyse.parse_ptxas(PTXAS_SAMPLE)
    assert set(got) == {"main_split_kernel", "main_split_kernel_1", "main_no_split_kernel"}  # no device functions
    assert got["main_split_kernel"] == {
        "registers": 255, "spill_stores": 2716, "spill_loads": 2596, "stack_frame": 1720, "static_smem": 0,
        "wgmma_serialized": "wgmma.mma_async instructions are serialized due to insufficient register resources "
                            "for the wgmma pipeline"}
    assert got["main_split_kernel_1"]["registers"] == 32 and got["main_split_kernel_1"]["wgmma_serialized"] is None
    assert got["main_no_split_kernel"]["static_smem"] == 1024


def test_ptxas_parser_refuses_an_entry_without_registers():
    with pytest.raises(plan.BuildError, match="main_x: ptxas -v printed no 'Used N registers'"):
        analyse.parse_ptxas("ptxas info    : Compiling entry function 'main_x' for 'sm_90a'\n")


def test_matrix_instruction_counts_from_sass_and_ptx():
    assert analyse.count_sass(SASS_SAMPLE) == {"main_split_kernel_1": {"HGMMA": 0, "HMMA": 0},
                                               "main_split_kernel": {"HGMMA": 2, "HMMA": 1}}
    assert analyse.count_ptx(PTX_SAMPLE) == {"main_split_kernel": {"HGMMA": 2, "HMMA": 0},
                                             "main_split_kernel_1": {"HGMMA": 0, "HMMA": 1}}


def test_sass_counts_any_named_instruction_and_its_modifiers_only_where_named():
    sass = SASS_SAMPLE + ("        /*2a10*/                   WARPSYNC.ALL ;\n"
                          "        /*2a20*/                   WARPSYNC.COLLECTIVE R200, 0xd880 ;\n"
                          "        /*2a30*/                   BAR.SYNC.DEFER_BLOCKING 0x4, 0x80 ;\n")
    got = analyse.count_sass(sass, ("WARPSYNC.ALL", "WARPSYNC", "BAR.SYNC", "HMMA"))["main_split_kernel"]
    assert got == {"WARPSYNC.ALL": 1, "WARPSYNC": 2, "BAR.SYNC": 1, "HMMA": 1}  # HMMA is not HGMMA


def test_static_shared_memory_and_unknown_types():
    src = ('extern "C" __global__ void __launch_bounds__(384, 1) k(float* x) {\n'
           "  extern __shared__ __align__(1024) uchar buf_dyn_shmem[];\n"
           "  __shared__ __align__(16) uint64_t mbarrier_mem[10];\n  __shared__ float red[4][8];\n}\n")
    got = analyse.analyze_source(src, "cuda")["k"]
    assert (got["launch_bounds"], got["static_smem"]) == ("384, 1", 80 + 128)
    with pytest.raises(plan.BuildError, match=r"k: __shared__ mystery_t s\[4\]: unknown element size"):
        analyse.analyze_source(src.replace("float red[4][8]", "mystery_t s[4]"), "cuda")


def test_jobs_cover_split_combine_and_no_split_once():
    shape = m.Shape(batch=64, seqlen=4096)
    hopper = plan.plan_jobs("cuda:sm_90a", [m.HOPPER], [shape])  # the plan does not split at batch 64
    assert [(j.plan().num_split, j.forced) for j in hopper] == [(plan.FORCED_SPLIT, True), (1, False)]
    cdna3 = plan.plan_jobs("hip:gfx942", [m.CDNA3], [shape])  # the plan splits in 4: no-split is forced
    assert [(j.plan().num_split, j.forced) for j in cdna3] == [(4, False), (1, True)]
    short = plan.plan_jobs("cuda:sm_90a", [m.HOPPER], [m.Shape(batch=64, seqlen=64)])  # one tile: no split
    assert [j.plan().num_split for j in short] == [1]
    with pytest.raises(plan.BuildError, match="sm_90a is a cuda architecture"):
        plan.parse_target("hip:sm_90a")


def _normalized(source):  # tilelang numbers its reduction workspaces in no fixed order
    return re.sub(r"\bworkspace(_\d+)?\b", "workspace", source)


def test_hip_lds_and_mfma_from_lowered_source():
    shape = m.Shape(batch=64, seqlen=1024)
    job = plan.plan_jobs("hip:gfx942", [m.CDNA3], [shape])[0]
    lowered = lower.lower_job(job)
    assert _normalized(lowered["source"]) == _normalized(m.lower(shape, m.CDNA3, "gfx942"))  # same as lower()
    rows = {r["role"]: r for r in report.kernel_rows(job, lowered, None, 65536)}
    split, combine = rows["split"], rows["combine"]
    # K/V tile (32 x 512) and K_pe tile (32 x 64) in fp16, plus the reduction workspaces.
    assert split["dynamic_smem"] >= (32 * 512 + 32 * 64) * 2 and split["static_smem"] == 0
    assert split["smem"] == split["dynamic_smem"] <= 65536
    assert split["matrix"]["MFMA"] > 0 and combine["matrix"]["MFMA"] == 0
    assert split["threads"] == 128 and split["launch_bounds"] == "128"
    assert split["expected_matrix"] == "MFMA" and combine["expected_matrix"] is None
    assert split["blocks_per_sm"] == 65536 // split["smem"]


def _small_perf_yml(tmp_path):
    data = yaml.safe_load(open(config.DEFAULT_PATH))
    data["grid"]["quick"] = {"batch": [64], "seqlen": [1024], "heads": [128], "q_len": [1]}
    path = tmp_path / "perf.yml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.slow
def test_a_kernel_that_cannot_launch_on_mi300x_fails_the_build(tmp_path, monkeypatch, capsys):
    """cdna3 with block_N=128: the K/V tile alone is 128 x 512 x 2 = 128 KB of LDS."""
    bad = m.CDNA3.with_(name="cdna3-bigN", block_N=128)
    monkeypatch.setitem(m.CONFIGS, bad.name, bad)
    code = cli.main(["--config", str(_small_perf_yml(tmp_path)), "build", "--target", "hip:gfx942",
                     "--config-name", "cdna3-bigN", "--dtype", "float16", "--jobs", "1", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    assert re.search(r"FAIL: \[shared_memory\] cdna3-bigN/float16/h128/b64/s1024/split: shared memory 1\d{5} B "
                     r".* exceeds the gfx942 limit of 65536 B", out), out
    saved = json.loads((tmp_path / "build-hip-gfx942.json").read_text())
    assert {r["role"] for r in saved["kernels"]} == {"split", "combine", "no-split"}
    assert "❌ [shared_memory] cdna3-bigN" in (tmp_path / "build-hip-gfx942.md").read_text()


@pytest.mark.slow
def test_a_hopper_config_over_227_kb_fails_without_a_base():
    bad = m.HOPPER.with_(name="hopper-big", block_N=128, block_H=128)
    reports = report.build_reports(["cuda:sm_90a"], {"cuda:sm_90a": [bad]}, [m.Shape(batch=64, seqlen=1024)],
                                   codegen_only=True, smem_limits=CFG.gate.shared_memory_limit)
    failed = [f for f in build_rules.evaluate_build(None, reports["cuda:sm_90a"], CFG) if f.failed]
    assert failed and all(f.rule == Rule.SHARED_MEMORY for f in failed)
    (f,) = [f for f in failed if f.kernel == "hopper-big/float16/h128/b64/s1024/no-split"]
    assert f.message.startswith(f"{f.kernel}: shared memory") and "232448 B" in f.message


# -- build_rules.evaluate_build: each rule fails and passes ------------------------

def _failed(base, head):
    return [f for f in build_rules.evaluate_build(base, head, CFG) if f.failed]


def test_shared_memory_over_the_limit_fails_even_without_a_base():
    assert not _failed(None, _report(_row(smem=232448)))  # exactly 227 KB launches
    (f,) = _failed(None, _report(_row(smem=232449, static_smem=1025, dynamic_smem=231424)))
    assert (f.rule, f.kernel) == (Rule.SHARED_MEMORY, "hopper/float16/h128/b64/s4096/split")
    assert json.dumps([f.rule, f.status]) == '["shared_memory", "fail"]'  # as verdict.json holds them
    assert "232449 B (static 1025 + dynamic 231424) exceeds the sm_90 limit of 232448 B" in f.message
    (f,) = _failed(None, _report(_row(smem=65537), target="hip:gfx942", arch="gfx942"))
    assert "gfx942 limit of 65536 B" in f.message


def test_new_spills_fail_and_unchanged_spills_pass():
    base = _report(_row(spill_stores=2716, spill_loads=2596, registers=255))
    assert not _failed(base, _report(_row(spill_stores=2716, spill_loads=2596, registers=255)))
    (f,) = _failed(_report(_row()), _report(_row(spill_stores=8, spill_loads=8)))
    assert f.rule == Rule.SPILLS and "spill stores 0 → 8 B" in f.message and "max_new_spill_bytes = 0" in f.message
    warned = build_rules.evaluate_build(None, _report(_row(spill_stores=8, spill_loads=8)), CFG)  # no base: warn
    assert [(f.rule, f.status) for f in warned] == [(Rule.SPILLS, Severity.WARN)]


def test_registers_past_an_occupancy_step_fail():
    # 128 threads: 160 and 168 registers both give 3 blocks per SM (12 warps); 128 gives 4.
    assert not _failed(_report(_row(registers=160)), _report(_row(registers=168)))
    (f,) = _failed(_report(_row(registers=128)), _report(_row(registers=168)))
    assert f.rule == Rule.OCCUPANCY
    assert "4 → 3 blocks per SM, limited by registers (registers 128 → 168" in f.message


def test_a_lost_or_serialized_matrix_instruction_fails():
    assert not _failed(_report(_row()), _report(_row(matrix={"HGMMA": 36})))
    (f,) = _failed(_report(_row()), _report(_row(matrix={"HGMMA": 0, "HMMA": 64})))
    assert f.rule == Rule.MATRIX and "lost HGMMA: 40 in base, 0 in head" in f.message
    serialized = "wgmma.mma_async instructions are serialized due to insufficient register resources"
    (f,) = _failed(_report(_row()), _report(_row(wgmma_serialized=serialized)))
    assert f.rule == Rule.MATRIX and "now serializes wgmma" in f.message
    assert not _failed(_report(_row(wgmma_serialized=serialized)), _report(_row(wgmma_serialized=serialized)))


def test_a_kernel_that_failed_to_build_fails():
    (f,) = _failed(None, _report(_row(error="nvcc failed (exit 2): kernel.cu(3): error: boom")))
    assert f.rule == Rule.BUILD and "boom" in f.message


def test_occupancy_steps():
    hopper = build_rules.occupancy("sm_90a", 384, 168, 232448, 232448)
    assert (hopper["blocks"], hopper["limited_by"]) == (1, "registers+shared_memory")
    assert build_rules.occupancy("sm_90a", 128, 255, 36864, 232448)["limits"]["registers"] == 2
    assert build_rules.occupancy("sm_90a", 384, 168, 232449, 232448)["blocks"] == 0
    assert build_rules.occupancy("gfx942", 128, None, 37888, 65536)["blocks"] == 1


# -- the gate reads the sidecars --------------------------------------------------

def test_gate_adds_build_findings_and_warns_on_a_missing_head_report(tmp_path):
    store, kind = Store(tmp_path), build_rules.sidecar_kind("cuda:sm_90a")
    base, head = "a" * 40, "b" * 40
    store.write_sidecar("h200", base, kind, _report(_row(registers=128)))
    warnings = []
    findings, builds = gate.build_findings(store, "h200", base, head, CFG, warnings)
    assert findings == [] and builds["cuda:sm_90a"][1] is None
    (note,) = warnings
    assert note.kind == verdict.Kind.NO_BUILD_REPORT
    assert "no build-cuda-sm_90a report for head bbbbbbbb while base has one" in note.text
    store.write_sidecar("h200", head, kind, _report(_row(registers=168)))
    findings, _ = gate.build_findings(store, "h200", base, head, CFG, [])
    v = verdict.add_build_findings(verdict.Verdict("pass", []), findings)
    assert v.outcome == "regression"
    md = text.gate_markdown(v)
    assert "### Compiler resources" in md and "4 → 3 blocks per SM" in md
    assert verdict.add_build_findings(verdict.Verdict("pass", []), []).outcome == "pass"


# -- one real compile -------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.skipif(toolchain.find_tool("nvcc") is None,
                    reason="nvcc not found on PATH or in $CUDA_HOME/bin: the CUDA build report cannot compile")
def test_nvcc_compiles_a_hopper_kernel_and_reports_its_resources():
    reports = report.build_reports(["cuda:sm_90a"], {"cuda:sm_90a": [m.HOPPER]}, [m.Shape(batch=64, seqlen=1024)],
                                   smem_limits=CFG.gate.shared_memory_limit)
    rep = reports["cuda:sm_90a"]
    rows = {r["role"]: r for r in rep["kernels"]}
    assert set(rows) == {"split", "combine", "no-split"} and not any(r["error"] for r in rows.values())
    for role in ("split", "no-split"):
        r = rows[role]
        assert r["threads"] == 384 and r["launch_bounds"] == "384, 1"  # 2 consumer + 1 producer warpgroups
        assert 64 <= r["registers"] <= 255 and r["matrix"]["HGMMA"] > 0
        assert r["smem"] == r["static_smem"] + r["dynamic_smem"] and r["dynamic_smem"] > 200_000
    assert rows["combine"]["matrix"]["HGMMA"] == 0 and rows["combine"]["smem"] == 0
    assert rep["toolchain"]["matrix_check"] in ("sass", "ptx")
    assert not [f for f in build_rules.evaluate_build(None, rep, CFG) if f.failed]


# -- gfx942 with hipcc: clang's kernel-resource-usage remarks ----------------------

# hipcc's stderr for tilelang's cdna3 programs, in clang's remark format: "<file>:<line>:<col>: remark: <label>:
# <value> [-Rpass-analysis=kernel-resource-usage]", after the first remark the source line and caret clang prints
# with it. Labels and order as ROCm's LLVM emits them (TotalSGPRs; Dynamic Stack; AGPRs on targets with MFMA).
HIP_REMARKS = """\
kernel.cc:41:1: remark: Function Name: main_split_kernel [-Rpass-analysis=kernel-resource-usage]
   41 | extern "C" __global__ void __launch_bounds__(128) main_split_kernel(half_t* __restrict__ K) {
      | ^
kernel.cc:41:1: remark:     TotalSGPRs: 88 [-Rpass-analysis=kernel-resource-usage]
kernel.cc:41:1: remark:     VGPRs: 256 [-Rpass-analysis=kernel-resource-usage]
kernel.cc:41:1: remark:     AGPRs: 128 [-Rpass-analysis=kernel-resource-usage]
kernel.cc:41:1: remark:     ScratchSize [bytes/lane]: 48 [-Rpass-analysis=kernel-resource-usage]
kernel.cc:41:1: remark:     Dynamic Stack: False [-Rpass-analysis=kernel-resource-usage]
kernel.cc:41:1: remark:     Occupancy [waves/SIMD]: 1 [-Rpass-analysis=kernel-resource-usage]
kernel.cc:41:1: remark:     SGPRs Spill: 0 [-Rpass-analysis=kernel-resource-usage]
kernel.cc:41:1: remark:     VGPRs Spill: 12 [-Rpass-analysis=kernel-resource-usage]
kernel.cc:41:1: remark:     LDS Size [bytes/block]: 0 [-Rpass-analysis=kernel-resource-usage]
kernel.cc:230:1: remark: Function Name: main_split_kernel_1 [-Rpass-analysis=kernel-resource-usage]
kernel.cc:230:1: remark:     TotalSGPRs: 30 [-Rpass-analysis=kernel-resource-usage]
kernel.cc:230:1: remark:     VGPRs: 24 [-Rpass-analysis=kernel-resource-usage]
kernel.cc:230:1: remark:     AGPRs: 0 [-Rpass-analysis=kernel-resource-usage]
kernel.cc:230:1: remark:     ScratchSize [bytes/lane]: 0 [-Rpass-analysis=kernel-resource-usage]
kernel.cc:230:1: remark:     Dynamic Stack: False [-Rpass-analysis=kernel-resource-usage]
kernel.cc:230:1: remark:     Occupancy [waves/SIMD]: 8 [-Rpass-analysis=kernel-resource-usage]
kernel.cc:230:1: remark:     SGPRs Spill: 0 [-Rpass-analysis=kernel-resource-usage]
kernel.cc:230:1: remark:     VGPRs Spill: 0 [-Rpass-analysis=kernel-resource-usage]
kernel.cc:230:1: remark:     LDS Size [bytes/block]: 0 [-Rpass-analysis=kernel-resource-usage]
kernel.cc:41:1: remark: Function Name: main_no_split_kernel [-Rpass-analysis=kernel-resource-usage]
kernel.cc:41:1: remark:     TotalSGPRs: 90 [-Rpass-analysis=kernel-resource-usage]
kernel.cc:41:1: remark:     VGPRs: 246 [-Rpass-analysis=kernel-resource-usage]
kernel.cc:41:1: remark:     AGPRs: 120 [-Rpass-analysis=kernel-resource-usage]
kernel.cc:41:1: remark:     ScratchSize [bytes/lane]: 0 [-Rpass-analysis=kernel-resource-usage]
kernel.cc:41:1: remark:     Dynamic Stack: False [-Rpass-analysis=kernel-resource-usage]
kernel.cc:41:1: remark:     Occupancy [waves/SIMD]: 1 [-Rpass-analysis=kernel-resource-usage]
kernel.cc:41:1: remark:     SGPRs Spill: 0 [-Rpass-analysis=kernel-resource-usage]
kernel.cc:41:1: remark:     VGPRs Spill: 0 [-Rpass-analysis=kernel-resource-usage]
kernel.cc:41:1: remark:     LDS Size [bytes/block]: 0 [-Rpass-analysis=kernel-resource-usage]
"""

FAKE_HIPCC = """\
import json, os, re, sys
if "--version" in sys.argv:
    print("HIP version: " + os.environ.get("FAKE_HIP_VERSION", "6.4.43482-0f2d60242"))
    sys.exit(0)
with open(os.environ["FAKE_HIPCC_LOG"], "a") as f:
    f.write(json.dumps(sys.argv) + "\\n")
open(sys.argv[sys.argv.index("-o") + 1], "wb").close()  # the code object: not read by mlagate build
source, keep = open(sys.argv[-1]).read(), False
for line in open(os.environ["FAKE_HIPCC_REMARKS"]).read().splitlines():  # the blocks of the kernels it defines
    if m := re.search(r"Function Name: (\\w+)", line):
        keep = f" {m.group(1)}(" in source
    if keep:
        sys.stderr.write(line.replace("kernel.cc", sys.argv[-1]) + "\\n")
"""


@pytest.fixture
def fake_hipcc(tmp_path, monkeypatch):
    """A hipcc on PATH that logs its argv, writes an empty code object and prints HIP_REMARKS' blocks."""
    bin_dir = tmp_path / "rocm" / "bin"
    bin_dir.mkdir(parents=True)
    exe = bin_dir / "hipcc"
    exe.write_text(f"#!{sys.executable}\n{FAKE_HIPCC}")
    exe.chmod(0o755)
    (tmp_path / "remarks.txt").write_text(HIP_REMARKS)
    monkeypatch.delenv("ROCM_PATH", raising=False)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_HIPCC_LOG", str(tmp_path / "argv.jsonl"))
    monkeypatch.setenv("FAKE_HIPCC_REMARKS", str(tmp_path / "remarks.txt"))

    def calls():
        log = tmp_path / "argv.jsonl"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return calls


@pytest.fixture(scope="module")
def cdna3_lowered():
    """The cdna3 programs of b64/s1024 fp16, lowered once for the tests below (lowering takes seconds)."""
    jobs = plan.plan_jobs("hip:gfx942", [m.CDNA3], [m.Shape(batch=64, seqlen=1024)])
    return {j.plan(): lower.lower_job(j) for j in jobs}


def test_hip_remark_parser_reads_every_kernel():
    """The remark format is AMDGPUAsmPrinter::emitResourceUsageRemarks' in LLVM's
    llvm/lib/Target/AMDGPU/AMDGPUAsmPrinter.cpp: "Function Name: <kernel>", then one remark per
    resource with a 4-space indent; upstream LLVM labels the SGPR line "SGPRs" (ROCm's "TotalSGPRs"),
    prints AGPRs only on targets with MFMA and LDS Size only for kernels."""
    got = analyse.parse_hip_remarks(HIP_REMARKS)
    assert set(got) == {"main_split_kernel", "main_split_kernel_1", "main_no_split_kernel"}
    assert got["main_split_kernel"] == {
        "sgprs": 88, "vgprs": 256, "agprs": 128, "stack_frame": 48, "waves_per_simd": 1, "sgpr_spills": 0,
        "vgpr_spills": 12, "static_smem": 0, "registers": 256 + 128, "spill_stores": 48, "spill_loads": None,
        "wgmma_serialized": None}
    assert got["main_no_split_kernel"]["registers"] == 248 + 120  # VGPRs aligned to 4, then AGPRs
    upstream = ("k.cc:3:0: remark: Function Name: k [-Rpass-analysis=kernel-resource-usage]\n"
                "k.cc:3:0: remark:     SGPRs: 13 [-Rpass-analysis=kernel-resource-usage]\n"
                "k.cc:3:0: remark:     VGPRs: 10 [-Rpass-analysis=kernel-resource-usage]\n"
                "k.cc:3:0: remark:     Occupancy [waves/SIMD]: k.occupancy [-Rpass-analysis=kernel-resource-usage]\n"
                "k.cc:3:0: remark:     VGPRs Spill: 0 [-Rpass-analysis=kernel-resource-usage]\n")
    assert analyse.parse_hip_remarks(upstream)["k"] == {
        "sgprs": 13, "vgprs": 10, "agprs": 0, "registers": 10, "waves_per_simd": None, "vgpr_spills": 0,
        "spill_stores": 0, "spill_loads": None, "static_smem": 0, "wgmma_serialized": None}
    with pytest.raises(plan.BuildError, match="k: hipcc printed no numeric 'VGPRs' remark"):
        analyse.parse_hip_remarks(upstream.replace("VGPRs: 10", "VGPRs: k.num_vgpr"))


def test_hipcc_runs_with_tilelangs_own_command(fake_hipcc, tmp_path, monkeypatch):
    """tilelang 0.1.15 compiles HIP with tilelang.contrib.hipcc.compile_hip and the options of
    tilelang/rocm/backend.py; toolchain.compile_hip must run the same hipcc command line."""
    from tilelang import tvm  # noqa: F401 - makes `tvm` importable
    from tilelang.rocm.backend import tilelang_callback_hip_compile
    from tvm.target import Target

    tools, why = toolchain.hip_toolchain()
    assert why is None and tools["version"] == "6.4.43482-0f2d60242" and tools["hipcc"].endswith("rocm/bin/hipcc")
    source = 'extern "C" __global__ void __launch_bounds__(128) main_split_kernel_1(float* x) {\n}\n'
    got = toolchain.compile_hip(source, "gfx942", tools)
    assert got["main_split_kernel_1"]["registers"] == 24 and set(got) == {"main_split_kernel_1"}
    with pytest.raises(RuntimeError, match="empty result"):  # tilelang reads the (empty) code object; we do not
        tilelang_callback_hip_compile(source, Target({"kind": "hip", "mcpu": "gfx942"}))
    ours, theirs = fake_hipcc()
    assert ours[:-2] == theirs[:-2] and ours[-3] == "-o"  # the same hipcc, flags and order; temp paths differ
    assert {"-O3", "--offload-arch=gfx942", "--genco", "-std=c++17", analyse.HIP_REMARK_FLAG} <= set(ours)
    monkeypatch.setenv("FAKE_HIP_VERSION", "5.2.21153-0")  # Debian's ROCm 5.2 hipcc: no hip_bf16.h
    assert toolchain.hip_toolchain() == (None, f"{tools['hipcc']} is not usable (HIP version: 5.2.21153-0)")


@pytest.mark.slow
def test_where_hipcc_exists_gfx942_reports_registers_and_new_spills_fail(fake_hipcc, cdna3_lowered, monkeypatch):
    monkeypatch.setattr(lower, "lower_job", lambda job: cdna3_lowered[job.plan()])
    reports = report.build_reports(["hip:gfx942"], {"hip:gfx942": [m.CDNA3]}, [m.Shape(batch=64, seqlen=1024)],
                                   smem_limits=CFG.gate.shared_memory_limit)
    findings = build_rules.evaluate_build(None, reports["hip:gfx942"], CFG)
    assert not [f for f in findings if f.failed]  # spills without a base are a warning
    out = "\n".join(build_report.build_lines(reports["hip:gfx942"], findings))
    assert "warn: [spills] cdna3/float16/h128/b64/s1024/split: spills 48 B stores / n/a B loads (384 registers" in out
    assert len(fake_hipcc()) == 2  # the split program (2 kernels) and the no-split program
    rep = json.loads(json.dumps(reports["hip:gfx942"]))  # as saved
    assert rep["toolchain"] == {"hipcc": "6.4.43482-0f2d60242", "matrix_check": "source"}
    assert rep["source_level_only"] == ["MFMA instructions (call sites in the lowered source)"]
    rows = {r["role"]: r for r in rep["kernels"]}
    split = rows["split"]
    assert (split["vgprs"], split["agprs"], split["sgprs"], split["registers"]) == (256, 128, 88, 384)
    assert (split["spill_stores"], split["stack_frame"], split["waves_per_simd"]) == (48, 48, 1)
    assert split["smem"] == split["dynamic_smem"] == 37888 and split["matrix"]["MFMA"] > 0
    # 1 wave per SIMD x 4 SIMDs / 2 waves per block = 2 blocks by registers; 37888 B of LDS allow 1
    assert (split["blocks_per_sm"], split["limited_by"]) == (1, "shared_memory")
    assert rows["combine"]["blocks_per_sm"] == 16 and rows["no-split"]["spill_stores"] == 0
    base = json.loads(json.dumps(rep))
    next(r for r in base["kernels"] if r["role"] == "split")["spill_stores"] = 0
    (f,) = [f for f in build_rules.evaluate_build(base, rep, CFG) if f.failed]
    assert f.rule == Rule.SPILLS
    assert "spill stores 0 → 48 B, loads 0 → 0 B (registers 384 → 384; +48 B" in f.message
    assert build_rules.occupancy("gfx942", 128, 384, 0, 65536, waves_per_simd=1)["limits"]["registers"] == 2
    source_base = json.loads(json.dumps(base))
    for r in source_base["kernels"]:
        r.update(registers=None, spill_stores=None, waves_per_simd=None)
    assert not [f for f in build_rules.evaluate_build(source_base, rep, CFG) if f.failed]  # no numbers to compare


@pytest.mark.slow
def test_without_hipcc_gfx942_stays_source_level_and_says_so(cdna3_lowered, tmp_path, monkeypatch):
    monkeypatch.setattr(lower, "lower_job", lambda job: cdna3_lowered[job.plan()])
    monkeypatch.delenv("ROCM_PATH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no hipcc here, as on the CPU runners
    rep = report.build_reports(["hip:gfx942"], {"hip:gfx942": [m.CDNA3]}, [m.Shape(batch=64, seqlen=1024)],
                               smem_limits=CFG.gate.shared_memory_limit)["hip:gfx942"]
    assert rep["toolchain"] == {"compiler": None, "matrix_check": "source"}
    assert rep["source_level_only"] == ["LDS bytes", "MFMA instructions", "launch bounds",
                                        "blocks per CU from LDS and threads only (VGPRs, SGPRs and spills need "
                                        "hipcc from ROCm >= 6: no hipcc found in $ROCM_PATH/bin or on PATH)"]
    assert all(r["registers"] is None and r["spill_stores"] is None for r in rep["kernels"])
    assert "Source level only: LDS bytes;" in build_report.build_markdown(rep, [])

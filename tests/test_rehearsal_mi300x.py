"""A rehearsal of the MI300X run on a CPU: the compose `bench` service's command, as compose passes it,
through platform detection (gfx942), config and vendor choice, record (asv) and gate, to a verdict.

aiter is the real one: the pinned amd-aiter wheel the image installs (pyproject's aiter extra), its Python
run as it is (``mla_decode_fwd`` in both its branches, ``get_meta_param``, ``get_mla_metadata_info_v1``, its JIT
loader and argument check). What stands in (tests/rehearsal/sitecustomize.py says each): an MI300X as torch and
ROCm's tools report one, aiter's JIT-built modules (the enum, the asm stage 1, and the fp8 cache's persistent work
lists and reduce) and Triton's launch of its stage-2 kernel (the device code), TileLang's compiled kernel
(the reference behind the real gfx942 plan), and H200 samples for GPU time. The run happens in a clone of
this repository with two commits on top: the grid shrunk to CPU size (the base), then a comment-only change
(the head). No number here is an MI300X measurement.
"""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
REHEARSAL = Path(__file__).resolve().parent / "rehearsal"
DOCKERFILE = ROOT / "Dockerfile.rocm"

# aiter has a bf16 decode kernel for 16 and 128 heads on gfx942, none for 64 (tests/test_aiter_contract.py)
HEADS = [16, 64, 128]
VENDOR_HEADS = (16, 128)
Q_LEN_VENDOR_HEADS = (16,)  # past one query token (tests/test_aiter_contract.py)
FP8 = "float8_e4m3fnuz"  # gfx942's fp8 cache, read with a bf16 query: aiter's a16w8, persistent, 16 heads only
FP8_VENDOR_HEADS = (16,)
KV_DTYPES = ("bfloat16", FP8)

pytestmark = pytest.mark.slow  # a whole gate through asv in subprocesses, twice: ~45 s on a CPU


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def compose_bench(settings: dict) -> tuple:
    """The bench service's argv and environment, with ${VAR:-default} resolved as compose does."""
    service = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["bench"]

    def resolve(text):
        return re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: settings.get(m[1], m[2]), str(text))

    env = {k: resolve(v) for k, v in (service.get("environment") or {}).items() if v is not None}
    return shlex.split(resolve(service["command"])), env


def shrink_to_cpu(perf_yml: Path, rocm_dtypes=None):
    """CPU-sized grid and warm-up; every other key as committed (the bf16 and the fp8 cache, aiter's fp8 vendor
    at 16 heads: its persistent a16w8 launch, work lists and reduce stand in, aiter_jit/)."""
    data = yaml.safe_load(perf_yml.read_text())
    for name in ("quick", "full"):
        data["grid"][name] = {"batch": [64], "seqlen": [64], "heads": HEADS, "q_len": [1, 2]}
    data["timing"]["warmup_ms"] = 10
    rocm = data["platforms"]["rocm"]
    assert rocm["kv_dtypes"] == ["bfloat16", FP8] and rocm["fp8_vendor"]["heads"] == list(FP8_VENDOR_HEADS)
    if rocm_dtypes:  # a 16-bit grid alone: no fp8 cache, so no fp8 vendor
        rocm["dtypes"] = rocm["kv_dtypes"] = rocm_dtypes
        rocm.pop("fp8_vendor")
    perf_yml.write_text(yaml.safe_dump(data, sort_keys=False))


def rehearse(tmp_path, fresh_clone, rocm_dtypes=None, head_is_base=False):
    repo = fresh_clone(tmp_path / "repo")
    shrink_to_cpu(repo / "perf.yml", rocm_dtypes)
    git(repo, "commit", "-qam", "rehearsal: CPU-sized grid")
    base = git(repo, "rev-parse", "HEAD")
    with open(repo / "kernels" / "mla_decode.py", "a") as f:
        f.write("# a comment-only change\n")
    git(repo, "commit", "-qam", "a comment-only change")
    results = tmp_path / "results"
    settings = {"MLAGATE_BASE": base, "MLAGATE_RESULTS": str(results)}
    argv, service_env = compose_bench({**settings, "MLAGATE_HEAD": base} if head_is_base else settings)
    assert argv[:2] == ["mlagate", "gate"] and "--record-missing" in argv and "--machine" in argv
    # aiter imports its JIT-built modules from AITER_JIT_DIR (the image's aiter-jit volume): the stand-ins
    jit = tmp_path / "aiter-jit"
    jit.mkdir()
    for module in (REHEARSAL / "aiter_jit").glob("module_*.py"):
        shutil.copy(module, jit)
    rocm = REHEARSAL / "rocm"
    env = {**os.environ, **service_env, "HIP_VISIBLE_DEVICES": "0", "MLAGATE_REHEARSAL": "1",
           "PYTHONPATH": os.pathsep.join([str(REHEARSAL), str(repo)]), "AITER_JIT_DIR": str(jit),
           "ROCM_PATH": str(rocm), "PATH": os.pathsep.join([str(rocm / "bin"), os.environ["PATH"]])}
    env.pop("GITHUB_ACTIONS", None)
    out = subprocess.run([sys.executable, "-m", "mlagate.cli", *argv[1:]], cwd=repo, env=env,
                         capture_output=True, text=True, timeout=1500)
    return out, repo, results, base


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory, fresh_clone):
    return rehearse(tmp_path_factory.mktemp("mi300x"), fresh_clone)


def test_the_bench_service_yields_a_verdict_on_an_mi300x(rehearsal):
    out, repo, results, base = rehearsal
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-4000:]
    verdict = json.loads((repo / "out" / "gate" / "verdict.json").read_text())
    assert verdict["outcome"] == "pass" and verdict["platform"] == "rocm"
    cases = {tuple(c["case"]): c for c in verdict["cases"] if c["status"] != "skipped"}
    # gfx942 -> the cdna3 config is the gated one, measured in bfloat16 (aiter takes no fp16);
    # the hopper and seesaw configs, gated on CUDA, are skipped here (they need sm_90)
    assert set(cases) == {("tilelang-cdna3", 64, 64, "bfloat16", h, q, kv, "dense")
                          for h in HEADS for q in (1, 2) for kv in KV_DTYPES}
    assert {c["case"][0] for c in verdict["cases"] if c["status"] == "skipped"} == {"tilelang-hopper",
                                                                                     "tilelang-seesaw"}
    for (_, _, _, _, heads, q_len, kv, _), c in cases.items():
        assert c["status"] == "pass", c
        # aiter has a bf16 decode kernel for these on gfx942 (at 2 query tokens a causal one for 16 heads only,
        # perf.yml vendor_q_len_heads), and an fp8-cache one (a16w8) for 16 heads at 1 and 2 tokens: the ratio exists
        vendor = FP8_VENDOR_HEADS if kv == FP8 else VENDOR_HEADS
        if heads in vendor and (q_len == 1 or heads in Q_LEN_VENDOR_HEADS):
            assert 0.7 < c["vendor_ratio"] < 0.9
        else:  # none for 64 heads: declared in perf.yml, said in the report, latency still gated
            assert c["vendor_ratio"] is None and c["change"] is not None
            assert "gated on latency alone" in " ".join(c["warnings"])


def test_the_rehearsal_recorded_both_commits_through_asv_with_aiter(rehearsal):
    out, repo, results, base = rehearsal
    from mlagate.store.results import Store
    from mlagate.store.results_file import BENCH_RATIO, BENCH_TIME

    store = Store(results)
    assert store.machines() == ["mi300x"]  # compose's default MLAGATE_MACHINE
    head = store.load("mi300x", git(repo, "rev-parse", "HEAD"))
    assert store.load("mi300x", base) is not None and head is not None
    time = head.entries(BENCH_TIME)
    for heads in VENDOR_HEADS:  # the real aiter frontend ran, down to the stand-ins of its device code
        assert time[("aiter", 64, 64, "bfloat16", heads, 1, "bfloat16", "dense")].status == "ok"
    assert time[("aiter", 64, 64, "bfloat16", 16, 2, "bfloat16", "dense")].status == "ok"  # qo_indptr, max_seqlen_q 2
    for q_len in (1, 2):  # the fp8 cache: the persistent a16w8 call (work lists, stage 1, reduce), causal at 2
        fp8 = (64, 64, "bfloat16", 16, q_len, FP8, "dense")
        assert time[("aiter", *fp8)].status == "ok" and time[("tilelang-cdna3", *fp8)].status == "ok"
        assert head.entries(BENCH_RATIO)[("tilelang-cdna3", *fp8)].status == "ok"
    assert time[("aiter", 64, 64, "bfloat16", 128, 1, FP8, "dense")].status == "skipped"  # a16w8: 16 heads only
    # no 64-head kernel: not run
    assert time[("aiter", 64, 64, "bfloat16", 64, 1, "bfloat16", "dense")].status == "skipped"
    assert time[("tilelang-hopper", 64, 64, "bfloat16", 16, 1, "bfloat16", "dense")].status == "skipped"  # needs sm_90
    assert time[("flash_mla", 64, 64, "bfloat16", 16, 1, "bfloat16", "dense")].status == "skipped"
    assert head.entries(BENCH_RATIO)[("tilelang-cdna3", 64, 64, "bfloat16", 16, 1, "bfloat16", "dense")].status == "ok"
    env = store.read_sidecar("mi300x", head.commit, "env")
    assert env["platform"] == "rocm" and env["start"]["arch"] == "gfx942" and env["start"]["sm_count"] == 304
    # the vendor kernel, from the installed amd-aiter's own dispatch and code object (aiter_dispatch)
    aiter = env["start"]["vendors"]["aiter"]
    assert aiter["version"] == "0.1.7.post2.dev18" and aiter["arch"] == "gfx942"
    for heads in VENDOR_HEADS:
        row = aiter["kernels"][f"bfloat16/{heads}"]
        assert row["code_object"] == f"mla/mla_dec_stage1_bf16_a16w16_subQ{heads}_mqa{heads}.co"
        assert (row["vgpr_count"], row["lds_bytes"]) == (512, 65536)
    assert aiter["kernels"]["bfloat16/64"]["kernel"] is None
    for row in (f"bfloat16/16/kv={FP8}", f"bfloat16/16/kv={FP8}/s_q=2"):  # a16w8: one persistent, causal object
        assert aiter["kernels"][row]["code_object"] == "mla/mla_a16w8_qh16_m16x4_n16x1_coex0_mask1_ps.co", row


def test_an_fp16_grid_on_rocm_fails_closed_naming_each_case(tmp_path, fresh_clone):
    """The ROCm path as it shipped (float16 only): aiter refuses fp16, so no ratio exists: exit 2."""
    out, repo, _, _ = rehearse(tmp_path, fresh_clone, rocm_dtypes=["float16"], head_is_base=True)
    assert out.returncode == 2, out.stdout[-4000:] + out.stderr[-2000:]
    verdict = json.loads((repo / "out" / "gate" / "verdict.json").read_text())
    errors = [c for c in verdict["cases"] if c["status"] == "error"]
    assert {tuple(c["case"])[4] for c in errors} == set(VENDOR_HEADS)
    assert all("no vendor ratio in the head results: aiter" in c["reasons"][0] for c in errors)

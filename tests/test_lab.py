"""The lab (lab/): every script imports and answers --help, and each one a CPU can run is run for real here,
on committed data (tests/fixtures, lab/fixtures) or on stores written with the project's own record format."""

import ast
import datetime
import importlib
import inspect
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mlagate import config
from mlagate.case import Case, CaseResult, RunStatus, Samples
from mlagate.measure.asv_suite import write_cases
from mlagate.measure.metrics import add_metrics
from mlagate.store.results import Store

ROOT = Path(__file__).resolve().parent.parent
LAB = ROOT / "lab"
SCRIPTS = sorted(p.stem for p in LAB.glob("*.py") if p.stem != "__init__")
NOISE = ROOT / "tests" / "fixtures" / "h200" / "noise_study_2026-11-29.json"


def lab(*args, check=True) -> subprocess.CompletedProcess:
    """``python -m lab.<script> args`` from the repository root, as lab/README.md runs it."""
    run = subprocess.run([sys.executable, "-m", *map(str, args)], cwd=ROOT, capture_output=True, text=True)
    if check:
        assert run.returncode == 0, run.stderr[-3000:]
    return run


@pytest.fixture
def importable(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))  # lab/ is not installed: it imports from the checkout


def test_the_lab_has_its_scripts():
    assert len(SCRIPTS) >= 10, SCRIPTS  # a broken glob would make the tests below vacuous


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_lab_script_imports_and_answers_help_with_its_command(name, importable):
    module = importlib.import_module(f"lab.{name}")
    assert f"python -m lab.{name}" in module.__doc__, "the docstring gives the command that runs it"
    assert "(CPU" in module.__doc__.splitlines()[0] or "(GPU" in module.__doc__.splitlines()[0], \
        "the first line says where it runs"
    out = lab(f"lab.{name}", "--help").stdout
    assert out.startswith("usage:") and f"python -m lab.{name}" in out


def project_names(tree) -> list:
    """[(line, what, found)] for every name a script takes from mlagate or lab, at the top or inside a function
    (the GPU scripts import there, after --help), and every attribute it reads off a module so taken."""
    bound, uses = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("mlagate", "lab"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                if not hasattr(module, alias.name):  # a submodule not yet imported
                    try:
                        importlib.import_module(f"{node.module}.{alias.name}")
                    except ImportError:
                        pass
                found = hasattr(module, alias.name)
                uses.append((node.lineno, f"{node.module}.{alias.name}", found))
                if found:
                    bound[alias.asname or alias.name] = getattr(module, alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
            module = bound[node.value.id]
            if inspect.ismodule(module):
                uses.append((node.lineno, f"{module.__name__}.{node.attr}", hasattr(module, node.attr)))
    return uses


@pytest.mark.parametrize("name", SCRIPTS)
def test_what_a_lab_script_takes_from_the_project_exists(name, importable):
    """What --help cannot show: a name the code no longer has (notes/grid_spread.py imported harness.shape_of
    long after it was gone)."""
    uses = project_names(ast.parse((LAB / f"{name}.py").read_text()))
    missing = [f"line {line}: {what}" for line, what, found in uses if not found]
    assert not missing, f"lab/{name}.py uses names the project does not have: {missing}"


def test_the_name_check_finds_a_name_the_project_lost(importable):
    uses = project_names(ast.parse("def main():\n    from mlagate.measure.harness import Inputs, shape_of\n"
                                   "    from mlagate.measure import timer\n    timer.time_gpu, timer.no_such_name\n"))
    assert [(what, found) for _, what, found in uses] == [
        ("mlagate.measure.harness.Inputs", True), ("mlagate.measure.harness.shape_of", False),
        ("mlagate.measure.timer", True), ("mlagate.measure.timer.time_gpu", True),
        ("mlagate.measure.timer.no_such_name", False)]


def test_the_lab_readme_names_every_file_and_only_files_that_exist():
    readme = (LAB / "README.md").read_text()
    files = {str(p.relative_to(LAB)) for p in LAB.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    files -= {"README.md", "__init__.py"}
    rows = re.findall(r"^\| `([^`]+)` \|", readme, re.M)  # the table's first column: one row per file
    assert sorted(rows) == sorted(files), \
        f"no row for {sorted(files - set(rows))}; no row's file exists: {sorted(set(rows) - files)}"


VARIANTS = sorted(LAB.glob("seesaw_variants/*.diff")) + sorted(LAB.glob("fp8_variants/*.diff"))


@pytest.mark.parametrize("patch", VARIANTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_kept_variant_still_applies_to_its_kernel(patch):
    check = subprocess.run(["git", "apply", "--check", str(patch)], cwd=ROOT, capture_output=True, text=True)
    assert check.returncode == 0, (f"{patch.relative_to(ROOT)} no longer applies to the kernel it patches: "
                                   f"re-base it on the kernel or delete it (git keeps it)\n{check.stderr}")


@pytest.mark.parametrize("script,args,kernel", [
    ("lab.fp8_probe", (), "mla_decode.py"), ("lab.seesaw_probe", ("speed",), "mla_decode_seesaw.py"),
    ("lab.seesaw_sass", (), "mla_decode_seesaw.py")])
def test_a_variant_that_is_no_patch_of_the_kernel_is_refused_naming_it(tmp_path, script, args, kernel):
    """--variant: a missing file, a patch of another file, or one that no longer applies ends with exit 2 and the
    file named, before anything is built (no GPU here), and the tree is left as it was."""
    other = {"mla_decode.py": "seesaw_variants/left_right_pe.diff",
             "mla_decode_seesaw.py": "fp8_variants/split_depth.diff"}
    stale = tmp_path / "stale.diff"
    stale.write_text(f"--- a/kernels/{kernel}\n+++ b/kernels/{kernel}\n@@ -1,1 +1,1 @@\n-no such line in it\n+x\n")
    before = (ROOT / "kernels" / kernel).read_text()
    for patch, why in ((tmp_path / "missing.diff", "no such file"), (LAB / other[kernel], f"kernels/{kernel} alone"),
                       (stale, f"does not apply to kernels/{kernel}")):
        run = lab(script, *args, "--variant", patch, check=False)
        assert run.returncode == 2 and str(patch) in run.stderr and why in run.stderr, run.stderr[-2000:]
    assert (ROOT / "kernels" / kernel).read_text() == before


def test_the_fp8_probe_times_a_variant_beside_the_tree(importable):
    """--variant adds one kernel a point, the tree's fp8 kernel patched; without it every kernel is the tree's."""
    fp8_probe = importlib.import_module("lab.fp8_probe")
    patch = str(LAB / "fp8_variants" / "split_depth.diff")
    plain = fp8_probe.kernels([64], [4096], [16], [1, 2])
    with_variant = fp8_probe.kernels([64], [4096], [16], [1, 2], patch)
    assert [job[0] for job in plain] == ["seesaw bf16", "hopper bf16", "hopper fp8"] * 2
    assert [job[0] for job in with_variant] == ["seesaw bf16", "hopper bf16", "hopper fp8", "hopper fp8 variant"] * 2
    assert {job[3] for job in plain} == {None} and with_variant[3][1:] == with_variant[2][1:3] + (patch,)
    from mlagate.kernels import mla_decode
    assert fp8_probe.decode_module(None) is mla_decode


@pytest.mark.slow  # lowers one fp8 kernel of each patched copy and of the tree: ~15 s each on a CPU
@pytest.mark.parametrize("patch,heads,marker,in_variant", [
    ("split_depth.diff", 16, "S_part", True),  # the consumers' partial scores, summed through shared memory
    ("in_loop_chunks.diff", 128, "*(fp8_e4_16_t*)(KV_reg", False),  # no 16-byte pieces of the stage in registers
])
def test_a_kept_fp8_variant_lowers_for_sm_90a(importable, patch, heads, marker, in_variant):
    """Each fp8 variant still builds its kernel: a copy of the dense kernel with it applied lowers for sm_90a and
    differs from the tree's where the patch says (lab/README.md: what each is)."""
    fp8_probe = importlib.import_module("lab.fp8_probe")
    variant = fp8_probe.decode_module(str(LAB / "fp8_variants" / patch))
    from mlagate.kernels import mla_decode
    assert variant is not mla_decode and Path(variant.__file__).parent != ROOT / "kernels"
    shape = mla_decode.Shape(batch=64, seqlen=4096, heads=heads, dtype="bfloat16", kv_dtype="float8_e4m3fn")
    source = variant.lower(shape, mla_decode.HOPPER, "sm_90a")
    tree = mla_decode.lower(shape, mla_decode.HOPPER, "sm_90a")
    assert (marker in source, marker in tree) == (in_variant, not in_variant)


def test_a_variant_module_is_the_seesaw_file_with_the_patch_applied(importable):
    seesaw_probe = importlib.import_module("lab.seesaw_probe")
    patch = LAB / "seesaw_variants" / "left_right_pe.diff"
    variant = seesaw_probe.variant_module(str(patch))
    committed = (ROOT / "kernels" / "mla_decode_seesaw.py").read_text()
    patched = Path(variant.__file__).read_text()
    assert patched != committed and Path(variant.__file__).resolve() != (ROOT / "kernels").resolve()
    added = [line[1:] for line in patch.read_text().splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert all(line in patched for line in added)
    assert (ROOT / "kernels" / "mla_decode_seesaw.py").read_text() == committed, "the tree is not touched"


@pytest.mark.slow  # lowers and compiles one seesaw kernel: ~12 s on a CPU
def test_the_seesaw_sass_probe_lowers_and_compiles_a_variant_on_the_cpu(tmp_path):
    from mlagate.build import toolchain

    if not (toolchain.find_tool("nvcc") and toolchain.find_tool("cuobjdump")):
        pytest.skip("needs nvcc and cuobjdump (the CUDA toolkit and the test extra)")
    out = lab("lab.seesaw_sass", "--variant", "lab/seesaw_variants/left_right_pe.diff",
              "--shape", "64,4096,128,bfloat16", "--keep", tmp_path).stdout
    assert "lab/seesaw_variants/left_right_pe.diff 64,4096,128,bfloat16: 1 split(s), masked False" in out
    assert re.search(r"main_no_split_kernel: \d+ registers, spills \d+/\d+; WARPSYNC\.ALL \d+, WARPSYNC\.COLLECTIVE "
                     r"\d+, BRA\.DIV \d+, BAR\.SYNC \d+, HGMMA [1-9]\d*, UTMALDG [1-9]\d*", out), out
    kept = {p.suffix for p in tmp_path.iterdir()}
    assert kept == {".cu", ".sass"}


def test_ncu_stalls_reproduces_the_recorded_reading_of_the_seesaws_profile():
    """The H200 profile of 2026-12-01 (seventh session) and what this script printed from it then."""
    out = lab("lab.ncu_stalls", LAB / "fixtures" / "main_no_split.sass.csv.xz", "--top", "12").stdout
    assert out == (LAB / "fixtures" / "main_no_split.stalls.txt").read_text()


def test_noise_study_summary_reprints_the_recorded_h200_table():
    out = lab("lab.noise_study", "--summary", NOISE).stdout
    spreads = dict(((label.strip(), method), spread) for label, method, spread in
                   re.findall(r"^(.+?float16)\s+(do_bench|mlagate)\s+[\d.]+\s+([\d.]+%)", out, re.M))
    # docs/measurements.md, "Is the measurement stable?": the table this run gave
    assert spreads == {("tilelang-hopper b=128 s=8192 float16", "do_bench"): "10.33%",
                       ("tilelang-hopper b=128 s=8192 float16", "mlagate"): "3.90%",
                       ("tilelang-hopper b=64 s=1024 float16", "do_bench"): "3.55%",
                       ("tilelang-hopper b=64 s=1024 float16", "mlagate"): "1.63%",
                       ("flash_mla b=64 s=4096 float16", "do_bench"): "3.32%",
                       ("flash_mla b=64 s=4096 float16", "mlagate"): "0.56%",
                       ("triton b=128 s=2048 float16", "do_bench"): "1.85%",
                       ("triton b=128 s=2048 float16", "mlagate"): "0.26%"}


def test_noise_study_without_an_output_or_a_summary_is_a_usage_error():
    run = lab("lab.noise_study", check=False)
    assert run.returncode == 2 and "give OUT" in run.stderr


def test_spread_vs_window_reads_the_recorded_rounds():
    out = lab("lab.spread_vs_window", NOISE).stdout
    # the same rounds as noise_study's "mlagate" column: spreads 3.90, 1.63, 0.56, 0.26%
    assert "whole window:                median spread 1.10%, worst 3.90%, 2 of 4 cases <= 1%" in out
    assert re.search(r"^first  100 ms of each window: median spread [\d.]+%", out, re.M)


def test_spread_vs_window_finds_latency_that_follows_the_sm_clock(tmp_path):
    """Rounds whose latency is inversely proportional to the SM clock logged beside them: slope -1."""
    clock_mhz = [1980, 1800, 1500, 1900, 1650]
    t0, smi, results = 1_700_000_000.0, ["timestamp, clocks.current.sm [MHz]"], {}
    for case, base_ms in (("a", 0.1), ("b", 0.5)):
        rounds = {"mlagate": [], "samples": [], "wall": []}
        for mhz in clock_mhz:
            ms = base_ms * 1980 / mhz
            rounds["mlagate"].append(ms)
            rounds["samples"].append([ms] * 5)
            rounds["wall"].append([t0, t0 + 0.5])
            for k in range(5):  # nvidia-smi -lms 100 over the measurement
                stamp = datetime.datetime.fromtimestamp(t0 + 0.1 * k, tz=datetime.timezone.utc)
                smi.append(f"{stamp:%Y/%m/%d %H:%M:%S.%f}"[:-3] + f", {mhz} MHz")
            t0 += 1.0
        results[case] = rounds
    (tmp_path / "spread.json").write_text(json.dumps(results))
    (tmp_path / "smi.csv").write_text("\n".join(smi) + "\n")
    out = lab("lab.spread_vs_window", tmp_path / "spread.json", "--smi", tmp_path / "smi.csv").stdout
    found = re.search(r"10 measurements: correlation of latency with SM clock ([+-][\d.]+), slope ([+-][\d.]+)", out)
    assert found, out
    correlation, slope = map(float, found.groups())
    assert correlation <= -0.98 and -1.3 < slope < -0.8


def test_spread_vs_window_refuses_a_clock_log_for_rounds_without_wall_times():
    run = lab("lab.spread_vs_window", NOISE, "--smi", NOISE, check=False)
    assert run.returncode == 2 and "noise_study_2026-11-29.json: no wall-clock times" in run.stderr


def record_store(root: Path, slowdown: dict, commit="a" * 40) -> Path:
    """A store holding one record's cases sidecar, written as a record writes it (asv_suite.write_cases):
    four points of the gated kernel and the vendor (record budget; two of them apart only in q_len or kv_dtype), one
    baseline, one case skipped."""
    results = []
    for n, (batch, seqlen, q_len, kv) in enumerate(((64, 1024, 1, ""), (64, 1024, 2, ""), (128, 4096, 1, ""),
                                                    (128, 4096, 1, "float8_e4m3fn"))):
        for impl, base_ms in (("tilelang-hopper", 0.1), ("flash_mla", 0.09)):
            times = tuple(base_ms * (1 + batch * seqlen * q_len / 2 ** 20) * slowdown.get(impl, 1)
                          * (1 + 0.001 * (i % 5)) for i in range(40))
            windows = tuple({"samples": 20, "sm_mhz": 1980 - 10 * n - w, "power_w": 500.0, "throttle": [],
                             "kept": True} for w in range(2))
            results.append(CaseResult(Case(impl, batch, seqlen, "float16", 16, q_len, kv), RunStatus.OK,
                                      samples=Samples(times, "cuda-event", 0, 10, "NVIDIA H200", dropped=n,
                                                      budget="record", windows=windows)))
    results.append(CaseResult(Case("triton", 64, 1024, "float16", 16), RunStatus.OK,
                              samples=Samples((0.4,) * 10, "cuda-event", 0, 10, "NVIDIA H200", budget="baseline",
                                              windows=({"samples": 10, "sm_mhz": 1500, "power_w": 690.0,
                                                        "throttle": ["sw_power_cap"], "kept": False},))))
    results.append(CaseResult(Case("torch", 64, 1024, "float16", 16), RunStatus.SKIPPED,
                              "not measured: the time budget ran out"))
    root.mkdir(exist_ok=True)
    cases = root / "cases.json"
    write_cases(cases, add_metrics(results, vendor="flash_mla"))
    Store(root / "results").write_sidecar("h200", commit, "cases", json.loads(cases.read_text()))
    return root / "results"


def test_record_summary_reads_a_record_store(tmp_path):
    out = lab("lab.record_summary", record_store(tmp_path, {}), "--wall", "120").stdout
    assert "record wall time 120 s (asv included)" in out
    assert "10 cases: {'ok': 9, 'skipped': 1}" in out
    assert "  skipped by the time budget: torch: 1" in out
    assert "windows 17, dropped 1, SM clock 1500-1980 MHz" in out and "['sw_power_cap']" in out
    assert re.search(r"^  record   tilelang-hopper  n=  4  99% interval ±[\d.]+ \(±[\d.]+\)  IQR", out, re.M)
    assert re.search(r"^  baseline triton           n=  1", out, re.M)
    assert "clock control" not in out  # no env sidecar


def test_record_summary_reads_the_env_sidecar_typed(tmp_path):
    store = Store(record_store(tmp_path, {}))
    env = {"start": {"gpu": "NVIDIA H200", "arch": "sm_90", "clock_control": {"locked": False, "by": "nobody"}},
           "end": {}}
    store.write_sidecar("h200", "a" * 40, "env", env)
    assert "clock control: {'locked': False, 'by': 'nobody'}" in lab("lab.record_summary", store.root).stdout
    env["start"]["clock_control"] = "unlocked"  # not an object: refused by its key, as the gate refuses it
    bad = Store(record_store(tmp_path / "bad", {}))
    bad.write_sidecar("h200", "a" * 40, "env", env)
    no_results = Store(tmp_path / "no-results")
    no_results.write_sidecar("h200", "a" * 40, "cases", {"results": {}})
    refused = lab("lab.record_summary", no_results.root, check=False)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().endswith("not a cases sidecar (no list of results)")
    refused = lab("lab.record_summary", bad.root, check=False)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().endswith("a-env.sidecar: start.clock_control must be a JSON object, got 'unlocked'")


def test_compare_records_gives_each_implementations_change_between_two_records(tmp_path):
    first = record_store(tmp_path / "a", {})
    second = record_store(tmp_path / "b", {"tilelang-hopper": 1.05})
    out = lab("lab.compare_records", first, second).stdout
    assert "9 cases in both (9 and 9 measured)" in out
    assert re.search(r"^record   tilelang-hopper  n=  4  median \+5\.00%  median \|change\| 5\.00%", out, re.M)
    assert re.search(r"^record   flash_mla        n=  4  median \+0\.00%", out, re.M)
    quarters = re.findall(r"^quarter (\d) of the measuring order: (.*); calls not timed for the host's lead (\d+)$",
                          out, re.M)
    assert [q for q, _, _ in quarters] == ["1", "2", "3", "4"]
    assert all("flash_mla +0.00%" in text for _, text, _ in quarters)
    assert sum(int(lead) for _, _, lead in quarters) == 2 * (0 + 1 + 2 + 3)


def test_launch_profile_splits_calls_at_each_flush(importable):
    per_call = importlib.import_module("lab.launch_profile").per_call
    kernels = [("fill_kernel", 0, 2), ("main_no_split", 5, 15), ("fill_kernel", 20, 22),
               ("main_split", 23, 30), ("main_split_combine", 31, 33)]
    assert per_call(kernels) == [(10, 10, 3, ("main_no_split",)), (9, 10, 1, ("main_split", "main_split_combine"))]


def test_seesaw_fixed_cost_fits_a_line(importable):
    fit = importlib.import_module("lab.seesaw_fixed_cost").fit
    a, b = fit([(s, 12.0 + 0.03 * s) for s in (1024, 2048, 4096, 8192)])
    assert a == pytest.approx(12.0) and b == pytest.approx(0.03)


def test_sanitize_paged_skews_few_long_2k_with_the_shortest_and_longest_sequence(importable):
    from lab import sanitize_paged

    lengths = sanitize_paged.batches(64)
    assert len(lengths) == 66 and lengths[-2:] == [1, 131072]
    assert lengths[:64] == list(config.load().workloads["few-long-2k"].lengths(64))
    assert min(sanitize_paged.batches(64, 2)) == 2  # a cache holds its s_q new tokens (check_paged_inputs)


def test_the_placement_study_splits_the_spread_by_repeat_input_set_and_process(importable, tmp_path):
    from lab import placement_study as study

    # processes 1 µs apart, their sets and repeats alike: only the processes spread
    by_process = [[[0.100 + 0.001 * p] * 3 for _ in range(4)] for p in range(3)]
    assert study.spread(by_process) == {"repeats": 0.0, "sets": 0.0, "processes": pytest.approx(100 * 0.001 / 0.101)}
    # every process holds the same two sets, 2 µs apart: the sets spread, the processes not
    by_set = [[[0.100 + 0.002 * s] * 3 for s in range(2)] for _ in range(3)]
    assert study.spread(by_set) == {"repeats": 0.0, "sets": pytest.approx(100 * 0.002 / 2 ** 0.5 / 0.101),
                                    "processes": 0.0}
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"case": "tilelang-seesaw h=16 b=64 s=4096 float16", "medians_ms": by_process,
                               "addresses": [["0x1"] * 4] * 3}))
    out = lab("lab.placement_study", "--summary", run).stdout
    assert "3 processes x 4 input sets x 3 repeats" in out and "process 3: 102.00/102.00/102.00" in out
    assert out.rstrip().endswith("sd, % of the median: repeats 0.000, sets 0.000, processes 0.990")


def test_the_budget_study_pools_measurements_and_compares_windows_with_measurements(importable, tmp_path):
    from lab import budget_study as study

    # 8 measurements of 2 windows x 3 samples; each measurement 1% off the next, its windows alike: the offset is
    # the measurement's own (windows agree, measurements do not), and pooling pairs keeps only the pair means' spread
    offsets = [1.00, 1.01] * 4
    samples = [[0.1 * o] * 6 for o in offsets]
    run = {"case": "tilelang-seesaw h=16 b=64 s=4096 float16", "windows": 2, "samples_ms": samples,
           "window_samples": [[3, 3]] * 8, "window_sm_mhz": [[1980.0, 1980.0]] * 8}
    sd1, groups1 = study.pooled_spread(samples, 1)
    assert groups1 == 8 and sd1 == pytest.approx(100 * 0.0005 * (8 / 7) ** 0.5 / 0.1005, rel=1e-3)
    sd2, groups2 = study.pooled_spread(samples, 2)
    assert groups2 == 4 and sd2 == pytest.approx(0.0, abs=1e-9)  # each pair pools 1.00 and 1.01: the same median
    within, independent, between = study.window_spread(run)
    assert within == 0.0 and independent == 0.0 and between == pytest.approx(sd1, rel=1e-3)
    # windows of unequal sizes are cut where the timer's window counts say
    uneven = dict(run, samples_ms=[[0.1, 0.1, 0.2]] * 8, window_samples=[[2, 1]] * 8, windows=2)
    assert study.window_spread(uneven)[0] == pytest.approx(100 * 0.1 / 2 ** 0.5 / 0.1)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    out = lab("lab.budget_study", "--summary", path).stdout
    assert "8 measurements at the record budget (2 windows each)" in out
    assert re.search(r"^\s+2\s+4\s+4\s+0\.000\s+0\.00\s+0\.71$", out, re.M), out
    assert "measurements' means scatter 0.53" in out


def test_the_call_offset_study_reads_each_mode_over_rounds_and_one_call_within_a_round(importable, tmp_path):
    from lab import call_offset_study as study

    assert list(study.modes(10)) == ["1x10", "2x5", "5x2", "10x1", "1x10 after idle", "10x1 no warm-up",
                                     "10x1 no warm-up, between"]
    assert study.modes(10)["5x2"] == (5, 2, 0, True, False)
    assert study.modes(10)["1x10 after idle"] == (1, 10, None, True, False)
    assert study.modes(10)["10x1 no warm-up, between"] == (10, 1, 0, False, True)
    # one call per round, its offset alternating by 1%: the rounds spread; no within-round figure
    one = [[[0.100 * o] * 4] for o in (1.00, 1.01) * 3]
    sd, within = study.spread(one)
    assert sd == pytest.approx(100 * 0.0005 * (6 / 5) ** 0.5 / 0.1005, rel=1e-3) and math.isnan(within)
    # two calls per round, 1% apart in every round: the pooled median never moves, one call's does
    two = [[[0.100] * 4, [0.101] * 4] for _ in range(6)]
    sd, within = study.spread(two)
    assert sd == 0.0 and within == pytest.approx(100 * 0.001 / 2 ** 0.5 / 0.1005, rel=1e-3)
    run = {"case": "tilelang-seesaw h=16 b=64 s=4096 float16", "rounds": 6, "windows": 2, "idle_ms": 200.0,
           "modes": {"1x2": [1, 2, 0], "2x1": [2, 1, 0]}, "samples_ms": {"1x2": one, "2x1": two}}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    out = lab("lab.call_offset_study", "--summary", path).stdout
    assert "6 rounds, 2 windows per mode and round" in out
    assert re.search(r"^\s+1x2\s+1\s+0\.545\s+1\.00\s+1\.00\s+—$", out, re.M), out
    assert re.search(r"^\s+2x1\s+2\s+0\.000\s+0\.00\s+0\.71\s+0\.704$", out, re.M), out


@pytest.mark.parametrize("name", ["placement_study", "budget_study", "call_offset_study"])
def test_a_case_study_without_out_or_summary_refuses_before_measuring(name):
    run = lab(f"lab.{name}", check=False)
    assert run.returncode == 2 and "give OUT.json (or --summary OUT.json)" in run.stderr


def test_kv_dtype_table_reads_both_caches_and_the_vendor_from_a_bench_csv(tmp_path):
    """On the H200's CSV (docs/measurements.md, 2026-12-07): per point, both caches' µs, their ratio, the vendor."""
    csv_path = ROOT / "docs" / "bench" / "h200-2026-12-07-fp8-quick.csv"
    out = lab("lab.kv_dtype_table", csv_path).stdout
    row = "| dense | 1 | 64 | 16 | 4096 | bfloat16 / float8_e4m3fn | 87.6 | 88.2 | 0.99x | flashinfer (245.3) | 2.78 |"
    assert row in out
    assert out.count("float8_e4m3fn |") == 12
    assert out.rstrip().endswith("fp8 faster than the 16-bit cache at 1 of 12 points; fp8 over 16-bit 0.82-1.01x; "
                                 "TileLang over the vendor's fp8 2.06-3.57x")
    none = tmp_path / "bf16.csv"  # no fp8 rows: said, not an empty table
    none.write_text("".join(csv_path.read_text().splitlines(keepends=True)[:3]))
    run = lab("lab.kv_dtype_table", none, check=False)
    assert run.returncode == 1 and "no fp8-cache rows of tilelang-hopper" in run.stderr
    for name, text in (("missing.csv", None), ("no-kv-dtype.csv", "impl,status,median_ms\nx,ok,1\n"),
                       ("cut.csv", csv_path.read_text().replace(",0.0881", ",0.08x", 1))):
        bad = tmp_path / name
        if text is not None:
            bad.write_text(text)
        run = lab("lab.kv_dtype_table", bad, check=False)
        assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
        assert run.stderr.startswith(f"{bad}: not an `mlagate bench --out` CSV ("), run.stderr

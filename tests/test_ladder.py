"""`mlagate ladder` on a CPU: the calibration arithmetic, the patch (which really lowers, with its spin, for
sm_90a and gfx942), the table, the throw-away commits in a temporary repository, and the whole pipeline with
the GPU parts stood in for. The stand-in GPU is a clock: a kernel launch adds its case's time plus SLOPE per
cycle its commit's kernel file spins, read by running the very block the ladder appended to that file."""

import ast
import dataclasses
import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from mlagate import cli, config, gitops
from mlagate.case import Case
from mlagate.decide.verdict import CaseVerdict, Verdict
from mlagate.decide.vocabulary import Kind, Note, Outcome, Status
from mlagate.ladder import report
from mlagate.ladder import rules as ladder
from mlagate.ladder import run as pipeline

ROOT = Path(__file__).resolve().parent.parent
CFG = config.load()
KERNEL = gitops.git("show", "HEAD:kernels/mla_decode.py", strip=False)
CASES = tuple(c for c in CFG.cases("quick", ["tilelang-hopper"], "cuda") if not c.paged and c.q_len == 1
              and c.kv_dtype == c.dtype)  # the ladder spins 16-bit caches only
UNSPUN = dataclasses.replace(CASES[0], workload="uniform-paged@946e5f23")
TIME = {c.key: (100e-6 if c.batch == 64 else 160e-6) for c in CASES}  # seconds per call
SLOPE = 1 / 1.6e9  # seconds per spun cycle: a 1.6 GHz clock


# -- the stand-in GPU ------------------------------------------------------------------------

class Clock:
    def __init__(self):
        self.spent = []

    def run(self, fn) -> float:
        """The time fn spends on the stand-in GPU."""
        self.spent = []
        fn()
        return sum(self.spent)


@pytest.fixture
def clock():
    return Clock()


def appended(block: str) -> dict:
    """A patch's appended block run as the kernel file runs it, on a stand-in attend_macro: its namespace."""
    from mlagate.kernels.mla_decode import Shape

    namespace = {"attend_macro": lambda *args, **kwargs: "the original attend", "T": None, "Shape": Shape}
    exec(compile(block, "appended block", "exec"), namespace)
    return namespace


def spin_cycles(block: str, case: Case) -> int:
    """Run a patch's appended block as the kernel file runs it, against a stand-in attend_macro: the cycles its
    wrapped attend_macro spins in the kernel of ``case`` (0: it returns the original macro unchanged)."""
    from mlagate.kernels.mla_decode import Shape

    namespace = appended(block)
    shape = Shape(batch=case.batch, seqlen=case.seqlen, heads=case.heads, dtype=case.dtype)
    config = SimpleNamespace(name=case.impl.split("-", 1)[1])
    cycles = namespace["ladder_cycles"](shape, config) if "ladder_cycles" in namespace else None
    if not cycles:
        assert namespace["attend_macro"](shape, config, 64, 2, None, masked=False, empty_splits=False) == \
            "the original attend"
    return cycles or 0


def call_time(block: str, case: Case) -> float:
    """One decode call of ``case`` under a kernel file with ``block`` appended, on the stand-in GPU."""
    return TIME.get(case.key, 50e-6) + spin_cycles(block, case) * SLOPE


def fake_alternate(clock, calls):
    def alternate(launches, timing, rounds, budget="confirm", device=None):
        calls.append((list(launches), rounds, budget))
        out = {}
        for name, launch in launches.items():
            t = clock.run(launch)
            out[name] = (t * 0.999, t, t * 1.001)  # the median is the clock's time
        return out

    return alternate


# -- the arithmetic --------------------------------------------------------------------------

def test_steps_parse_in_order_and_bad_ones_name_the_option():
    assert ladder.parse_steps("0,1,2,3,5,8") == (0, 1, 2, 3, 5, 8)
    assert ladder.parse_steps(" 2.5, 0 ") == (2.5, 0)
    for bad in ("1,x", "-1", "60", "1,1", "", "nan"):
        with pytest.raises(ValueError, match="--steps"):
            ladder.parse_steps(bad)
    assert [ladder.step_name(s) for s in (0.0, 5.0, 2.5)] == ["0", "5", "2.5"]


def test_cycles_come_from_the_measured_slope():
    slope = ladder.fit(100e-6, 100e-6 + 12000 * SLOPE, 12000)
    assert slope == pytest.approx(SLOPE)
    assert ladder.cycles_for(5, 100e-6, slope) == 8000  # 5 µs at 1.6 GHz
    assert ladder.cycles_for(1, 100e-6, slope) == 1600  # no launch overhead: a true 1% step
    with pytest.raises(ValueError, match="added no time"):
        ladder.fit(100e-6, 100e-6, 12000)


def test_the_patch_names_the_attributes_the_real_kernel_has():
    from mlagate.kernels import mla_decode

    assert {"batch", "seqlen", "heads", "dtype"} <= {f.name for f in dataclasses.fields(mla_decode.Shape)}
    assert "name" in {f.name for f in dataclasses.fields(mla_decode.TileConfig)}
    for case in CASES:
        assert ladder.shape_key(case.key)[0] in mla_decode.CONFIGS


def test_the_patch_spins_listed_shapes_only_and_step_0_is_a_comment():
    listed, other = CASES[0], Case("tilelang-hopper", 32, 4096, "float16", 16)
    text = ladder.patched(KERNEL, 5, {ladder.shape_key(listed.key): 4000}, "run1")
    assert text.startswith(KERNEL) and "run1" in text and "step 5%" in text
    compile(text, "kernels/mla_decode.py", "exec")
    block = text[len(KERNEL):]
    assert call_time(block, listed) == pytest.approx(TIME[listed.key] + 4000 * SLOPE)
    assert call_time(block, other) == pytest.approx(50e-6)
    from mlagate.kernels.mla_decode_paged import PagedShape

    paged = PagedShape(batch=64, heads=16, max_pages=64, page_size=64)
    assert appended(block)["ladder_cycles"](paged, SimpleNamespace(name="hopper")) is None
    comment = ladder.patched(KERNEL, 0, {}, "run1")
    added = comment[len(KERNEL):].splitlines()
    assert len(added) == 1 and added[0].startswith("# mlagate ladder run1: step 0%")


def _lowered(module, case: Case, arch: str) -> str:
    import re

    shape = module.Shape(batch=case.batch, seqlen=case.seqlen, heads=case.heads, dtype=case.dtype)
    source = module.lower(shape, module.CONFIGS[case.impl.split("-", 1)[1]], arch)
    return re.sub(r"workspace(_\d+)?", "workspace", source)  # TileLang 0.1.15 numbers these run to run


@pytest.mark.slow
@pytest.mark.parametrize("arch, family", [("sm_90", "hopper"), ("gfx942", "cdna3")])
def test_the_patched_kernel_file_lowers_with_its_spin_and_other_shapes_unchanged(tmp_path, arch, family):
    """The real contract: the step commit's kernel file, imported as asv and the re-measure import it, lowers
    the listed shape with a clock64 spin of its cycles at the start of the block, and any other shape to the
    very source base lowers (CUDA sm_90a and HIP gfx942)."""
    import importlib.util
    import sys

    from mlagate.kernels import mla_decode

    listed = Case(f"tilelang-{family}", 64, 4096, "float16", 16)
    other = Case(f"tilelang-{family}", 32, 1024, "bfloat16", 16)
    text = ladder.patched(KERNEL, 3, {ladder.shape_key(listed.key): 12345}, "run1")
    file = tmp_path / "mla_decode_ladder_step.py"
    file.write_text(text)
    spec = importlib.util.spec_from_file_location(file.stem, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[file.stem] = module  # dataclasses look their module up while the file executes
    try:
        spec.loader.exec_module(module)
        spun, unchanged = _lowered(module, listed, arch), _lowered(module, other, arch)
    finally:
        del sys.modules[file.stem]
    assert "clock64()" in spun and "12345" in spun
    assert spun.index("clock64()") < spun.index("for (int")  # before the first loop of the block
    assert _lowered(mla_decode, other, arch) == unchanged and "clock64" not in unchanged


def step_doc(rep, step, injected, recorded, confirmed, status):
    return {"rep": rep, "step": step, "commit": "c" * 40, "outcome": "pass", "exit_code": 0, "errors": [],
            "cases": [{"case": list(CASES[0].key), "label": CASES[0].label(), "cycles": 1,
                       "injected": injected, "recorded": recorded, "confirmed": confirmed, "confirm_p": None,
                       "status": status, "reasons": []}]}


def test_the_table_and_summary_measure_errors_in_percentage_points():
    runs = [step_doc(1, 0, 0.0, 0.002, None, "pass"), step_doc(2, 0, 0.0, -0.004, None, "pass"),
            step_doc(1, 5, 0.05, 0.058, 0.052, "regression"), step_doc(2, 5, 0.05, 0.049, 0.047, "regression"),
            step_doc(1, 1, 0.015, 0.013, 0.016, "error")]
    table = ladder.rows(runs)
    assert [round(r["recorded_pp"], 6) for r in table] == [0.2, 0.4, 0.8, 0.1, 0.2]
    assert table[0]["confirmed_pp"] is None and table[2]["confirmed_pp"] == pytest.approx(0.2)
    by_step = {s["step"]: s for s in ladder.summary(table, (0, 1, 5))}
    assert (by_step[0]["pass"], by_step[0]["fail"], by_step[0]["max_confirmed_pp"]) == (2, 0, None)
    assert by_step[0]["max_recorded_pp"] == pytest.approx(0.4) and by_step[0]["within"] == 2
    assert (by_step[5]["fail"], by_step[5]["measured"], by_step[5]["within"]) == (2, 4, 3)
    assert by_step[5]["max_recorded_pp"] == pytest.approx(0.8) and by_step[5]["max_confirmed_pp"] == pytest.approx(0.3)
    assert by_step[1]["other"] == 1


def test_a_gate_verdict_becomes_a_step_result_and_a_missing_case_says_so():
    calibrated = {c.label(): {"steps": {"5": {"cycles": 5600, "injected": 0.051}}}
                  for c in CASES}
    flagged = CaseVerdict(CASES[0].key, Status.REGRESSION, reasons=[Note(Kind.LATENCY, "slower")], change=0.049,
                          flagged=True, confirmation={"change": 0.053, "p_value": 1e-9, "agrees": True})
    cleared = CaseVerdict(UNSPUN.key, Status.PASS, change=0.013, flagged=True, confirmation={"change": -0.002})
    verdict = Verdict(Outcome.REGRESSION, [flagged, cleared], base="b", head="h")
    result = ladder.step_result(verdict, CASES, calibrated, 2, 5.0, "h" * 40)
    assert result["untouched"] == [{"case": list(UNSPUN.key), "label": UNSPUN.label(), "recorded": 0.013,
                                    "confirmed": -0.002, "status": "pass", "clock": None}]
    first, second = result["cases"]
    assert (result["rep"], result["exit_code"], result["outcome"]) == (2, 1, "regression")
    assert (first["injected"], first["recorded"], first["confirmed"], first["status"]) == (0.051, 0.049, 0.053,
                                                                                           "regression")
    assert first["reasons"] == ["latency"] and first["cycles"] == 5600
    assert (second["recorded"], second["status"]) == (None, "missing")


def test_a_saved_calibration_matches_only_the_same_ladder():
    wanted = {"base": "a", "machine": "m", "grid": "quick", "impls": ("x",), "cases": [("c", 1)], "steps": (0, 5)}
    saved = json.loads(json.dumps({**wanted, "reps": 3}))
    assert ladder.mismatch(saved, wanted) == []
    assert ladder.mismatch({**saved, "base": "b", "steps": [0, 5, 8]}, wanted) == ["base", "steps"]


def test_the_pure_parts_import_nothing_from_measure_store_or_report():
    for module, banned in (("ladder/rules.py", ("mlagate.measure", "mlagate.store", "mlagate.report")),
                           ("ladder/report.py", ("mlagate.ladder.run", "mlagate.gate", "mlagate.bisect"))):
        tree = ast.parse((ROOT / "mlagate" / module).read_text())
        names = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        names += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        assert not [n for n in names if n and n.startswith(banned)], module


# -- the throw-away commits, in a temporary repository ----------------------------------------------

def sh(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


# The test repository holds the pipelined kernel only; the ladder's default, the platform's gated config, is the
# seesaw (tests/test_seesaw_cpu.py runs the ladder's seesaw path).
PIPELINED = ("--impl", "tilelang-hopper", "--impl", "flash_mla")


@pytest.fixture
def repo(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "kernels").mkdir(parents=True)
    (repo / "kernels" / "mla_decode.py").write_text(KERNEL)
    (repo / "README.md").write_text("readme\n")
    sh(repo.parent, "init", "-q", str(repo))
    sh(repo, "add", "-A")
    sh(repo, "-c", "user.name=t", "-c", "user.email=t@localhost", "-c", "commit.gpgsign=false", "commit", "-qm", "base")
    monkeypatch.setattr(gitops, "REPO", repo)
    # the ladder over one query token's cases (CASES): its counts below are of those
    raw = yaml.safe_load(config.DEFAULT_PATH.read_text())
    raw["grid"]["quick"]["q_len"] = [1]
    (tmp_path / "perf.yml").write_text(yaml.safe_dump(raw))
    monkeypatch.setattr(config, "DEFAULT_PATH", tmp_path / "perf.yml")
    return repo


def calibration_for(cycles: dict) -> dict:
    return {"run_id": "20261201T000000Z-test", "cases_calibrated": {
        c.label(): {"steps": {ladder.step_name(s): {"cycles": cycles[s][i], "injected": 0}
                              for s in cycles}} for i, c in enumerate(CASES)}}


def test_step_commits_sit_on_base_change_only_the_kernel_and_leave_the_checkout_alone(repo, tmp_path):
    base = gitops.resolve("HEAD")
    hooks = repo / ".git" / "hooks"
    for hook in ("pre-commit", "post-checkout", "commit-msg"):  # a user's hooks must not run, nor stop it
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {tmp_path}/{hook}-ran\nexit 1\n")
        (hooks / hook).chmod(0o755)
    (repo / "README.md").write_text("the user's unsaved edit\n")
    (repo / "staged.txt").write_text("staged\n")
    sh(repo, "add", "staged.txt")
    before = (sh(repo, "status", "--porcelain"), sh(repo, "diff", "--cached"), sh(repo, "rev-parse", "HEAD"),
              (repo / "README.md").read_text(), (repo / "kernels" / "mla_decode.py").read_text())
    plan = pipeline.Plan(base, (0.0, 5.0), 1, "quick", ("tilelang-hopper",), "m", tmp_path / "out", CASES)
    calibration = calibration_for({0.0: (None, None), 5.0: (5600, 9000)})
    commits = pipeline.step_commits(plan, calibration["run_id"], calibration["cases_calibrated"])

    for step, commit in commits.items():
        assert sh(repo, "rev-list", "--parents", "-n", "1", commit).split()[1:] == [base]
        assert sh(repo, "diff", "--name-only", base, commit).split() == ["kernels/mla_decode.py"]
        assert sh(repo, "rev-parse", f"refs/mlagate/ladder/20261201T000000Z-test/step-{ladder.step_name(step)}"
                  ).strip() == commit
        subject = sh(repo, "log", "-1", "--format=%s", commit)
        assert "20261201T000000Z-test" in subject and f"step {ladder.step_name(step)}%" in subject
    text = sh(repo, "show", f"{commits[5.0]}:kernels/mla_decode.py")
    assert text.startswith(KERNEL)
    compile(text, "kernels/mla_decode.py", "exec")
    block = text[len(KERNEL):]
    assert call_time(block, CASES[0]) == pytest.approx(TIME[CASES[0].key] + 5600 * SLOPE)
    assert call_time(block, CASES[1]) == pytest.approx(TIME[CASES[1].key] + 9000 * SLOPE)
    assert call_time(block, Case("tilelang-hopper", 64, 2048, "float16", 16)) == pytest.approx(50e-6)
    assert sh(repo, "show", f"{commits[0.0]}:kernels/mla_decode.py")[len(KERNEL):].count("\n") == 1

    again = pipeline.step_commits(plan, calibration["run_id"], calibration["cases_calibrated"])
    assert again == commits  # made once, found again by their refs
    assert (sh(repo, "status", "--porcelain"), sh(repo, "diff", "--cached"), sh(repo, "rev-parse", "HEAD"),
            (repo / "README.md").read_text(), (repo / "kernels" / "mla_decode.py").read_text()) == before
    assert sh(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert not list(tmp_path.glob("*-ran"))


# -- the whole pipeline, GPU parts stood in for ------------------------------------------------------

@pytest.fixture
def gpu(repo, clock, monkeypatch):
    """Every GPU part stood in for, against the clock; returns what each was asked to do."""
    from mlagate import gate
    from mlagate.measure import environment, harness, interleaved, precompile
    from mlagate.store import record, results

    seen = SimpleNamespace(records=[], gates=[], alternates=[], launched=[], compiled=[], fail_gate_at=None)
    recorded = set()

    class Store:
        def __init__(self, root):
            self.root = Path(root)

        def load(self, machine, commit):
            return SimpleNamespace(entries=lambda bench: {}) if (self.root, machine, commit) in recorded else None

        def read_sidecar(self, machine, commit, kind):
            return None  # no windows: the untouched cases' clock changes read nothing

    def fake_record(rev, *, results, machine, grid="full", impls=None, echo=print, **_):
        seen.records.append((Path(results).parent.name, rev, grid, tuple(impls)))
        recorded.add((Path(results), machine, rev))

    def fake_gate(cfg, *, base_rev, head_rev, results, out_dir, machine=None, confirm=False, grid="full", **_):
        rep = Path(results).parent.name
        seen.gates.append((rep, head_rev))
        if seen.fail_gate_at and seen.fail_gate_at[0] == rep and \
                seen.fail_gate_at[1] in gitops.git("log", "-1", "--format=%s", head_rev):
            raise RuntimeError("the device call ran out of time")
        assert confirm and {(Path(results), machine, c) for c in (base_rev, head_rev)} <= recorded
        block = gitops.git("show", f"{head_rev}:kernels/mla_decode.py", strip=False)[len(KERNEL):]
        noise = 0.001 * int(rep.removeprefix("rep"))
        cases = []
        for case in CASES:
            change = call_time(block, case) / TIME[case.key] - 1 + noise
            flagged = change >= cfg.gate.screen
            confirmed = change + 0.0007 if flagged else None
            slow = (confirmed if flagged else change) >= cfg.gate.threshold
            cases.append(CaseVerdict(case.key, Status.REGRESSION if slow else Status.PASS, change=change,
                                     flagged=flagged, confirmation={"change": confirmed, "p_value": 1e-9}
                                     if flagged else None))
        cases.append(CaseVerdict(UNSPUN.key, Status.PASS, change=noise))  # a gated kernel no step reaches
        outcome = Outcome.REGRESSION if any(c.status is Status.REGRESSION for c in cases) else Outcome.PASS
        return gate.GateOutput(Verdict(outcome, cases, base=base_rev, head=head_rev), "", {})

    monkeypatch.setattr(environment, "platform", lambda: "cuda")
    monkeypatch.setattr(environment, "device", lambda: "cpu")
    monkeypatch.setattr(record, "gpu_available", lambda: True)
    monkeypatch.setattr(record, "record", fake_record)
    monkeypatch.setattr(results, "Store", Store)
    monkeypatch.setattr(gate, "run_gate", fake_gate)
    monkeypatch.setattr(interleaved, "alternate", fake_alternate(clock, seen.alternates))
    monkeypatch.setattr(harness, "Inputs", lambda case, device: None)

    def launch_at(repo, commit, case, inputs):  # the commit's own kernel file decides what a call spends
        block = gitops.git("show", f"{commit}:kernels/mla_decode.py", strip=False, repo=repo)[len(KERNEL):]
        seen.launched.append(commit)
        return lambda: clock.spent.append(call_time(block, case))

    monkeypatch.setattr(interleaved, "launch_at", launch_at)

    def in_processes(fn, items, jobs, stop=None):  # the compiles ahead: which, and how many launches came before
        assert fn is interleaved.compile_at and jobs >= 2
        seen.compiled.append((len(seen.launched), items))
        yield from ((item, None) for item in items)

    monkeypatch.setattr(precompile, "in_processes", in_processes)
    return seen


def test_the_ladder_calibrates_commits_records_gates_and_tabulates(gpu, repo, tmp_path, capsys):
    out = tmp_path / "out"
    base = gitops.resolve("HEAD")
    assert cli.main(["ladder", "--base", "HEAD", "--reps", "2", "--out", str(out), "--machine", "m", *PIPELINED]) == 0
    doc = json.loads((out / "summary" / "ladder.json").read_text())
    assert (out / "summary" / "ladder.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    assert (out / "summary" / "ladder.md").read_text() in printed
    assert sorted(p.name for p in (out / "summary").iterdir()) == [".mlagate-output", "ladder.json", "ladder.md",
                                                                    "ladder.png"]  # one set, swapped in whole

    cal = json.loads((out / "calibration.json").read_text())["cases_calibrated"]
    b64, b128 = (cal[c.label()] for c in CASES)
    assert b64["slope_s_per_cycle"] == pytest.approx(SLOPE) and b128["slope_s_per_cycle"] == pytest.approx(SLOPE)
    assert b64["probe_cycles"] == ladder.probe_cycles(100e-6)
    assert b64["steps"]["5"]["cycles"] == 8000 and b64["steps"]["5"]["injected"] == pytest.approx(0.05, abs=1e-4)
    assert b64["steps"]["1"] == {"cycles": 1600, "injected": pytest.approx(0.01, abs=1e-4)}  # a true 1%
    assert b128["steps"]["1"]["injected"] == pytest.approx(0.01, abs=1e-4)
    assert b64["steps"]["0"] == {"cycles": None, "injected": 0.0}
    assert all(rounds == pipeline.CALIBRATION_ROUNDS for names, rounds, _ in gpu.alternates if len(names) > 1)
    probe = json.loads((out / "calibration.json").read_text())["probe_commit"]
    assert sh(repo, "rev-parse", f"refs/mlagate/ladder/{doc['run_id']}/probe").strip() == probe
    # each step alternated with base on its own, as the gate's re-measure times a change
    assert [names for names, _, _ in gpu.alternates] == [["base"]] * 2 + [["base", "probe"]] * 2 + \
        [["base", "step"]] * (2 * 5)
    assert list(b64["verify_medians_s"]) == ["1", "2", "3", "5", "8"]
    assert set(gpu.launched) == {base, probe, *doc["commits"].values()} - {doc["commits"]["0"]}
    # every kernel compiled in parallel before its first launch: base, then the probe, then the spun steps
    spun = [doc["commits"][s] for s in ("1", "2", "3", "5", "8")]
    assert [[commit for _, commit, _ in items] for _, items in gpu.compiled] == [
        [base] * 2, [probe] * 2, [c for c in spun for _ in CASES]]
    assert all(r == repo and case in CASES for _, items in gpu.compiled for r, _, case in items)
    assert all(gpu.launched.index(commit) >= before for before, items in gpu.compiled for _, commit, _ in items)

    impls = ("tilelang-hopper", "flash_mla")  # the vendor kernel too: the gate needs its ratio
    assert len(gpu.records) == 2 * (1 + 6)
    assert [r for r in gpu.records if r[1] == base] == [("rep1", base, "quick", impls), ("rep2", base, "quick", impls)]
    assert len(gpu.gates) == 12 and len(set(doc["commits"].values())) == 6
    refs = sh(repo, "for-each-ref", "--format=%(objectname)", "refs/mlagate/ladder/").split()
    assert sorted(refs) == sorted([*doc["commits"].values(), probe])

    assert len(doc["table"]) == 2 * 6 * 2
    assert max(r["recorded_pp"] for r in doc["table"]) == pytest.approx(0.2, abs=1e-6)  # the gate's noise, rep 2
    summary = {s["step"]: s for s in doc["summary"]}
    assert [summary[s]["fail"] for s in (0, 1, 2, 3, 5, 8)] == [0, 0, 0, 4, 4, 4]
    assert summary[2]["max_confirmed_pp"] is not None and summary[1]["max_confirmed_pp"] is None  # 1%: not flagged
    md = (out / "summary" / "ladder.md").read_text()
    assert "| 2 | 8% | tilelang-hopper h=16 b=128 s=4096 float16 |" in md and "†" not in md
    assert [(u["label"], u["n"], u["within"]) for u in doc["untouched"]] == [(UNSPUN.label(), 12, 12)]
    assert doc["untouched"][0]["max_pp"] == pytest.approx(0.2) and "noise floor" in md


def test_by_default_the_ladder_records_the_gated_config_and_every_vendor_its_ratios_need(tmp_path, monkeypatch):
    """The quick grid holds fp8 caches, whose ratio is FlashInfer's: without it every step's gate would fail.
    (This checkout's HEAD: it has the seesaw's kernel file.)"""
    from mlagate.measure import environment

    monkeypatch.setattr(environment, "platform", lambda: "cuda")
    p = pipeline.plan(CFG, base_rev="HEAD", machine="m", out=str(tmp_path / "out"))
    assert p.impls == ("tilelang-seesaw", "flash_mla", "flashinfer")
    assert {CFG.platform("cuda").vendor_for(c.kv_dtype).impl for c in CFG.cases("quick", ["tilelang-seesaw"], "cuda")
            } == {"flash_mla", "flashinfer"}


def test_a_killed_ladder_resumes_without_redoing_finished_steps(gpu, repo, tmp_path):
    out = tmp_path / "out"
    args = ["ladder", "--base", "HEAD", "--reps", "2", "--steps", "0,3,5", "--out", str(out), "--machine", "m",
            *PIPELINED]
    gpu.fail_gate_at = ("rep2", "step 3%")
    assert cli.main(args) == 2  # the gate of rep 2, step 3 dies: exit 2; rep 1 and rep 2's step 0 are kept
    assert sorted(p.name for p in (out / "rep2").glob("step*.json")) == ["step0.json"]
    assert len(list((out / "rep1").glob("step*.json"))) == 3 and not (out / "summary" / "ladder.json").exists()
    first_alternates, first_refs = len(gpu.alternates), sh(repo, "for-each-ref", "refs/mlagate/ladder/")

    gpu.fail_gate_at, gpu.records[:], gpu.gates[:] = None, [], []
    assert cli.main(args) == 0
    assert len(gpu.alternates) == first_alternates  # the calibration is reused
    assert sh(repo, "for-each-ref", "refs/mlagate/ladder/") == first_refs  # so are the commits
    commits = json.loads((out / "summary" / "ladder.json").read_text())["commits"]
    assert [r[:2] for r in gpu.records] == [("rep2", commits["5"])]  # step 3 was recorded before its gate died
    assert gpu.gates == [("rep2", commits["3"]), ("rep2", commits["5"])]
    assert len(json.loads((out / "summary" / "ladder.json").read_text())["table"]) == 2 * 3 * 2


@pytest.mark.parametrize("extra, option", [
    (["--steps", "0,1,x"], "--steps"), (["--steps", "-1"], "--steps"), (["--reps", "0"], "--reps"),
    (["--reps", "two"], "--reps"), (["--impl", "tilelang-hopper", "--impl", "nope"], "--impl"),
    (["--impl", "flash_mla"], "--impl"),
    (["--base", "no-such-rev"], "--base")])
def test_bad_input_exits_2_naming_the_option_and_writes_nothing(gpu, tmp_path, capsys, extra, option):
    out = tmp_path / "out"
    args = ["ladder", "--base", "HEAD", "--machine", "m", "--out", str(out), *extra]
    assert cli.main(args) == 2
    assert option in capsys.readouterr().err
    assert not out.exists() and gpu.records == [] and gpu.alternates == []


@pytest.mark.parametrize("kernel, why", [
    ("def program(p):\n    pass\n", "defines no attend_macro"),  # before bd0bbdf: the attend lived inside program
    (KERNEL.replace("acc_o, logsum, scores_max):", "acc_o, logsum):"), "whose arguments are not")])
def test_a_base_whose_kernel_the_step_cannot_wrap_is_refused_before_anything(gpu, repo, tmp_path, capsys, kernel,
                                                                            why):
    assert ladder.unpatchable(KERNEL) is None and why in ladder.unpatchable(kernel)
    (repo / "kernels" / "mla_decode.py").write_text(kernel)
    sh(repo, "-c", "user.name=t", "-c", "user.email=t@localhost", "-c", "commit.gpgsign=false", "commit", "-qam",
       "an old kernel")
    out = tmp_path / "out"
    assert cli.main(["ladder", "--base", "HEAD", "--machine", "m", "--out", str(out), *PIPELINED]) == 2
    err = capsys.readouterr().err
    assert "--base" in err and why in err
    assert not out.exists() and gpu.records == [] and gpu.alternates == []
    assert sh(repo, "for-each-ref", "refs/mlagate").strip() == ""  # no probe or step commit was made


def test_no_gpu_exits_2_and_writes_nothing(gpu, tmp_path, capsys, monkeypatch):
    from mlagate.store import record

    monkeypatch.setattr(record, "gpu_available", lambda: False)
    out = tmp_path / "out"
    assert cli.main(["ladder", "--base", "HEAD", "--machine", "m", "--out", str(out), *PIPELINED]) == 2
    assert "no GPU" in capsys.readouterr().err and not out.exists() and gpu.alternates == []


@pytest.mark.parametrize("saved", [{"base": "0" * 40}, {"version": 1}])  # another ladder; the old spin's
def test_an_out_folder_of_another_ladder_is_refused(gpu, repo, tmp_path, capsys, saved):
    out = tmp_path / "out"
    out.mkdir()
    base = gitops.resolve("HEAD")
    identity = {"base": base, "machine": "m", "grid": "quick", "impls": ["tilelang-hopper", "flash_mla"],
                "cases": [list(c.key) for c in CASES], "steps": [0, 1, 2, 3, 5, 8]}
    (out / "calibration.json").write_text(json.dumps({"version": pipeline.CALIBRATION_VERSION, **identity,
                                                      "run_id": "x", **saved}))
    assert cli.main(["ladder", "--base", "HEAD", "--out", str(out), "--machine", "m", *PIPELINED]) == 2
    assert "--out" in capsys.readouterr().err and [p.name for p in out.iterdir()] == ["calibration.json"]
    assert gpu.alternates == []


def test_the_report_marks_unconfirmed_steps(tmp_path):
    runs = [step_doc(1, 1, 0.015, 0.013, None, "pass"), step_doc(1, 5, 0.05, 0.052, 0.049, "regression")]
    table = ladder.rows(runs)
    doc = {"run_id": "r", "base": "b" * 40, "reps": 1, "grid": "quick", "machine": "m", "steps_run": runs,
           "gate": {"screen": 0.0125, "threshold": 0.025}, "table": table, "summary": ladder.summary(table, (1, 5))}
    md = report.markdown(doc)
    assert f"| 1 | 1% | {CASES[0].label()} | +1.50% | +1.30% | – | – | 0.20 | – | – | ✅ pass |" in md
    assert f"| 1 | 5% | {CASES[0].label()} | +5.00% | +5.20% | +4.90% | – | 0.20 | 0.10 | – | ❌ regression |" in md
    assert "| 5% | 1 | 0 | 1 | 0 | 0 | +5.00% | 0.20 | 0.10 | 2 of 2 |" in md
    unsure = [{**step_doc(1, 3, 0.025, 0.026, 0.025, "unsure"), "cases": [
        {**step_doc(1, 3, 0.025, 0.026, 0.025, "unsure")["cases"][0], "rounds": 30, "detectable": 0.0012}]}]
    table = ladder.rows(unsure)
    md = report.markdown({**doc, "steps_run": unsure, "table": table, "summary": ladder.summary(table, (3,))})
    assert f"| 1 | 3% | {CASES[0].label()} | +2.50% | +2.60% | +2.50% | 30 | 0.10 | 0.00 | 0.12% | ❔ unsure |" in md
    assert "| 3% | 1 | 0 | 0 | 1 | 0 | +2.50% |" in md
    report.plot_png(tmp_path / "l.png", doc)
    assert (tmp_path / "l.png").read_bytes()[:4] == b"\x89PNG"


def test_untouched_cases_give_the_noise_floor_and_the_report_shows_it():
    def untouched(recorded, confirmed=None, status="pass"):
        return {"case": list(UNSPUN.key), "label": UNSPUN.label(), "recorded": recorded, "confirmed": confirmed,
                "status": status}
    runs = [{**step_doc(1, 0, 0.0, 0.001, None, "pass"),
             "untouched": [untouched(0.003), untouched(None, None, "error")]},
            {**step_doc(1, 5, 0.05, 0.052, 0.049, "regression"), "untouched": [untouched(0.006)]},
            {**step_doc(2, 5, 0.05, 0.05, 0.05, "regression"),
             "untouched": [untouched(-0.013, -0.007, "regression")]},
            step_doc(3, 5, 0.05, 0.05, 0.05, "regression")]  # a step result kept before untouched cases were
    floor = ladder.untouched(runs)
    assert len(floor) == 1 and (floor[0]["n"], floor[0]["confirmed"], floor[0]["measured"]) == (3, 1, 4)
    assert (floor[0]["within"], floor[0]["fail"]) == (1, 1)
    assert floor[0]["max_pp"] == pytest.approx(1.3) and floor[0]["rms_pp"] == pytest.approx((2.14 / 3) ** 0.5)
    assert floor[0]["max_confirmed_pp"] == pytest.approx(0.7)
    table = ladder.rows(runs)
    doc = {"run_id": "r", "base": "b" * 40, "reps": 3, "grid": "quick", "machine": "m", "steps_run": runs,
           "gate": {"screen": 0.0125, "threshold": 0.025}, "table": table, "summary": ladder.summary(table, (0, 5)),
           "untouched": floor}
    md = report.markdown(doc)
    assert f"| {UNSPUN.label()} | 3 | 1.30 | 0.84 | – | – | 1 | 0.70 | 1 of 4 | 1 |" in md
    assert "| case | records | max \\|recorded\\| (pp) |" in md  # a pipe in a table's header is escaped
    assert "noise floor" not in report.markdown({**doc, "untouched": []})


def test_fail_shares_put_the_real_ladder_on_the_detection_curve():
    from mlagate.ladder import rules as pure

    def row(rep, step, label, injected, status):
        return {"rep": rep, "step": step, "label": label, "injected": injected, "status": status}

    table = [row(1, 2.0, "a", 0.022, "pass"), row(2, 2.0, "a", 0.024, "regression"), row(3, 2.0, "a", 0.023, "pass"),
             row(1, 8.0, "a", 0.08, "regression"), row(1, 2.0, "b", 0.021, "error")]  # an error is no verdict
    assert pure.fail_shares(table) == [("a", pytest.approx(0.023), pytest.approx(1 / 3), 3), ("a", 0.08, 1.0, 1)]


@pytest.mark.parametrize("folder", ["ladder-h200-2026-11-30", "ladder-h200-2026-11-30-in-kernel"])
def test_calibrate_plots_a_real_ladder_beside_the_simulation(tmp_path, capsys, folder):
    from mlagate import cli

    ladder_json = ROOT / "docs" / "calibration" / folder / "ladder.json"
    doc = json.loads(ladder_json.read_text())
    assert len({r["rep"] for r in doc["table"]}) == 3  # the committed H200 ladders: three repetitions
    code = cli.main(["calibrate", "--trials", "20", "--ladder", str(ladder_json), "--out", str(tmp_path)])
    assert code in (0, 1)  # 1: off target on 20 trials; the plot is written either way
    assert (tmp_path / "calibration.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("text", ["{not json", "[]", '{"table": [{"label": "a"}]}', '{"rows": []}'])
def test_calibrate_refuses_what_is_not_a_ladder_and_writes_nothing(tmp_path, capsys, text):
    from mlagate import cli

    bad = tmp_path / "ladder.json"
    bad.write_text(text)
    out = tmp_path / "out"
    assert cli.main(["calibrate", "--trials", "5", "--ladder", str(bad), "--out", str(out)]) == 2
    assert str(bad) in capsys.readouterr().err
    assert not out.exists()


# -- on the GPU --------------------------------------------------------------------------------

SPIN = 2_000_000  # about 1 ms on an H200 at 1.98 GHz
MAX_CLOCK_HZ = 3.5e9  # no GPU's clock reaches it: the spin takes at least SPIN / MAX_CLOCK_HZ


@pytest.mark.gpu
@pytest.mark.parametrize("schedule", ["pipelined", "seesaw"])
def test_the_spin_runs_inside_the_kernel_and_changes_no_output(tmp_path, monkeypatch, schedule):
    """A step commit's kernel on the GPU, each schedule's file patched: the listed shape is at least SPIN cycles
    slower per call than base (one launch: the spin is in the kernel), its output and lse bit-identical to base's."""
    import importlib.util
    import sys

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA or ROCm GPU")
    from mlagate.kernels import mla_decode

    device = torch.device("cuda")
    arch = mla_decode.device_arch(device)
    config = mla_decode.config_for_arch(arch) if schedule == "pipelined" else mla_decode.SEESAW
    if not config.runs_on(arch):
        pytest.skip(f"the {schedule} schedule does not run on {arch}")
    path = ladder.DENSE_FILE if schedule == "pipelined" else ladder.SEESAW_FILE
    shape = mla_decode.Shape(batch=8, seqlen=1000, heads=16, dtype="float16")  # masked tail, split
    case = Case(f"tilelang-{config.name}", shape.batch, shape.seqlen, shape.dtype, shape.heads)
    file = tmp_path / f"{Path(path).stem}_spin_gpu.py"
    file.write_text(ladder.patched(gitops.git("show", f"HEAD:{path}", strip=False), 5,
                                   {ladder.shape_key(case.key): SPIN}, "gpu", path))
    spec = importlib.util.spec_from_file_location(file.stem, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[file.stem] = module
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    try:
        spec.loader.exec_module(module)
        inputs = mla_decode.random_inputs(shape, device="cuda")
        kernels = [mla_decode.CompiledDecode(shape, config, arch, sms)]
        if schedule == "pipelined":
            kernels.append(module.CompiledDecode(module.Shape(**dataclasses.asdict(shape)), module.CONFIGS[config.name],
                                                 arch, sms))
        else:  # the dense file builds the seesaw with the module it holds for the schedule: the step's
            monkeypatch.setitem(mla_decode.schedule_modules, "seesaw", module)
            kernels.append(mla_decode.CompiledDecode(shape, config, arch, sms))
        outputs, times = [], []
        for kernel in kernels:
            out, lse = torch.empty_like(inputs[0]), torch.empty(8, 16, device="cuda", dtype=torch.float32)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            best = float("inf")
            for _ in range(5):
                start.record()
                kernel(*inputs, out, lse)
                end.record()
                torch.cuda.synchronize()
                best = min(best, start.elapsed_time(end) / 1e3)
            outputs.append((out, lse))
            times.append(best)
    finally:
        del sys.modules[file.stem]
    assert torch.equal(outputs[0][0], outputs[1][0]) and torch.equal(outputs[0][1], outputs[1][1])
    assert times[1] - times[0] > SPIN / MAX_CLOCK_HZ, times


def test_untouched_cases_keep_their_clock_read_changes_and_the_table_shows_their_rms():
    def untouched(recorded, clock):
        return {"case": list(UNSPUN.key), "label": UNSPUN.label(), "recorded": recorded, "confirmed": None,
                "status": "pass", "clock": clock}

    runs = [{**step_doc(1, 0, 0.0, 0.0, None, "pass"),
             "untouched": [untouched(0.004, {"raw": 0.004, "normalized": 0.003, "binned": None})]},
            {**step_doc(2, 0, 0.0, 0.0, None, "pass"),
             "untouched": [untouched(-0.004, {"raw": -0.004, "normalized": 0.0, "binned": 0.002})]},
            {**step_doc(3, 0, 0.0, 0.0, None, "pass"), "untouched": [untouched(0.002, None)]}]
    floor = ladder.untouched(runs)[0]
    assert floor["rms_normalized_pp"] == pytest.approx((0.09 / 2) ** 0.5)
    assert floor["rms_binned_pp"] == pytest.approx(0.2)
    table = ladder.rows(runs)
    md = report.markdown({"run_id": "r", "base": "b" * 40, "reps": 3, "grid": "quick", "machine": "m",
                          "steps_run": runs, "gate": {"screen": 0.0125, "threshold": 0.025}, "table": table,
                          "summary": ladder.summary(table, (0,)), "untouched": [floor]})
    assert f"| {UNSPUN.label()} | 3 | 0.40 | 0.35 | 0.21 | 0.20 | 0 | – | 3 of 3 | 0 |" in md


@pytest.mark.parametrize("row_axes", [{"q_len": 2, "kv_dtype": "float8_e4m3fn"}, {}])
def test_the_clock_reading_finds_each_cases_windows_by_its_whole_key(row_axes):
    """An untouched fp8-cache or MTP case reads its windows' clocks (the ladder's normalized and binned columns): the
    cases sidecar's rows key as the store's cases do, q_len and kv_dtype included (a row from before those axes
    as one query token over a cache in the query's dtype). Before, rows keyed without kv_dtype and every clock
    column read '–'."""
    from mlagate.case import Case
    from mlagate.decide import clock_compare
    from mlagate.store.results import CommitResults
    from mlagate.store.results_file import BENCH_TIME, Entry

    case = Case("tilelang-seesaw", 64, 4096, "bfloat16", 16, **row_axes)
    clocks = [1980] * 5 + [1800] * 5
    times = tuple(t for c in clocks for t in [2e5 / (c * 1e6)] * 20)

    def side(commit, times):
        row = {"impl": case.impl, "batch": 64, "seqlen": 4096, "dtype": "bfloat16", "heads": 16, "workload": "dense",
               **row_axes, "samples": {"windows": [{"samples": 20, "sm_mhz": c, "kept": True} for c in clocks]}}
        return (CommitResults("m", commit, 0, [], {BENCH_TIME: {case.key: Entry("ok", times[50], times)}}),
                {"results": [row]})

    got = clock_compare.case_changes(*side("b", times), *side("h", tuple(t * 1.02 for t in times)), [case.key])
    assert got[case.key] == pytest.approx({"raw": 0.02, "normalized": 0.02, "binned": 0.02})


def test_the_calibrations_compile_ahead_skips_paged_cases_and_names_each_failure(monkeypatch):
    """A head start only: a paged case compiles at its launch; a failed compile is one line naming case and commit."""
    from mlagate.measure import interleaved, precompile

    asked = []

    def in_processes(fn, items, jobs, stop=None):
        asked.extend(items)
        yield items[0], None
        yield items[1], RuntimeError("x" * 400)

    monkeypatch.setattr(precompile, "in_processes", in_processes)
    lines = []
    interleaved.compile_ahead("repo", ["a" * 40], [*CASES, UNSPUN], lines.append)
    assert asked == [("repo", "a" * 40, c) for c in CASES]
    head, failed = lines[0].split("\n")
    assert head.startswith(f"compiled {len(CASES) - 1} of {len(CASES)} kernels in parallel (")
    assert failed == f"  failed: {CASES[1].label()} at aaaaaaaaaa: RuntimeError: {'x' * 300}"

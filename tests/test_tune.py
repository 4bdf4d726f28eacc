"""`mlagate tune` on a CPU: perf.yml's tune section, candidates and their dedupe, the resource pre-filter on a
real lowering, winner and drift decisions, resuming, and the command's exit codes. The GPU is stood in for by
a fake `tune.measure` whose candidates take the times a test gives them; lowering is real in one test and a
stand-in elsewhere (a source with one kernel, block_N x 1000 B of shared memory)."""

import copy
import hashlib
import json
import math

import pytest
import yaml

import dying_jobs
from mlagate import cli, config
from mlagate.build import lower
from mlagate.case import Case, CaseResult, RunStatus, Samples
from mlagate.config import tune as config_tune
from mlagate.config.reader import ConfigError
from mlagate.kernels import mla_decode as m
from mlagate.kernels import tile_rules, tuned
from mlagate.measure.precompile import ProcessDied, in_processes
from mlagate.tune import rules as decide
from mlagate.tune import run as pipeline

RAW = yaml.safe_load(config.DEFAULT_PATH.read_text())
SMALL_SPACE = {"block_N": [32, 64]}  # with the default (N64): two candidates per shape
B64, B128 = (64, 4096, 16, "float16", 1), (128, 4096, 16, "float16", 1)  # tuned.shape_key: s_q last


def raw_with(space=None, **tune_changes):
    raw = copy.deepcopy(RAW)
    raw["grid"]["quick"] = {"batch": [64, 128], "seqlen": [4096], "heads": [16], "q_len": [1]}
    if space is not None:
        raw["tune"]["hopper"]["space"] = space
    raw["tune"]["hopper"].update(tune_changes)
    return raw


def impl(**changes) -> str:
    return tuned.candidate_impl(m.HOPPER.with_(**changes))


DEFAULT, N32 = impl(), impl(block_N=32)


# -- perf.yml ---------------------------------------------------------------------------------------

def test_the_committed_spaces_and_the_kernels_agree():
    cfg = config.load()
    hopper = cfg.tune["hopper"].candidates(m.HOPPER)
    assert len(hopper) >= 48 and m.HOPPER in hopper  # the done-when: at least 48 Hopper candidates
    assert len(set(hopper)) == len(hopper)
    assert m.CDNA3 in cfg.tune["cdna3"].candidates(m.CDNA3)
    assert (cfg.tune["hopper"].arch, cfg.tune["cdna3"].arch) == ("sm_90", "gfx942")
    assert tuple(config_tune.SPACE_FIELDS) == tuned.TUNABLE
    assert set(config.TILELANG_FAMILIES) == set(m.CONFIGS) == set(tile_rules.FAMILY_ARCH)
    assert all(m.CONFIGS[f].runs_on(arch) for f, arch in tile_rules.FAMILY_ARCH.items())


@pytest.mark.parametrize("change,message", [
    (lambda t: t.pop("hopper") and t.update(volta=RAW["tune"]["hopper"]), r"tune.volta: unknown config family"),
    (lambda t: t["hopper"].update(grid="quick"), r"tune.hopper.grid: unknown key"),
    (lambda t: t["hopper"].pop("arch"), r"tune.hopper.arch: missing"),
    (lambda t: t["hopper"].update(arch="sm_80"), r"tune.hopper.arch: 'sm_80' has no gate.build.shared_memory_limit"),
    (lambda t: t["hopper"].update(space={}), r"tune.hopper.space: must list at least one of block_N"),
    (lambda t: t["hopper"]["space"].update(warps=[4]), r"tune.hopper.space.warps: unknown key"),
    (lambda t: t["hopper"]["space"].update(block_N=[]), r"tune.hopper.space.block_N: must be a non-empty list"),
    (lambda t: t["hopper"]["space"].update(block_N=[64, 64]), r"tune.hopper.space.block_N: entries must be unique"),
    (lambda t: t["hopper"]["space"].update(threads=[0]), r"tune.hopper.space.threads: every entry must be an "
                                                          r"integer >= 1"),
    (lambda t: t["hopper"]["space"].update(num_split=[-1]), r"tune.hopper.space.num_split: every entry must be an "
                                                             r"integer >= 0"),
    (lambda t: t["hopper"]["space"].update(num_stages=["2"]), r"tune.hopper.space.num_stages: every entry"),
    (lambda t: t["hopper"]["space"].update(policy=[1]), r"tune.hopper.space.policy: every entry must be a name"),
    (lambda t: t["hopper"]["space"].update(policy=[]), r"tune.hopper.space.policy: must be a non-empty list"),
    (lambda t: t["hopper"]["space"].update(policy=["FullRow", "FullRow"]), r"tune.hopper.space.policy: entries "
                                                                            r"must be unique"),
    (lambda t: t.clear() or t.update(hopper=None), r"tune.hopper: must be a mapping"),
])
def test_a_bad_tune_section_names_its_key(change, message):
    raw = copy.deepcopy(RAW)
    change(raw["tune"])
    with pytest.raises(ConfigError, match=message):
        config.parse(raw)


def test_a_missing_tune_section_and_a_value_the_kernel_refuses_name_their_key():
    raw = copy.deepcopy(RAW)
    del raw["tune"]
    with pytest.raises(ConfigError, match=r"^tune: must be a mapping"):
        config.parse(raw)
    raw = copy.deepcopy(RAW)  # a value perf.yml's reader cannot refuse without the family: the kernel refuses it
    raw["tune"]["seesaw"]["space"]["block_N"] = [64]
    space = config.parse(raw).tune["seesaw"]
    with pytest.raises(ConfigError, match=r"tune.seesaw.space.block_N: 64 is refused: .*the seesaw schedule takes "
                                          r"block_N=128"):
        space.candidates(m.SEESAW)


# -- candidates and their dedupe -------------------------------------------------------------------

def test_candidates_are_the_product_with_the_last_field_fastest():
    space = config.parse(raw_with({"block_N": [32, 64], "policy": ["FullRow", "FullCol"]})).tune["hopper"]
    assert [(c.block_N, c.policy) for c in space.candidates(m.HOPPER)] == [
        (32, "FullRow"), (32, "FullCol"), (64, "FullRow"), (64, "FullCol")]


def test_candidates_of_one_launch_are_measured_once(tmp_path):
    # At 16 heads block_H is capped at 16: every block_H is one launch. On sm_90 (132 SMs) b=64 at
    # num_split 0 fills the device with 2 splits, so it is num_split 2 there.
    cfg = config.parse(raw_with({"block_H": [16, 64], "num_split": [0, 1, 2]}))
    p = pipeline.plan(cfg, family="hopper", out=tmp_path)
    b64, b128 = p.shapes
    assert list(b64.candidates) == [impl(), impl(block_H=16, num_split=1)]
    assert b64.duplicates == {impl(block_H=16): impl(), impl(block_H=16, num_split=2): impl(),
                              impl(num_split=1): impl(block_H=16, num_split=1), impl(num_split=2): impl()}
    assert list(b128.candidates) == [impl(), impl(block_H=16, num_split=2)]  # b=128 fills it unsplit
    assert b128.duplicates[impl(num_split=1)] == impl()
    key = decide.launch_key
    plan = m.plan(m.Shape(64, 4096, 16), m.HOPPER, "sm_90")
    assert key(plan) == key(m.plan(m.Shape(64, 4096, 16), m.HOPPER.with_(name="x", block_H=16), "sm_90"))
    assert key(plan) != key(m.plan(m.Shape(64, 4096, 16), m.HOPPER.with_(block_N=32), "sm_90"))


# -- the resource pre-filter, on a real lowering ---------------------------------------------------

class Killed(BaseException):
    """The tune's process killed (not an Exception: the command would turn that into exit 2)."""


def fake_gpu(monkeypatch, medians_us=None, stop_after=None, model="Fake GPU"):
    """tune.measure stood in for: every case measures OK at medians_us[impl] (default 100 µs) on the GPU it
    is given (``model``, also tune.gpu_name's answer); after ``stop_after`` rounds it dies, as a killed run
    would. Returns the list of rounds it was given: [(impl, batch, gpu)] each."""
    rounds = []

    def measure(cfg, p, cases, on_result, echo, gpu=None):
        if stop_after is not None and len(rounds) == stop_after:
            raise Killed()
        rounds.append([(c.impl, c.batch, gpu) for c in cases])
        for c in cases:
            us = (medians_us or {}).get(c.impl, 100.0)
            samples = Samples((us / 1e3,) * 20, "cuda-event", 0, 1, model, uuid=f"GPU-{gpu}")
            on_result(CaseResult(c, RunStatus.OK, samples=samples, gpu=gpu))

    monkeypatch.setattr(pipeline, "measure", measure)
    monkeypatch.setattr(pipeline, "gpu_name", lambda gpus: model)
    return rounds


@pytest.mark.slow
def test_a_candidate_over_the_shared_memory_limit_is_skipped_with_its_bytes_never_launched(monkeypatch, tmp_path):
    # block_N 128 with 2 stages needs about 311 KB on sm_90 (limit 227 KB); the default, about 166 KB.
    raw = raw_with({"block_N": [128], "threads": [128]})
    raw["grid"]["quick"]["batch"] = [64]
    cfg = config.parse(raw)
    rounds = fake_gpu(monkeypatch)
    p = pipeline.plan(cfg, family="hopper", out=tmp_path, jobs=1)
    over = impl(block_N=128, threads=128)
    assert list(p.shapes[0].candidates) == [DEFAULT, over]
    summary = pipeline.run_tune(cfg, p, echo=lambda *_: None)
    assert rounds == [[(DEFAULT, 64, None)]]
    skipped = json.loads((p.folder / "b64-s4096-h16-float16" / f"{over}.json").read_text())
    assert skipped["stage"] == "done" and skipped["smem"] > 232448
    assert skipped["result"]["status"] == "skipped"
    assert f"{skipped['smem']} B of shared memory, over the sm_90 limit of 232448 B" in skipped["result"]["reason"]
    default = json.loads((p.folder / "b64-s4096-h16-float16" / f"{DEFAULT}.json").read_text())
    assert default["smem"] <= 232448 and default["result"]["status"] == "ok"
    assert summary.outcome == pipeline.Outcome.DONE
    assert "1 skipped" in summary.report.read_text()


# -- winner and drift ------------------------------------------------------------------------------

def result(impl_, us=None, status=RunStatus.OK, reason=None) -> CaseResult:
    case = Case(impl_, 64, 4096, "float16", 16)
    if status != RunStatus.OK:
        return CaseResult(case, status, reason)
    return CaseResult(case, status, median_ms=us / 1e3, tflops=1e3 / us)


def test_the_winner_is_the_fastest_and_a_tie_goes_to_the_default_then_the_first():
    a, b, c = "a", "b", "c"
    w = decide.winner({a: result(a, 100), b: result(b, 80), c: result(c, status=RunStatus.FAILED)}, default=a)
    assert w.impl == b and math.isclose(w.gain, 0.25)
    assert decide.winner({a: result(a, 100), b: result(b, 80), c: result(c, 80)}, default=c).impl == c
    assert decide.winner({a: result(a, 100), b: result(b, 80), c: result(c, 80)}, default=a).impl == b
    w = decide.winner({a: result(a, status=RunStatus.SKIPPED), b: result(b, 90)}, default=a)
    assert w.impl == b and w.default is None and w.gain is None
    assert decide.winner({a: result(a, status=RunStatus.FAILED)}, default=a) is None


def test_drift_is_a_beaten_or_broken_committed_config():
    results = {"default": result("default", 100), "table": result("table", 90), "best": result("best", 85)}
    best = decide.winner(results, "default")
    beaten = decide.drift(B64, results, "table", best, threshold=0.05)
    assert beaten.kind == decide.DriftKind.BEATEN and beaten.best == "best" and math.isclose(beaten.change, 90 / 85 - 1)
    assert decide.drift(B64, results, "table", best, threshold=0.06) is None  # 5.9% is within 6%
    assert decide.drift(B64, results, "best", best, threshold=0.0) is None
    results["table"] = result("table", status=RunStatus.SKIPPED, reason="not launched: over the limit")
    broken = decide.drift(B64, results, "table", best, threshold=0.05)
    assert broken.kind == decide.DriftKind.BROKEN and broken.reason == "not launched: over the limit"
    # a committed config that is the same launch as another is judged by that one's result
    shape = decide.decide_shape(B64, {"default": result("default", 100), "best": result("best", 85)},
                                {"table": "default"}, "default", "table", 0.05)
    assert shape.drift.kind == decide.DriftKind.BEATEN and shape.drift.committed == "table"


# -- the command: resume, --check, --write-table, bad input ----------------------------------------

@pytest.fixture(autouse=True)
def empty_tables(tmp_path, monkeypatch):
    """Every test here starts from empty tuned tables, whatever the committed ones hold."""
    monkeypatch.setattr(tuned, "TABLE_DIR", tmp_path / "tuned")


@pytest.fixture
def fake_lowering(monkeypatch):
    """lower.lower_job stood in for: one kernel with block_N x 1000 B of dynamic shared memory."""
    lowered = []

    def lower_job(job):
        lowered.append((tuned.candidate_impl(job.config), job.shape.batch))
        source = 'extern "C" __global__ void __launch_bounds__(256) main_kernel(half_t* x) {\n  return;\n}\n'
        return {"source": source, "meta": {"main_kernel": {"dynamic_smem": job.config.block_N * 1000, "threads": 256}}}

    monkeypatch.setattr(lower, "lower_job", lower_job)
    return lowered


@pytest.fixture
def perf_yml(tmp_path):
    path = tmp_path / "perf.yml"
    path.write_text(yaml.safe_dump(raw_with(SMALL_SPACE)))
    return path


def tune_cli(perf_yml, out, *extra) -> int:
    return cli.main(["--config", str(perf_yml), "tune", "--config-family", "hopper", "--jobs", "1", "--out", str(out),
                     *extra])


def test_a_second_run_measures_only_what_the_first_did_not(monkeypatch, tmp_path, perf_yml, fake_lowering, capsys):
    out = tmp_path / "out"
    first = fake_gpu(monkeypatch, stop_after=2)
    with pytest.raises(Killed):
        tune_cli(perf_yml, out)
    assert len(fake_lowering) == 4  # 2 candidates x 2 shapes, all lowered before any is measured
    second = fake_gpu(monkeypatch)
    assert tune_cli(perf_yml, out) == 0
    assert len(fake_lowering) == 4  # nothing lowered twice
    measured = [(impl_, batch) for r in first + second for impl_, batch, _ in r]
    assert sorted(measured) == sorted({(DEFAULT, 64), (N32, 64), (DEFAULT, 128), (N32, 128)})
    assert len(first) == 2 and len(second) == 2
    assert "wrote" in capsys.readouterr().out
    assert (out / "sm_90" / "hopper" / "quick" / "tune.md").exists()
    third = fake_gpu(monkeypatch)
    assert tune_cli(perf_yml, out) == 0 and third == []  # all done: decided from the files


def test_max_minutes_stops_between_rounds_and_says_how_to_resume(monkeypatch, tmp_path, perf_yml, fake_lowering,
                                                                 capsys):
    rounds = fake_gpu(monkeypatch)
    monkeypatch.setattr(pipeline, "_past", lambda deadline: deadline is not None and len(rounds) >= 1)
    assert tune_cli(perf_yml, tmp_path / "a", "--max-minutes", "5") == 0
    assert len(rounds) == 1 and "3 candidate(s) left; resume: run the same command again" in capsys.readouterr().out
    assert not (tmp_path / "a" / "sm_90" / "hopper" / "quick" / "tune.md").exists()
    rounds.clear()
    assert tune_cli(perf_yml, tmp_path / "b", "--max-minutes", "5", "--check") == 2  # a check never half passes
    assert "--max-minutes 5 with 3 candidate(s) left" in capsys.readouterr().err


@pytest.mark.parametrize("n32_us,table,code", [
    (95.0, None, 1),  # 5.3% faster than the default, the committed config where the table is empty
    (98.0, None, 0),  # 2.0%: within the gate's 2.5%
    (95.0, "n32", 0),  # the table already has it
])
def test_check_exits_1_only_when_the_committed_table_is_beaten(monkeypatch, tmp_path, perf_yml, fake_lowering,
                                                               n32_us, table, code):
    fake_gpu(monkeypatch, {N32: n32_us})
    path = tmp_path / "sm_90.yaml" if table else tuned.table_path("sm_90")  # the committed one: absent
    if table:
        entries = [tuned.Entry(m.Shape(b, 4096, 16), m.HOPPER.with_(block_N=32), {}) for b in (64, 128)]
        tuned.write_table("sm_90", "hopper", entries, path)
    before = path.read_text() if table else None
    assert tune_cli(perf_yml, tmp_path / "out", "--check", *(["--table", str(path)] if table else [])) == code
    assert (path.read_text() if table else None) == before and (table or not path.exists())
    report = (tmp_path / "out" / "sm_90" / "hopper" / "quick" / "tune.md").read_text()
    assert ("**The committed table is beaten**" in report) == (code == 1)
    assert report.count(f"| `{DEFAULT}` |") == 2  # once per shape, though it is the default and committed
    row = next(line for line in report.splitlines() if line.startswith(f"| `{N32}` |"))
    assert row.split(" | ")[3] == f"{100 / n32_us - 1:+.1%}"  # its gain over the default, which measured 100 µs


def test_write_table_writes_each_winner_and_keeps_other_shapes(monkeypatch, tmp_path, perf_yml, fake_lowering):
    fake_gpu(monkeypatch, {N32: 80.0})
    path = tmp_path / "sm_90.yaml"
    other = m.Shape(64, 8192, 16)
    tuned.write_table("sm_90", "hopper", [tuned.Entry(other, m.HOPPER.with_(num_stages=1), {"tflops": 1.0})], path)
    assert tune_cli(perf_yml, tmp_path / "out", "--write-table", "--table", str(path)) == 0
    table = tuned.load_table("sm_90", path)["hopper"]
    assert set(table) == {B64, B128, tuned.shape_key(other)}
    entry = table[B64]
    assert entry.config == m.HOPPER.with_(block_N=32)
    assert entry.measured["gpu"] == "Fake GPU" and math.isclose(entry.measured["gain"], 0.25)
    assert entry.measured["median_us"] == 80.0 and entry.measured["command"].endswith("--write-table")
    assert entry.measured["default_tflops"] < entry.measured["tflops"]


def test_an_unknown_grid_is_refused_as_in_every_command(monkeypatch, tmp_path, perf_yml, fake_lowering, capsys):
    fake_gpu(monkeypatch)
    with pytest.raises(SystemExit) as e:  # a checked choice, as in every subcommand (tests/test_cli.py)
        tune_cli(perf_yml, tmp_path / "out", "--grid", "huge")
    assert e.value.code == 2 and "argument --grid: 'huge' is unknown (known: quick, full)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args,message", [
    (["--config-family", "volta"], "--config-family: 'volta' has no search space"),
    (["--jobs", "0"], "--jobs: must be at least 1"),
    (["--max-minutes", "0"], "--max-minutes: must be > 0"),
    (["--max-minutes", "nan"], "--max-minutes: must be > 0 and finite, got nan"),
    (["--max-minutes", "inf"], "--max-minutes: must be > 0 and finite, got inf"),
    (["--gpus", "x"], "--gpus must be 'all', a count or a comma-separated list"),
])
def test_bad_input_exits_2_and_writes_nothing(monkeypatch, tmp_path, perf_yml, fake_lowering, capsys, args, message):
    rounds = fake_gpu(monkeypatch)
    out = tmp_path / "out"
    assert tune_cli(perf_yml, out, *args) == 2
    assert message in capsys.readouterr().err
    assert not out.exists() and rounds == [] and fake_lowering == []


def test_a_tune_is_keyed_by_every_file_its_kernel_is_built_from(tmp_path):
    """The seesaw family's resume identity hashes the seesaw's own file too: an edit there is a new tune."""
    from pathlib import Path

    dense, seesaw = (Path(f).read_bytes() for f in (m.__file__, m.schedule_module("seesaw").__file__))
    assert m.kernel_source(m.HOPPER) == dense and m.kernel_source(m.CDNA3) == dense
    assert m.kernel_source(m.SEESAW) == dense + seesaw
    plan = pipeline.plan(config.load(), grid_name="quick", family="seesaw", out=str(tmp_path / "out"))
    assert plan.identity["kernel_sha256"] == hashlib.sha256(dense + seesaw).hexdigest()


def test_a_table_that_does_not_load_or_an_out_of_another_kernel_exits_2(monkeypatch, tmp_path, perf_yml,
                                                                        fake_lowering, capsys):
    fake_gpu(monkeypatch)
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 3\n")
    assert tune_cli(perf_yml, tmp_path / "out", "--table", str(bad)) == 2
    assert "bad.yaml: version: must be 2" in capsys.readouterr().err and not (tmp_path / "out").exists()
    assert tune_cli(perf_yml, tmp_path / "out") == 0
    identity = tmp_path / "out" / "sm_90" / "hopper" / "quick" / "tune.json"
    identity.write_text(json.dumps({**json.loads(identity.read_text()), "kernel_sha256": "0" * 64}))
    assert tune_cli(perf_yml, tmp_path / "out") == 2
    assert "is a tune of another kernel, GPU or settings (kernel_sha256: was '0000" in capsys.readouterr().err


def test_the_process_pool_reports_errors_per_item_and_starts_nothing_once_told_to_stop():
    assert dict(in_processes(math.factorial, [3, 4], 2)) == {3: 6, 4: 24}
    (item, error), = in_processes(math.factorial, [-1], 1)
    assert item == -1 and isinstance(error, ValueError)
    assert list(in_processes(math.factorial, [3], 1, stop=lambda: True)) == []
    assert list(in_processes(math.factorial, [3, 4], 2, stop=lambda: True)) == []
    asked = []  # asked before each start: two items, two questions, the second one answered "stop"
    assert list(in_processes(math.factorial, [3, 4], 1, stop=lambda: asked.append(1) or len(asked) > 1)) == [(3, 6)]


def test_a_table_given_by_name_must_exist_except_to_be_written(monkeypatch, tmp_path, perf_yml, fake_lowering,
                                                                capsys):
    fake_gpu(monkeypatch)
    typo = tmp_path / "typo.yaml"
    assert tune_cli(perf_yml, tmp_path / "out", "--check", "--table", str(typo)) == 2
    assert f"{typo}: no such table" in capsys.readouterr().err and not (tmp_path / "out").exists()
    assert tune_cli(perf_yml, tmp_path / "out", "--write-table", "--table", str(typo)) == 0  # writing creates it
    assert set(tuned.load_table("sm_90", typo)["hopper"]) == {B64, B128}


@pytest.mark.parametrize("change,named", [
    (lambda raw, gpu: gpu.update(model="Other GPU"), "gpu: was 'Fake GPU', now 'Other GPU'"),
    (lambda raw, gpu: raw["timing"].update(warmup_ms=5), "timing.warmup_ms: was 1000.0, now 5.0"),
    (lambda raw, gpu: raw["gate"]["build"]["shared_memory_limit"].update(sm_90=100000),
     "shared_memory_limit: was 232448, now 100000"),
])
def test_a_resume_on_another_gpu_model_timing_or_limit_exits_2_naming_it(monkeypatch, tmp_path, perf_yml,
                                                                        fake_lowering, capsys, change, named):
    rounds = fake_gpu(monkeypatch, stop_after=1)
    with pytest.raises(Killed):
        tune_cli(perf_yml, tmp_path / "out")
    raw, gpu = yaml.safe_load(perf_yml.read_text()), {"model": "Fake GPU"}
    change(raw, gpu)
    perf_yml.write_text(yaml.safe_dump(raw))
    rounds = fake_gpu(monkeypatch, model=gpu["model"])
    assert tune_cli(perf_yml, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "tune.json is a tune of another kernel, GPU or settings (" in err and named in err
    assert rounds == []


def test_a_resume_without_a_gpu_keeps_the_gpu_model_measured_on(monkeypatch, tmp_path, perf_yml, fake_lowering):
    fake_gpu(monkeypatch, stop_after=1)
    with pytest.raises(Killed):
        tune_cli(perf_yml, tmp_path / "out")
    identity = tmp_path / "out" / "sm_90" / "hopper" / "quick" / "tune.json"
    fake_gpu(monkeypatch, stop_after=0, model=None)  # a machine without a GPU: lowers, then stops
    with pytest.raises(Killed):
        tune_cli(perf_yml, tmp_path / "out")
    assert json.loads(identity.read_text())["gpu"] == "Fake GPU"
    assert json.loads(identity.read_text())["timing"]["warmup_ms"] == 1000
    fake_gpu(monkeypatch)
    assert tune_cli(perf_yml, tmp_path / "out") == 0


@pytest.mark.parametrize("name,content,message", [
    ("tune.json", "{not json", "tune.json: not readable"),
    ("tune.json", "[]", "tune.json: not a tune's identity"),
    ("b64-s4096-h16-float16/CANDIDATE.json", "[]", "CANDIDATE.json: not a candidate file (must be a mapping with"),
    ("b64-s4096-h16-float16/CANDIDATE.json", "{}", "CANDIDATE.json: not a candidate file (must be a mapping with"),
    ("b64-s4096-h16-float16/CANDIDATE.json", '{"candidate": "CANDIDATE", "config": {}, "stage": "done", '
                                             '"smem": 1, "result": {"status": "ok"}}',
     "CANDIDATE.json: not a candidate file (result: not a measured case"),
    ("b64-s4096-h16-float16/CANDIDATE.json", '{"candidate": "CANDIDATE", "config": {}, "stage": "half", '
                                             '"smem": 1, "result": null}', "stage: must be one of lowered, done"),
])
def test_a_damaged_file_in_out_exits_2_naming_it(monkeypatch, tmp_path, perf_yml, fake_lowering, capsys, name,
                                                 content, message):
    fake_gpu(monkeypatch, stop_after=1)
    with pytest.raises(Killed):
        tune_cli(perf_yml, tmp_path / "out")
    name, content, message = (x.replace("CANDIDATE", DEFAULT) for x in (name, content, message))
    (tmp_path / "out" / "sm_90" / "hopper" / "quick" / name).write_text(content)
    rounds = fake_gpu(monkeypatch)
    assert tune_cli(perf_yml, tmp_path / "out") == 2
    assert message in capsys.readouterr().err and rounds == []


def test_each_shape_is_measured_on_one_gpu_and_the_gpus_work_at_once(monkeypatch, tmp_path, perf_yml,
                                                                     fake_lowering):
    for name in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    raw = yaml.safe_load(perf_yml.read_text())
    raw["grid"]["quick"]["batch"] = [64, 128, 32]
    perf_yml.write_text(yaml.safe_dump(raw))
    rounds = fake_gpu(monkeypatch)
    assert tune_cli(perf_yml, tmp_path / "out", "--gpus", "0,1") == 0
    # the grid's order is batch-major: b64 (shape 0) and b32 (shape 2) on GPU 0, b128 on GPU 1; a round
    # of --jobs 1 candidate each, every round on the GPU of its shape
    assert sorted(rounds) == sorted([[(DEFAULT, b, gpu)] for b, gpu in ((64, 0), (128, 1), (32, 0))]
                                    + [[(N32, b, gpu)] for b, gpu in ((64, 0), (128, 1), (32, 0))])
    folder = tmp_path / "out" / "sm_90" / "hopper" / "quick"
    for batch, gpu in ((64, 0), (128, 1), (32, 0)):
        results = [json.loads(f.read_text())["result"] for f in (folder / f"b{batch}-s4096-h16-float16").glob("*.json")]
        assert len(results) == 2 and {(r["gpu"], r["samples"]["uuid"]) for r in results} == {(gpu, f"GPU-{gpu}")}


def test_a_process_that_dies_fails_only_its_own_item():
    outcomes = dict(in_processes(dying_jobs.double_or_die, [1, 2, 3, 4, 5, 6], 2))
    died = outcomes.pop(dying_jobs.DYING)
    assert isinstance(died, ProcessDied) and f"died with exit code {dying_jobs.DYING_CODE}" in str(died)
    assert outcomes == {1: 2, 2: 4, 4: 8, 5: 10, 6: 12}


@pytest.mark.slow
def test_a_candidate_whose_lowering_kills_its_process_fails_alone(monkeypatch, tmp_path, perf_yml):
    monkeypatch.setattr(lower, "lower_job", dying_jobs.lower_or_die)  # spawned processes import it by name
    rounds = fake_gpu(monkeypatch)
    assert tune_cli(perf_yml, tmp_path / "out", "--jobs", "2") == 0
    assert sorted(c[:2] for r in rounds for c in r) == sorted([(DEFAULT, 64), (DEFAULT, 128), (N32, 128)])
    died = json.loads((tmp_path / "out" / "sm_90" / "hopper" / "quick" / "b64-s4096-h16-float16" /
                       f"{N32}.json").read_text())
    assert died["stage"] == "done" and died["result"]["status"] == "failed"
    assert f"lowering crashed: ProcessDied: the process running it died with exit code {dying_jobs.DYING_CODE}" in (
        died["result"]["reason"])


# -- a candidate outside the tune: `mlagate bench --impl <candidate>` ---------------------------

def test_a_candidate_is_measured_with_its_familys_budget():
    cfg = config.load()
    default = "tilelang-hopper@N64.H64.split0.t256.stages2.FullCol"
    assert cfg.budget_for(default, "cuda") == cfg.budget_for("tilelang-hopper", "cuda") == "record"
    assert cfg.budget_for("triton", "cuda") == "baseline"


@pytest.mark.parametrize("impl", ["tilelang-hopper@N64", "no-such-kernel"])
def test_bench_refuses_an_unknown_implementation_or_a_malformed_candidate(impl, monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the check comes before any GPU work
    assert cli.main(["bench", "--impl", impl]) == 2
    assert impl in capsys.readouterr().err


def test_bench_takes_a_well_formed_candidate(monkeypatch, capsys):
    import torch

    from mlagate.measure import environment

    class PastTheCheck(Exception):
        pass

    def platform():
        raise PastTheCheck("the --impl check let it through")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(environment, "platform", platform)  # the first step after the check: stop there
    assert cli.main(["bench", "--impl", "tilelang-hopper@N64.H64.split0.t256.stages2.FullCol"]) == 2
    assert "the --impl check let it through" in capsys.readouterr().err

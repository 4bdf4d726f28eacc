"""Several GPUs on a CPU: the consistency rule, the check before a record (stand-in workers), the
warning it leaves in the gate report, and the runner shards."""

import collections
import contextlib
import json
import sys

import pytest

import gate_fixtures as fx
from mlagate import cli, config, gpu_check
from mlagate.case import Case, CaseResult, RunStatus, Samples
from mlagate.decide.consistency import compare_gpus
from mlagate.measure import grid, shards


def test_a_gpu_off_its_siblings_by_more_than_the_screen_is_flagged():
    readings = compare_gpus({0: 100e-6, 1: 100.5e-6, 2: 102e-6, 3: 100.2e-6}, 0.0125, {2: "GPU-2"})
    assert [r.flagged for r in readings] == [False, False, True, False]
    assert readings[2].uuid == "GPU-2" and readings[2].off == pytest.approx(102 / 100.2 - 1)


def test_two_gpus_that_disagree_are_both_flagged_and_one_gpu_has_nothing_to_compare():
    assert [r.flagged for r in compare_gpus({0: 100e-6, 1: 101.8e-6}, 0.0125)] == [True, True]
    assert [r.flagged for r in compare_gpus({0: 100e-6, 1: 101.0e-6}, 0.0125)] == [False, False]
    assert compare_gpus({0: 100e-6}, 0.0125) == []


def test_each_reading_names_its_gpu_in_index_order_and_a_gpu_exactly_at_the_screen_is_not_flagged():
    """GPU 2 lies exactly the screen off its siblings: flagged only beyond it. A GPU without a UUID reads ""."""
    screen = 101.25e-6 / 100e-6 - 1
    readings = compare_gpus({2: 101.25e-6, 0: 100e-6, 1: 100e-6}, screen, {0: "GPU-0"})
    assert [(r.gpu, r.uuid, r.median_s, r.flagged) for r in readings] == [
        (0, "GPU-0", 100e-6, False), (1, "", 100e-6, False), (2, "", 101.25e-6, False)]
    assert [r.off for r in readings] == pytest.approx([100 / 100.625 - 1, 100 / 100.625 - 1, 0.0125])
    assert [r.flagged for r in compare_gpus({2: 101.26e-6, 0: 100e-6, 1: 100e-6}, screen)] == [False, False, True]


def fake_run_on_each(medians_us):
    def run_on_each(case, timing, gpus, **_):
        return [CaseResult(case, RunStatus.OK, samples=Samples((medians_us[g] / 1e3,) * 20, "fake", 0, 0, "x",
                                                               uuid=f"GPU-{g}"), gpu=g) for g in gpus]
    return run_on_each


def test_the_check_runs_the_quick_grids_largest_gated_case_on_each_gpu(monkeypatch):
    from mlagate.measure import environment

    seen = []
    monkeypatch.setattr(environment, "platform", lambda: "cuda")
    monkeypatch.setattr(grid, "parse_gpus", lambda text: [0, 1])
    run = fake_run_on_each({0: 100.0, 1: 102.0})
    monkeypatch.setattr(grid, "run_on_each", lambda case, *a, **k: seen.append(case) or run(case, *a, **k))
    out = gpu_check.check_gpus(config.load(), "all", echo=lambda *_: None)
    assert seen == [Case("tilelang-seesaw", 128, 4096, "float16", 16, q_len=2)]  # the most work: 2 query tokens
    assert [g["flagged"] for g in out["gpus"]] == [True, True] and out["gpus"][1]["uuid"] == "GPU-1"
    json.dumps(out)  # it goes into the environment record


def test_one_gpu_is_not_checked(monkeypatch):
    monkeypatch.setattr(grid, "parse_gpus", lambda text: [0])
    assert gpu_check.check_gpus(config.load(), "1") is None


def test_a_gpu_that_fails_the_check_stops_the_record_before_it_starts(monkeypatch):
    from mlagate.measure import environment

    monkeypatch.setattr(environment, "platform", lambda: "cuda")
    monkeypatch.setattr(grid, "parse_gpus", lambda text: [0, 1])
    monkeypatch.setattr(grid, "run_on_each", lambda case, timing, gpus, **_: [
        CaseResult(case, RunStatus.OK, samples=Samples((0.1,) * 20, "fake", 0, 0, "x"), gpu=0),
        CaseResult(case, RunStatus.FAILED, "worker exited with code 3", gpu=1)])
    with pytest.raises(ValueError, match="GPU 1: worker exited with code 3; nothing was recorded"):
        gpu_check.check_gpus(config.load(), "all", echo=lambda *_: None)


def test_each_gpu_runs_the_same_case_in_a_worker_of_its_own(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text("import json, os, sys\njob = json.load(sys.stdin)\n"
                      "index, fields, budget = job['cases'][0]\n"
                      "print('@@mlagate ' + json.dumps({'event': 'start', 'index': index}), flush=True)\n"
                      "r = dict(fields, status='skipped', reason=os.environ['CUDA_VISIBLE_DEVICES'] + ' ' + budget)\n"
                      "print('@@mlagate ' + json.dumps({'event': 'done', 'index': index, 'result': r}), flush=True)\n")
    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {script}\n")
    exe.chmod(0o755)
    case = Case("tilelang-hopper", 64, 4096, "float16", 16)
    rows = grid.run_on_each(case, config.load().timing, [0, 1, 3], python=str(exe))
    assert [(r.case, r.gpu, r.reason) for r in rows] == [(case, g, f"{g} record") for g in (0, 1, 3)]


def test_a_flagged_gpu_is_a_warning_in_the_gate_report(tmp_path, capsys):
    root = fx.copy_store(tmp_path)
    env_path = root / fx.MACHINE / f"{fx.DOCS[:8]}-env.sidecar"
    env = json.loads(env_path.read_text())
    env["gpu_consistency"] = {"case": "tilelang-hopper h=16 b=128 s=4096 float16", "screen": 0.0125, "gpus": [
        {"gpu": 0, "uuid": "GPU-0", "median_s": 1e-4, "off": -0.017, "flagged": True},
        {"gpu": 1, "uuid": "GPU-1", "median_s": 1.017e-4, "off": 0.0173, "flagged": True}]}
    env_path.write_text(json.dumps(env))
    code = cli.main(["gate", "--base", fx.BASE, "--head", fx.DOCS, "--machine", fx.MACHINE, "--results", str(root),
                     "--out", str(tmp_path / "out")])
    assert code == 0
    warnings = json.loads((tmp_path / "out" / "verdict.json").read_text())["warnings"]
    assert [w for w in warnings if "against the node's other GPUs" in w] == [
        f"head {fx.DOCS[:8]}: GPU 0 read -1.70% against the node's other GPUs on tilelang-hopper h=16 b=128 "
        "s=4096 float16 before the record (more than the screen): its cases carry that offset",
        f"head {fx.DOCS[:8]}: GPU 1 read +1.73% against the node's other GPUs on tilelang-hopper h=16 b=128 "
        "s=4096 float16 before the record (more than the screen): its cases carry that offset"]


# -- runner shards ---------------------------------------------------------------------

def test_runner_shards_are_a_stable_hash_of_the_grid_point():
    cases = config.load().cases("full", ["tilelang-hopper", "flash_mla"], "cuda")
    split = {c: shards.runner_shard(c, 4) for c in cases}
    by_point = collections.defaultdict(set)
    for c, s in split.items():
        by_point[shards.point(c)].add(s)
    assert all(len(s) == 1 for s in by_point.values())  # a point's implementations on one runner
    assert set(split.values()) == {0, 1, 2, 3}
    # fixed values: the same split on every run, machine and Python (no salted hash())
    assert shards.runner_shard(Case("tilelang-hopper", 64, 4096, "float16", 16), 4) == 3
    assert shards.runner_shard(Case("flash_mla", 128, 16384, "float16", 128), 4) == 0


@pytest.mark.parametrize("text", ["0/2", "3/2", "2", "a/b", "1/0", ""])
def test_a_bad_shard_is_refused(text):
    with pytest.raises(ValueError, match="--shard"):
        shards.parse_shard(text)


def test_a_shard_records_only_its_points(monkeypatch):
    from mlagate.measure import asv_suite

    monkeypatch.setenv("MLAGATE_GRID", "full")
    monkeypatch.setattr(asv_suite, "platform", lambda: "cuda")
    everything = set(asv_suite.cases())
    parts = []
    for i in (1, 2, 3):
        monkeypatch.setenv("MLAGATE_SHARD", f"{i}/3")
        parts.append(set(asv_suite.cases()))
    assert set().union(*parts) == everything and sum(map(len, parts)) == len(everything)


def test_a_merged_record_warns_of_each_runners_flagged_gpu(tmp_path, capsys):
    root = fx.copy_store(tmp_path)
    env_path = root / fx.MACHINE / f"{fx.DOCS[:8]}-env.sidecar"
    env = json.loads(env_path.read_text())
    check = {"case": "c", "screen": 0.0125, "gpus": [{"gpu": 1, "uuid": "u", "median_s": 1e-4, "off": 0.02,
                                                      "flagged": True}]}
    env["shards"] = [{**env, "shard": "1/2"}, {**env, "shard": "2/2", "gpu_consistency": check}]
    env_path.write_text(json.dumps(env))
    assert cli.main(["gate", "--base", fx.BASE, "--head", fx.DOCS, "--machine", fx.MACHINE, "--results", str(root),
                     "--out", str(tmp_path / "out")]) == 0
    warnings = json.loads((tmp_path / "out" / "verdict.json").read_text())["warnings"]
    assert [w for w in warnings if "other GPUs" in w] == [
        f"head {fx.DOCS[:8]} (shard 2/2): GPU 1 read +2.00% against the node's other GPUs on c before the record "
        "(more than the screen): its cases carry that offset"]


def test_the_records_measurement_gets_its_gpus_deadline_and_budgets(monkeypatch, tmp_path):
    """What `mlagate record` sets in asv's environment reaches the one pass over the grid."""
    import torch

    from mlagate.measure import asv_suite, precompile

    seen = {}

    def run_cases(cases, timing, *, budgets, deadline, gpus, compiled, spent):
        assert seen["compiling"]  # timed while the kernels compile, waiting on that folder
        seen.update(cases=cases, budgets=budgets, deadline=deadline, gpus=gpus, ready=compiled)
        return []

    @contextlib.contextmanager
    def ahead(cases, jobs, *, echo):
        assert jobs == precompile.default_jobs(2)  # a core for each GPU's worker
        seen.update(compiled=cases, compiling=True)
        yield "the compile's folder"
        seen["compiling"] = False

    monkeypatch.setattr(precompile, "ahead", ahead)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(asv_suite, "platform", lambda: "cuda")
    monkeypatch.setattr(grid, "parse_gpus", lambda text: {"all": [0, 1]}[text])
    monkeypatch.setattr(grid, "run_cases", run_cases)
    monkeypatch.setenv("MLAGATE_GRID", "quick")
    monkeypatch.setenv(asv_suite.GPUS_ENV, "all")
    monkeypatch.setenv(asv_suite.DEADLINE_ENV, "123.5")
    monkeypatch.setenv(asv_suite.CASES_ENV, str(tmp_path / "cases.json"))
    assert asv_suite.measure_grid() == {}
    # measuring stops in time for asv to store every case of the grid, this runner's or not
    measuring_deadline = 123.5 - asv_suite.ASV_S_PER_CASE * len(asv_suite.cases(sharded=False))
    assert seen["gpus"] == [0, 1] and seen["deadline"] == pytest.approx(measuring_deadline)
    assert seen["compiled"] == seen["cases"]  # the compile has no deadline: the gated cases need every kernel
    assert seen["ready"] == "the compile's folder" and not seen["compiling"]
    record_first = [b for b in seen["budgets"] if b == "record"]
    assert seen["budgets"][:len(record_first)] == record_first and "baseline" in seen["budgets"]
    written = json.loads((tmp_path / "cases.json").read_text())
    assert written["results"] == [] and [line.split(";")[0].split()[:2] for line in written["said"]] == [
        ["measuring", "pass"]]  # where its time went, which `mlagate record` prints


# -- on a host with two or more GPUs ------------------------------------------------------------

def _gpu_count() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


several = pytest.mark.skipif(_gpu_count() < 2, reason="needs two or more GPUs on one host")


@pytest.mark.gpu
@several
def test_the_consistency_check_reads_every_gpu_of_the_host():
    check = gpu_check.check_gpus(config.load(), "all", echo=lambda *_: None)
    readings = check["gpus"]
    assert [r["gpu"] for r in readings] == list(range(_gpu_count()))
    assert len({r["uuid"] for r in readings}) == len(readings) and all(r["uuid"] for r in readings)
    assert all(r["median_s"] > 0 for r in readings)


@pytest.mark.gpu
@several
def test_a_grid_point_is_measured_on_one_gpu_with_all_its_implementations():
    cfg = config.load()
    cases = cfg.cases("quick", ["tilelang-hopper", "tilelang-cdna3"], "cuda")  # both run wherever tilelang does
    results = grid.run_cases(cases, cfg.timing, gpus=[0, 1])
    assert all(r.status == RunStatus.OK for r in results), [r.reason for r in results]
    by_point = collections.defaultdict(set)
    for r in results:
        by_point[shards.point(r.case)].add((r.gpu, r.samples.uuid))
    assert all(len(where) == 1 for where in by_point.values()), by_point
    assert {gpu for where in by_point.values() for gpu, _ in where} == {0, 1}  # the quick grid's 2 points, dealt

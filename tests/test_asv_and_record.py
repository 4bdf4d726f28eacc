"""The asv suite on a CPU: discovered; a record refuses without a GPU, runs through asv when
the GPU check stands aside (every case skipped with its reason), and the store refuses to record
a commit twice."""

import itertools
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from mlagate import cli, gitops
from mlagate import config as config_mod
from mlagate.store import record
from mlagate.store.results import Store
from mlagate.store.results_file import BENCH_TIME


def test_asv_discovers_the_benchmarks(tmp_path):
    conf = json.loads((gitops.REPO / "asv.conf.json").read_text())
    assert conf["environment_type"] == "existing"
    conf.update(repo=str(gitops.REPO), benchmark_dir=str(gitops.REPO / "benchmarks"), results_dir=str(tmp_path / "r"),
                html_dir=str(tmp_path / "h"))
    (tmp_path / "asv.json").write_text(json.dumps(conf))
    out = subprocess.run([sys.executable, "-m", "asv", "check", "--python=same",
                          "--config", str(tmp_path / "asv.json")], capture_output=True, text=True, cwd=gitops.REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "No problems found" in out.stdout


def test_benchmark_params_come_from_the_config(monkeypatch):
    monkeypatch.setenv("MLAGATE_GRID", "quick")
    monkeypatch.setenv("MLAGATE_IMPLS", "tilelang-hopper,flash_mla")
    from mlagate.measure import asv_suite

    params, names = asv_suite.params()
    assert names == ["impl", "batch", "seqlen", "dtype", "heads", "q_len", "kv_dtype"]
    # Hopper's fp8 cache is read with a bf16 query: asv's product holds (float16, fp8) and (bfloat16, float16)
    # too, which no case is (skipped: "not measured")
    assert params == [["tilelang-hopper", "flash_mla"], [64, 128], [4096], ["float16", "bfloat16"], [16], [1, 2],
                      ["float16", "float8_e4m3fn"]]
    # the workloads' own classes: their parameter product is their cases, no dense point in it
    params, names = asv_suite.params(workloads=True)
    assert names == ["impl", "batch", "seqlen", "dtype", "heads", "q_len", "kv_dtype", "workload"]
    cfg = asv_suite.config()
    tags = [cfg.workloads[name].tag(64) for name in cfg.grid.workloads["quick"]]  # name@digest of the definition
    assert params == [["tilelang-hopper", "flash_mla"], [64, 128], [4096], ["float16", "bfloat16"], [16], [1, 2],
                      ["float16", "float8_e4m3fn"], tags]


def test_each_platform_measures_the_dtypes_its_vendor_takes(monkeypatch):
    """aiter's decode takes bf16 (or fp8) queries only: an fp16 grid on ROCm has no vendor ratio."""
    monkeypatch.setenv("MLAGATE_GRID", "quick")
    from mlagate.measure import asv_suite

    monkeypatch.setattr(asv_suite, "platform", lambda: "rocm")
    assert {(c.dtype, c.kv_dtype) for c in asv_suite.cases()} == {("bfloat16", "bfloat16"),
                                                                  ("bfloat16", "float8_e4m3fnuz")}
    monkeypatch.setattr(asv_suite, "platform", lambda: "cuda")  # fp8: a bf16 query over Hopper's e4m3fn
    assert {(c.dtype, c.kv_dtype) for c in asv_suite.cases()} == {("float16", "float16"),
                                                                  ("bfloat16", "float8_e4m3fn")}
    monkeypatch.setenv("MLAGATE_DTYPES", "bfloat16,float16")
    assert {c.dtype for c in asv_suite.cases()} == {"bfloat16", "float16"}


def _time_decode(monkeypatch, name="TimeDecode.time_decode"):
    """asv_runner's own TimeDecode (or another) benchmark object, discovered as `asv run` discovers it."""
    from asv_runner.discovery import disc_benchmarks

    monkeypatch.setenv("MLAGATE_GRID", "quick")
    monkeypatch.setenv("MLAGATE_IMPLS", "tilelang-hopper")
    return next(b for b in disc_benchmarks(str(gitops.REPO / "benchmarks")) if b.name.endswith(name))


def _run_asv_case(bench, measured, case):
    """What asv_runner.run does for one case: set the cache, setup, run, teardown."""
    bench.set_param_idx(list(itertools.product(*bench._params)).index(case.key[:len(bench._params)]))
    bench.set_cache(measured)
    skip = bench.do_setup()
    try:
        return None if skip else bench.do_run()
    finally:
        bench.do_teardown()


def test_asv_stores_exactly_the_samples_the_grid_measured(monkeypatch):
    """One measurement per record: asv's samples for a case are time_gpu's, one for one, in order,
    through asv_runner's own timing loop (its warm-up, repeat and re-setup between samples)."""
    from mlagate.case import CaseResult, RunStatus, Samples
    from mlagate.measure import asv_suite

    bench = _time_decode(monkeypatch)
    first, second = asv_suite.cases()[:2]
    times_ms = {first: (0.05, 0.07, 0.06, 0.08, 0.051), second: (0.1, 0.2, 0.3)}
    measured = {c: CaseResult(c, RunStatus.OK, samples=Samples(t, "cuda-event", 0, 0, "test"))
                for c, t in times_ms.items()}
    for case in (first, second, second):  # the same case again in one process: its samples again
        result = _run_asv_case(bench, measured, case)
        assert result["number"] == 1
        assert result["samples"] == [t / 1e3 for t in times_ms[case]]


def test_a_workload_case_replays_through_its_own_benchmark(monkeypatch):
    from mlagate.case import CaseResult, RunStatus, Samples
    from mlagate.measure import asv_suite

    bench = _time_decode(monkeypatch, "TimeWorkload.time_decode")
    case = next(c for c in asv_suite.cases() if c.workload.startswith("ragged-4k@"))
    dense = next(c for c in asv_suite.cases() if not c.paged and c.batch == case.batch)
    measured = {c: CaseResult(c, RunStatus.OK, samples=Samples(t, "cuda-event", 0, 0, "test"))
                for c, t in ((case, (0.2, 0.3)), (dense, (0.1,)))}
    assert _run_asv_case(bench, measured, case)["samples"] == [0.2e-3, 0.3e-3]


def test_asv_skips_what_the_grid_skipped(monkeypatch):
    from mlagate.case import CaseResult, RunStatus
    from mlagate.measure import asv_suite

    bench = _time_decode(monkeypatch)
    case = asv_suite.cases()[0]
    skipped = {case: CaseResult(case, RunStatus.SKIPPED, "not measured: the time budget ran out")}
    assert _run_asv_case(bench, skipped, case) is None


def files(root) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_record_without_a_gpu_refuses_before_writing_anything(tmp_path, capsys, monkeypatch, clone):
    """All-skipped results would stay in the append-only store for good, and block the commit."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the check itself, on any host
    results = tmp_path / "results"
    results.mkdir()
    (results / "kept.txt").write_text("as it was")
    args = ["record", "--rev", "HEAD", "--machine", "cpu-test", "--grid", "quick", "--impl", "torch",
            "--results", str(results)]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "no GPU" in err and str(results) in err
    assert files(results) == {"kept.txt": b"as it was"}
    assert not (clone / ".asv" / "records").exists()


@pytest.mark.slow
def test_record_on_a_cpu_through_asv_then_refuses_a_second_record(tmp_path, capsys, monkeypatch, clone):
    """The whole asv path, on a CPU: the GPU check (in this process, before asv starts) stands
    aside and the suite skips every case with its reason."""
    monkeypatch.setattr(record, "gpu_available", lambda: True)
    # the env sidecar names the commit recorded, not the checkout's HEAD (a record of base runs from head)
    monkeypatch.setattr(record.environment.gitops, "head_or_none", lambda repo=None: "f" * 40)
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    monkeypatch.chdir(tmp_path)  # a relative --results, as `make bench` passes it
    args = ["record", "--rev", "HEAD", "--machine", "cpu-test", "--grid", "quick", "--impl", "torch",
            "--impl", "aiter", "--results", "store"]
    assert cli.main(args) == 0
    head = Store(store_dir).load("cpu-test", gitops.resolve("HEAD"))
    entries = head.entries(BENCH_TIME)  # with the workloads' benchmark, read into the same cases
    cfg = config_mod.load()
    tags = ["dense", *(cfg.workloads[name].tag(64) for name in cfg.grid.workloads["quick"])]
    # asv's product: both query dtypes (float16; bfloat16, the fp8 cache's) and both caches (float16, e4m3fn)
    assert set(entries) == {(i, b, 4096, d, 16, q, kv, w) for i in ("torch", "aiter") for b in (64, 128)
                            for q in (1, 2) for d in ("float16", "bfloat16") for kv in ("float16", "float8_e4m3fn")
                            for w in tags}
    assert all(e.status == "skipped" for e in entries.values())
    env = Store(store_dir).read_sidecar("cpu-test", head.commit, "env")
    assert env["grid"] == "quick" and env["start"]["commit"] == env["end"]["commit"] == head.commit
    log = Store(store_dir).read_sidecar("cpu-test", head.commit, "asv-log")["log"]
    assert "not measured (no GPU, or not in this run's grid)" in log
    assert not math.isnan(head.date)
    recorded = files(store_dir)
    assert sorted(recorded) == sorted(["benchmarks.json", "cpu-test/machine.json", ".mlagate.lock",
                                       f"cpu-test/{head.commit[:8]}-asv-log.sidecar",
                                       f"cpu-test/{head.commit[:8]}-env.sidecar",
                                       str(Path(head.paths[0]).relative_to(store_dir.resolve()))])
    assert list((clone / ".asv" / "records").iterdir()) == []  # the record's tree is gone
    capsys.readouterr()
    assert cli.main(args) == 2
    assert "already recorded" in capsys.readouterr().err
    assert files(store_dir) == recorded


def test_the_suite_imports_without_touching_the_gpu():
    """asv's forkserver forks every case from the process that imported the suite: a
    device query there (cuInit/hipInit) would leave no forked child able to use the GPU."""
    probe = """
import sys, torch
calls = []
def spy(name, real):
    def wrapped(*a, **k):
        calls.append(name)
        return real(*a, **k)
    return wrapped
if hasattr(torch._C, "_cuda_getDeviceCount"):  # CUDA/ROCm builds only
    torch._C._cuda_getDeviceCount = spy("getDeviceCount", torch._C._cuda_getDeviceCount)
torch.cuda.is_available = spy("is_available", torch.cuda.is_available)
torch.cuda.device_count = spy("device_count", torch.cuda.device_count)
sys.path.insert(0, "benchmarks")
import mla_decode
print(calls, "tilelang" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=gitops.REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[] False"


FN = "float8_e4m3fn"


@pytest.mark.slow
def test_a_sharded_record_measures_only_its_runners_points(tmp_path, capsys, monkeypatch, clone):
    """--shard reaches the asv suite: the results file holds this runner's grid points only, and
    the env sidecar says which shard it is (what `mlagate results merge` checks)."""
    from mlagate.case import Case
    from mlagate.measure.shards import runner_shard

    monkeypatch.setattr(record, "gpu_available", lambda: True)
    mine = runner_shard(Case("torch", 64, 4096, "float16", 16), 2)
    args = ["record", "--rev", "HEAD", "--machine", "cpu-test", "--grid", "quick", "--impl", "torch",
            "--shard", f"{mine + 1}/2", "--results", str(tmp_path / "store")]
    assert cli.main(args) == 0
    store = Store(tmp_path / "store")
    head = store.load("cpu-test", gitops.resolve("HEAD"))
    keys = head.entries(BENCH_TIME)
    # the file holds the product of the values of this runner's dense points (asv's parameters), no more
    points = {(b, q) for b in (64, 128) for q in (1, 2) for d, kv in (("float16", "float16"), ("bfloat16", FN))
              if runner_shard(Case("torch", b, 4096, d, 16, q, kv), 2) == mine}
    assert {(k[1], k[5]) for k in keys if k[7] == "dense"} == {(b, q) for b, _ in points for _, q in points}
    # a workload's points are dealt by the same hash; the other runner's are only asv's parameter product
    others = [k for k in keys if runner_shard(Case(*k), 2) != mine]
    assert all(keys[k].status == "skipped" for k in others)
    assert store.read_sidecar("cpu-test", head.commit, "env")["shard"] == f"{mine + 1}/2"


@pytest.mark.parametrize("option,value", [("--shard", "3/2"), ("--shard", "two"), ("--gpus", "0,x")])
def test_a_bad_shard_or_gpu_list_is_refused_before_anything_is_written(tmp_path, capsys, monkeypatch, clone,
                                                                      option, value):
    monkeypatch.setattr(record, "gpu_available", lambda: True)
    results = tmp_path / "store"
    results.mkdir()
    (results / "kept.txt").write_bytes(b"as it was")
    args = ["record", "--rev", "HEAD", "--machine", "cpu-test", option, value, "--results", str(results)]
    assert cli.main(args) == 2
    assert option in capsys.readouterr().err
    assert files(results) == {"kept.txt": b"as it was"}


def test_a_shard_that_owns_no_workload_point_still_has_the_workload_classes(monkeypatch):
    """`mlagate results merge` needs every benchmark in every shard: the workloads' parameters are the
    whole grid's under --shard (the points of other runners are skipped there)."""
    from mlagate.case import Case
    from mlagate.measure import asv_suite
    from mlagate.measure.shards import runner_shard

    monkeypatch.setenv("MLAGATE_GRID", "quick")
    monkeypatch.setenv("MLAGATE_IMPLS", "tilelang-hopper")
    whole = asv_suite.params(workloads=True)
    points = [c for c in asv_suite.cases() if c.paged]
    shards = 16
    idle = next(i for i in range(shards) if all(runner_shard(Case(*c.key), shards) != i for c in points))
    monkeypatch.setenv("MLAGATE_SHARD", f"{idle + 1}/{shards}")
    assert not [c for c in asv_suite.cases() if c.paged]  # this runner measures none of them
    assert asv_suite.params(workloads=True) == whole and whole[0][0]

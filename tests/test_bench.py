"""The grid runner's fault isolation, with a stand-in worker (no GPU needed)."""

import json
import os
import stat
import sys
import textwrap
from pathlib import Path

import pytest

from mlagate import config
from mlagate.case import Case, CaseResult, RunStatus
from mlagate.measure import grid, metrics

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "h200"
FAKE_WORKER = textwrap.dedent('''
    import json, os, signal, sys
    MARK = "@@mlagate "
    job = json.load(sys.stdin)
    print("library noise that is not protocol", flush=True)
    for index, fields, budget in job["cases"]:
        print(MARK + json.dumps({"event": "start", "index": index}), flush=True)
        if fields["seqlen"] == 666:
            sys.stderr.write("illegal memory access\\n"); sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGSEGV)
        status = "skipped" if fields["impl"] == "aiter" else "ok"
        # which process ran it, with which visible devices: in samples.device, where it was measured
        device = json.dumps({"pid": os.getpid(),
                             "visible": {k: v for k, v in os.environ.items() if k.endswith("_DEVICES")}})
        samples = {"times_ms": [1.0, 1.1, 0.9], "backend": "fake", "flush_bytes": 0, "warmup_calls": 0,
                   "device": device}
        result = dict(fields, status=status, reason=None if status == "ok" else "aiter: not installed",
                      samples=samples if status == "ok" else None, error={})
        print(MARK + json.dumps({"event": "done", "index": index, "result": result}), flush=True)
''')


def fake_python(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(FAKE_WORKER)
    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {script}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


def cases(*seqlens, impl="tilelang-hopper"):
    return [Case(impl, 64, s, "float16") for s in seqlens]


def worker(result: CaseResult) -> dict:
    """The stand-in worker's pid and visible devices for a case it measured."""
    return json.loads(result.samples.device)


def test_cases_past_the_deadline_are_skipped_by_name():
    """The real worker: a record out of time keeps what it measured and names what it did not."""
    timing = config.load().timing
    rows = grid.run_cases(cases(1024, 2048, 4096), timing, budgets=["baseline", "record", "baseline"], deadline=1.0)
    # the record-budget case is not skipped (it fails here: no GPU); the baselines are, by name
    assert [r.status for r in rows] == [RunStatus.SKIPPED, RunStatus.FAILED, RunStatus.SKIPPED]
    assert all("timing.record_s = 300 s" in r.reason and "ran out" in r.reason for r in rows[::2]), rows


def test_each_case_goes_to_the_worker_with_its_budget(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text("import json, sys\njob = json.load(sys.stdin)\n"
                      f"open({str(tmp_path / 'job.json')!r}, 'w').write(json.dumps(job))\n")
    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {script}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    grid.run_cases(cases(1024, 2048), config.load().timing, budgets=["record", "baseline"], deadline=123.0,
                   compiled="/tmp/the-compile-ahead", python=str(exe))
    job = json.loads((tmp_path / "job.json").read_text())
    assert [c[2] for c in job["cases"]] == ["record", "baseline"]
    assert job["deadline"] == 123.0 and job["compiled"] == "/tmp/the-compile-ahead"
    assert grid.timing_from_dict(job["timing"]) == config.load().timing


def test_a_crashing_case_fails_alone_and_the_grid_goes_on(tmp_path):
    timing = config.load().timing
    seen = []
    rows = grid.run_cases(cases(1024, 666, 2048, 4096), timing, python=fake_python(tmp_path), on_result=seen.append)
    assert [r.status for r in rows] == [RunStatus.OK, RunStatus.FAILED, RunStatus.OK, RunStatus.OK]
    assert "worker exited with code -11 during this case" in rows[1].reason
    assert "illegal memory access" in rows[1].reason
    assert worker(rows[0])["pid"] != worker(rows[2])["pid"]  # a fresh worker took over after the crash
    assert len(seen) == 4


def test_skips_keep_their_reason(tmp_path):
    rows = grid.run_cases(cases(1024, impl="aiter"), config.load().timing, python=fake_python(tmp_path))
    assert rows[0].status == RunStatus.SKIPPED and rows[0].reason == "aiter: not installed"


def test_a_worker_that_cannot_start_fails_every_case_once(tmp_path):
    broken = tmp_path / "broken"
    broken.write_text("#!/bin/sh\necho 'no such module' >&2\nexit 1\n")
    broken.chmod(broken.stat().st_mode | stat.S_IEXEC)
    rows = grid.run_cases(cases(1024, 2048), config.load().timing, python=str(broken))
    assert all(r.status == RunStatus.FAILED and "failed to start" in r.reason for r in rows)


def test_cases_spread_over_gpus_record_their_gpu(tmp_path):
    rows = grid.run_cases(cases(1024, 2048, 4096, 8192), config.load().timing, gpus=[0, 1],
                           python=fake_python(tmp_path))
    assert {r.gpu for r in rows} == {0, 1}
    assert all(r.status == RunStatus.OK for r in rows)


def test_outputs_are_json_and_csv(tmp_path):
    rows = metrics.add_metrics(grid.run_cases(cases(1024), config.load().timing, python=fake_python(tmp_path)))
    grid.write_outputs(tmp_path / "bench.json", rows, {"gpu": "none"})
    assert (tmp_path / "bench.csv").read_text().splitlines()[0].startswith("impl,batch,seqlen")
    assert os.path.getsize(tmp_path / "bench.json") > 100
    back, environment = grid.read_outputs(tmp_path / "bench.json")
    assert environment == {"gpu": "none"} and back[0].case == rows[0].case
    assert json.dumps([r.to_dict() for r in back]) == json.dumps([r.to_dict() for r in rows])  # NaN CI of 3 samples


def test_a_bench_file_on_disk_reads_back_to_the_same_json():
    """The record keeps the file format: every row of an `mlagate bench --out` file (ok and skipped)
    turns into a CaseResult and back into the same JSON, plus the sampling windows' fields (empty:
    that file predates them)."""
    with open(FIXTURES / "bench_full_fp16_2026-11-29.json") as f:
        rows = json.load(f)["results"]
    results = [CaseResult.from_dict(r) for r in rows]
    windowless = {"budget": "", "windows": [], "dropped_ms": [], "uuid": ""}
    # it predates workloads, q_len and kv_dtype too (a cache in the query's dtype)
    dense = {"q_len": 1, "workload": "dense", "page_size": 0, "lengths": []}
    assert [r.to_dict() for r in results] == [{**r, **dense, "kv_dtype": r["dtype"], "samples": {
        **r["samples"], **windowless}} if r["samples"] else {**r, **dense, "kv_dtype": r["dtype"]} for r in rows]
    assert {r.status for r in results} == {RunStatus.OK, RunStatus.SKIPPED}
    assert all(r.samples.times_ms and r.tflops and r.vendor_ratio for r in results if r.status == RunStatus.OK)


# -- a worker's visible device is an entry of the parent's list -------------------

VISIBLE = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


@pytest.fixture(autouse=True)
def _no_visible_devices(monkeypatch):
    """Every test here starts without a visible-devices list (GPU runners set one)."""
    for name in VISIBLE:
        monkeypatch.delenv(name, raising=False)


def test_a_worker_gets_the_entry_of_the_parents_list():
    env = grid.worker_visible_env
    assert env({"HIP_VISIBLE_DEVICES": "3"}, 0) == {"HIP_VISIBLE_DEVICES": "3"}  # compose's container GPU
    assert env({"HIP_VISIBLE_DEVICES": "2,5"}, 1) == {"HIP_VISIBLE_DEVICES": "5"}
    assert env({"CUDA_VISIBLE_DEVICES": "4, 6", "HIP_VISIBLE_DEVICES": "4,6"}, 1) == {
        "CUDA_VISIBLE_DEVICES": "6", "HIP_VISIBLE_DEVICES": "6"}
    uuids = "GPU-8e6b2f1c-0d3a-4c5e-9f7a-1b2c3d4e5f60,GPU-4b2c1a9f-8d3e-6f7a-b5c9-2e4d8a1f6c3b"
    assert env({"CUDA_VISIBLE_DEVICES": uuids}, 1) == {"CUDA_VISIBLE_DEVICES": uuids.split(",")[1]}
    rocr = {"ROCR_VISIBLE_DEVICES": "0,GPU-DEADBEEFDEADBEEF"}
    assert env(rocr, 1) == {"ROCR_VISIBLE_DEVICES": "GPU-DEADBEEFDEADBEEF"}  # only ROCR set: it is narrowed
    # ROCr masks first and HIP indexes what it leaves: ROCR stays whole, HIP (or CUDA) is narrowed.
    assert env({"ROCR_VISIBLE_DEVICES": "4,5,6,7", "HIP_VISIBLE_DEVICES": "1,3"}, 1) == {"HIP_VISIBLE_DEVICES": "3"}
    assert env({"ROCR_VISIBLE_DEVICES": "4,5,6,7", "CUDA_VISIBLE_DEVICES": "2,0"}, 0) == {"CUDA_VISIBLE_DEVICES": "2"}
    assert env({}, 2) == {"CUDA_VISIBLE_DEVICES": "2", "HIP_VISIBLE_DEVICES": "2"}  # nothing set: the bare index
    assert env({"PATH": "/usr/bin"}, 0) == {"CUDA_VISIBLE_DEVICES": "0", "HIP_VISIBLE_DEVICES": "0"}


def test_an_index_past_the_parents_list_names_the_variable(monkeypatch):
    with pytest.raises(ValueError, match=r"GPU 1: HIP_VISIBLE_DEVICES='3' lists 1 device\(s\)"):
        grid.worker_visible_env({"HIP_VISIBLE_DEVICES": "3"}, 1)
    with pytest.raises(ValueError, match=r"ROCR_VISIBLE_DEVICES='GPU-aa,GPU-bb' lists 2 device"):
        grid.worker_visible_env({"ROCR_VISIBLE_DEVICES": "GPU-aa,GPU-bb"}, 2)
    with pytest.raises(ValueError, match=r"CUDA_VISIBLE_DEVICES='' lists 0 device"):
        grid.worker_visible_env({"CUDA_VISIBLE_DEVICES": ""}, 0)
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "3,5")
    assert grid.parse_gpus("1,0") == [1, 0]
    with pytest.raises(ValueError, match="GPU 2: HIP_VISIBLE_DEVICES='3,5'"):  # mlagate bench exits 2 up front
        grid.parse_gpus("0,2")


def test_workers_time_the_parents_gpus_and_a_missing_one_fails_its_cases(tmp_path, monkeypatch):
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "2,5")
    rows = grid.run_cases(cases(1024, 2048, 4096, 8192), config.load().timing, gpus=[0, 1],
                           python=fake_python(tmp_path))
    assert all(r.status == RunStatus.OK for r in rows)
    assert {(r.gpu, worker(r)["visible"]["HIP_VISIBLE_DEVICES"]) for r in rows} == {(0, "2"), (1, "5")}
    assert all("CUDA_VISIBLE_DEVICES" not in worker(r)["visible"] for r in rows)  # not invented where unset
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "3")
    rows = grid.run_cases(cases(1024, 2048), config.load().timing, gpus=[0, 1], python=fake_python(tmp_path))
    by_gpu = {r.gpu: r for r in rows}
    assert by_gpu[0].status == RunStatus.OK and worker(by_gpu[0])["visible"]["HIP_VISIBLE_DEVICES"] == "3"
    assert by_gpu[1].status == RunStatus.FAILED and "HIP_VISIBLE_DEVICES='3' lists 1 device" in by_gpu[1].reason


# -- a worker that exits before reading its job ------------------------------------

def test_a_worker_that_exits_before_reading_its_job_fails_every_case_once(tmp_path):
    """The job for 20000 cases is about 2 MB: more than a pipe holds (64 KiB by default, at most
    /proc/sys/fs/pipe-max-size, 1 MiB by default), so writing it to a worker that never reads
    raises BrokenPipeError every time, not only when the worker wins the race."""
    quitter = tmp_path / "quitter"
    quitter.write_text("#!/bin/sh\necho 'ModuleNotFoundError: torch' >&2\nexit 7\n")
    quitter.chmod(quitter.stat().st_mode | stat.S_IEXEC)
    seen = []
    many = cases(*range(1, 20001))
    rows = grid.run_cases(many, config.load().timing, python=str(quitter), on_result=seen.append)
    assert len(rows) == len(seen) == 20000
    assert {r.status for r in rows} == {RunStatus.FAILED}
    assert {r.reason for r in rows} == {"worker failed to start (code 7): ModuleNotFoundError: torch"}


def test_a_broken_pipe_is_reported_like_a_worker_that_did_not_start(tmp_path, monkeypatch):
    """The race itself, forced: the worker is gone before the job is written."""
    real_popen = grid.subprocess.Popen

    def popen(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        proc.wait()  # exited without reading stdin
        return proc

    monkeypatch.setattr(grid.subprocess, "Popen", popen)
    broken = tmp_path / "broken"
    broken.write_text("#!/bin/sh\necho 'no such module' >&2\nexit 1\n")
    broken.chmod(broken.stat().st_mode | stat.S_IEXEC)
    rows = grid.run_cases(cases(1024, 2048), config.load().timing, python=str(broken))
    assert [r.reason for r in rows] == ["worker failed to start (code 1): no such module"] * 2

"""A record and a bench compile their TileLang kernels in parallel while they time (measure.precompile), so a
kernel edit costs one parallel compile beside the timed run, not a compile per case inside it: which kernels
(those the launches then build), in which order, that the worker waits only for a kernel not compiled yet, and
that a fault there is a printed line, never a lost record."""

import dataclasses
import json
import os
import threading
import time

import pytest

from mlagate import config
from mlagate.case import Case
from mlagate.kernels import mla_decode as m
from mlagate.kernels import mla_decode_paged
from mlagate.measure import asv_suite, environment, grid, harness, impls, precompile

CFG = config.load()
QUICK = CFG.cases("quick", CFG.implementations, "cuda", ["float16"])
TILELANG = sorted({c.impl for c in QUICK if c.impl.startswith("tilelang-")})


def small(case: Case) -> Case:
    """The case at CPU size: batch 2; a paged case keeps its page size, with two lengths (one tail page)."""
    if case.paged:
        return dataclasses.replace(case, batch=2, seqlen=100, lengths=(130, 70))
    return dataclasses.replace(case, batch=2, seqlen=200)


@pytest.fixture
def launches(monkeypatch):
    """What the timed launches compile on an sm_90 GPU, on CPU tensors: [(shape, config[, lengths])]."""
    built = []
    monkeypatch.setattr(m, "device_arch", lambda device: "sm_90")
    monkeypatch.setattr(m, "check_device", lambda named: None)
    monkeypatch.setattr(mla_decode_paged, "check_device", lambda named: None)
    monkeypatch.setattr(m, "compiled", lambda shape, config, device: built.append((shape, config)))
    monkeypatch.setattr(mla_decode_paged, "compiled",
                        lambda shape, config, device, lengths: built.append((shape, config, tuple(lengths))))
    return built


@pytest.mark.parametrize("impl", TILELANG)
def test_each_case_names_the_kernel_its_launch_compiles(launches, impl):
    for case in {small(c) for c in QUICK if c.impl == impl}:
        impls.prepare(impl, harness.Inputs(case, "cpu").tensors, "cpu")
        assert impls.case_kernel(case, "sm_90") == launches.pop(), case.label()


def test_the_seesaws_paged_kernel_is_the_seesaw_over_pages_and_other_impls_have_none():
    paged = next(c for c in QUICK if c.impl == "tilelang-seesaw" and c.paged)
    config = impls.case_kernel(paged, "sm_90")[1]
    assert (config.schedule, config.num_split) == ("seesaw", 0)
    assert {impls.case_kernel(c, "sm_90") for c in QUICK if not c.impl.startswith("tilelang-")} == {None}


def test_a_config_that_cannot_run_on_the_arch_is_left_to_the_launch():
    assert {c.impl for c in QUICK if impls.case_kernel(c, "gfx942") is not None} == {"tilelang-cdna3"}


@pytest.fixture
def on_sm_90(monkeypatch):
    monkeypatch.setattr(environment, "device", lambda: "cuda:0")
    monkeypatch.setattr(m, "device_arch", lambda device: "sm_90")


def test_the_kernels_are_compiled_once_each_in_the_cases_order_until_told_to_stop(on_sm_90, monkeypatch):
    seen, lines = {}, []

    def fake_precompile(kernels, jobs, echo, stop, ready):
        seen.update(kernels=kernels, jobs=jobs, stop=stop)
        return {kernels[-1]: "RuntimeError: boom"}

    monkeypatch.setattr(precompile, "precompile", fake_precompile)
    timed = threading.Event()
    failed = precompile.precompile_cases(QUICK + QUICK, 3, echo=lines.append, stop=timed.is_set)
    expected = list(dict.fromkeys(k for c in QUICK if (k := impls.case_kernel(c, "sm_90"))))
    assert seen["kernels"] == expected and seen["jobs"] == 3 and seen["stop"] == timed.is_set
    last = next(c for c in QUICK if impls.case_kernel(c, "sm_90") == expected[-1])
    assert failed == {last.label(): "RuntimeError: boom"}
    assert lines[0].startswith(f"compiled {len(expected) - 1} of {len(expected)} TileLang kernels in 3 processes")
    assert f"failed: {last.label()}: RuntimeError: boom" in lines[0]
    precompile.precompile_cases(QUICK, 1, echo=lines.append)
    assert seen["jobs"] == 2  # never in the calling process: a compiler crash takes only its own process


def test_a_fault_before_any_compile_is_a_line_and_the_record_still_measures(on_sm_90, monkeypatch):
    def broken_table(case, arch):
        raise ValueError("kernels/tuned/sm_90.yaml: version: must be 1")

    monkeypatch.setattr(impls, "case_kernel", broken_table)
    lines = []
    assert precompile.precompile_cases(QUICK, 3, echo=lines.append) == {}
    assert "failed (ValueError: kernels/tuned/sm_90.yaml" in lines[0] and "each case compiles its own" in lines[0]

    import torch

    measured = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(asv_suite, "platform", lambda: "cuda")
    monkeypatch.setattr(grid, "run_cases", lambda cases, *a, **k: measured.extend(cases) or [])
    monkeypatch.setenv("MLAGATE_GRID", "quick")
    assert asv_suite.measure_grid() == {} and len(measured) == len(asv_suite.cases())


def test_no_tilelang_case_asks_for_the_gpu_or_compiles(monkeypatch):
    monkeypatch.setattr(environment, "device", lambda: pytest.fail("no TileLang case: no device query"))
    monkeypatch.setattr(precompile, "precompile", lambda *a, **k: pytest.fail("nothing to compile"))
    assert precompile.precompile_cases([c for c in QUICK if c.impl == "flash_mla"], 3) == {}


def test_the_default_jobs_leave_a_core_per_worker_and_the_host_and_stay_between_2_and_16(monkeypatch):
    for cores, workers, jobs in ((2, 1, 2), (8, 1, 6), (16, 1, 14), (16, 8, 7), (128, 1, 16)):
        monkeypatch.setattr(precompile.os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
        assert precompile.default_jobs(workers) == jobs


def test_the_worker_waits_for_a_kernel_until_the_compile_alongside_has_it(on_sm_90, monkeypatch):
    kernels = list(dict.fromkeys(k for c in QUICK if (k := impls.case_kernel(c, "sm_90"))))
    first = next(c for c in QUICK if impls.case_kernel(c, "sm_90") == kernels[0])
    second = next(c for c in QUICK if impls.case_kernel(c, "sm_90") == kernels[1])
    go_on = threading.Event()

    stops = []

    def fake_precompile(kernels, jobs, echo, stop, ready):  # the first kernel at once, the rest once told
        stops.append(stop)
        for n, kernel in enumerate(kernels):
            if n == 1:
                assert go_on.wait(30)
            open(os.path.join(ready, precompile.marker(kernel)), "w").close()
        return {}

    monkeypatch.setattr(precompile, "precompile", fake_precompile)
    lines = []
    with precompile.ahead(QUICK, 3, echo=lines.append) as ready:
        assert precompile.wait_compiled(ready, first, "cuda:0", limit_s=30) < 30
        assert precompile.wait_compiled(ready, second, "cuda:0", limit_s=0.2) >= 0.2  # not compiled yet: waits
        go_on.set()
        assert precompile.wait_compiled(ready, second, "cuda:0", limit_s=30) < 30
        assert not stops[0]()  # the timing still runs: compiles may start
        done = os.path.join(ready, precompile.DONE)
        for _ in range(3000):  # the rest, before the timing ends (bounded: 60 s)
            if os.path.exists(done):
                break
            time.sleep(0.02)
    assert not os.path.exists(ready)  # the folder goes with the compile
    assert stops[0]()  # the timing is over: no compile starts
    assert lines and lines[0].startswith(f"compiled {len(kernels)} of {len(kernels)} TileLang kernels")


def test_a_compile_that_stops_early_releases_the_worker(on_sm_90, monkeypatch):
    """Past the deadline, or failing before any kernel: the worker compiles what it needs itself."""
    monkeypatch.setattr(precompile, "precompile", lambda kernels, *a, **k: {})  # no kernel marked
    case = next(c for c in QUICK if c.impl == "tilelang-seesaw")
    with precompile.ahead(QUICK, 3, echo=lambda line: None) as ready:
        assert precompile.wait_compiled(ready, case, "cuda:0", limit_s=30) < 30

    def broken(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(precompile, "precompile_cases", broken)  # even an error precompile_cases does not catch
    lines = []
    with precompile.ahead(QUICK, 3, echo=lines.append) as ready:
        assert precompile.wait_compiled(ready, case, "cuda:0", limit_s=30) < 30
    assert lines == ["compiling the TileLang kernels beside the timing failed (RuntimeError: boom); "
                     "each case compiles its own"]


def test_nothing_to_wait_for_without_a_compile_or_a_tilelang_kernel(on_sm_90, monkeypatch, tmp_path):
    tilelang = next(c for c in QUICK if c.impl == "tilelang-hopper")
    assert precompile.wait_compiled(None, tilelang, "cuda:0") == 0
    assert precompile.wait_compiled(str(tmp_path), next(c for c in QUICK if c.impl == "flash_mla"), "cuda:0") == 0

    def broken_table(case, arch):
        raise ValueError("kernels/tuned/sm_90.yaml: version: must be 1")

    monkeypatch.setattr(impls, "case_kernel", broken_table)  # the launch reports it, as without the compile
    assert precompile.wait_compiled(str(tmp_path), tilelang, "cuda:0") == 0


def test_a_case_sent_to_the_worker_names_the_kernel_the_compile_marked():
    """The worker rebuilds each case from the job's JSON (grid._worker): its kernel's marker must be the one
    the compile wrote, for every kernel of the full grid, paged ones (their lengths a JSON list) too."""
    full = [c for c in CFG.cases("full", CFG.implementations, "cuda", ["float16", "bfloat16"])
            if impls.case_kernel(c, "sm_90")]
    assert any(c.paged for c in full)
    for case in full:
        sent = Case(**json.loads(json.dumps(dataclasses.asdict(case))))
        marker = precompile.marker(impls.case_kernel(case, "sm_90"))
        assert precompile.marker(impls.case_kernel(sent, "sm_90")) == marker


def test_the_worker_waits_for_each_kernel_and_warms_up_again_after_a_long_wait(monkeypatch):
    """grid._worker, in this process, on stand-ins: the wait comes before the case's inputs and launch, and a
    GPU left idle past IDLE_REWARM_S warms up as a process's first case does."""
    import io
    import sys

    from mlagate.measure import harness, timer

    events = []
    waits = {1024: 0.0, 2048: 5.0}
    monkeypatch.setattr(environment, "device", lambda: "cuda:0")
    monkeypatch.setattr(precompile, "wait_compiled",
                        lambda ready, case, device: events.append(("wait", ready, case.seqlen)) or waits[case.seqlen])
    monkeypatch.setattr(timer, "rewarm", lambda device: events.append(("rewarm", device)))

    class FakeInputs:
        def __init__(self, case, device):
            self.point = grid.point(case)
            events.append(("inputs", case.seqlen))

    monkeypatch.setattr(harness, "Inputs", FakeInputs)
    monkeypatch.setattr(harness, "measure_case", lambda case, timing, inputs, device, budget, spent: events.append(
        ("measure", case.seqlen)) or grid.CaseResult(case, grid.RunStatus.SKIPPED, "stand-in"))
    cases = [Case("tilelang-seesaw", 64, s, "float16") for s in (1024, 2048)]
    job = {"timing": dataclasses.asdict(CFG.timing), "deadline": None, "compiled": "/the/compile's/folder",
           "cases": [[i, dataclasses.asdict(c), "record"] for i, c in enumerate(cases)]}
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(job)))
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    grid._worker()
    done = [json.loads(line[len(grid.MARK):]) for line in sys.stdout.getvalue().splitlines() if '"done"' in line]
    # each case says where its time went: the wait, and a new point's inputs
    assert [sorted(d["spent"]) for d in done] == [["inputs and reference", "waiting for compiles"]] * 2
    assert events == [("wait", "/the/compile's/folder", 1024), ("inputs", 1024), ("measure", 1024),
                      ("wait", "/the/compile's/folder", 2048), ("rewarm", "cuda:0"), ("inputs", 2048),
                      ("measure", 2048)]


def test_an_orphaned_worker_stops_waiting_when_the_compiles_folder_is_gone(on_sm_90, tmp_path):
    case = next(c for c in QUICK if c.impl == "tilelang-hopper")
    assert precompile.wait_compiled(str(tmp_path / "removed"), case, "cuda:0", limit_s=30) < 30


def test_the_compiling_processes_run_at_a_lower_priority():
    """The measuring worker shares the host with them and must keep the GPU's queue ahead."""
    [(item, niceness)] = list(precompile.in_processes(os.nice, [0], 2))  # os.nice(0): the process's niceness
    assert niceness == os.nice(0) + precompile.NICE

"""A record and a bench compile their TileLang kernels in parallel while they time (measure.precompile), so a
kernel edit costs one parallel compile beside the timed run, not a compile per case inside it: which kernels
(those the launches then build), in which order, that the worker waits only for a kernel not compiled yet, and
that a fault there is a printed line, never a lost record."""

import dataclasses
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


def test_the_seesaws_paged_kernel_is_the_hopper_familys_and_other_impls_have_none():
    paged = next(c for c in QUICK if c.impl == "tilelang-seesaw" and c.paged)
    assert impls.case_kernel(paged, "sm_90")[1].schedule == "pipelined"
    assert {impls.case_kernel(c, "sm_90") for c in QUICK if not c.impl.startswith("tilelang-")} == {None}


def test_a_config_that_cannot_run_on_the_arch_is_left_to_the_launch():
    assert {c.impl for c in QUICK if impls.case_kernel(c, "gfx942") is not None} == {"tilelang-cdna3"}


@pytest.fixture
def on_sm_90(monkeypatch):
    monkeypatch.setattr(environment, "device", lambda: "cuda:0")
    monkeypatch.setattr(m, "device_arch", lambda device: "sm_90")


def test_the_kernels_are_compiled_once_each_in_the_cases_order_within_the_deadline(on_sm_90, monkeypatch):
    seen, lines = {}, []

    def fake_precompile(kernels, jobs, echo, deadline, ready):
        seen.update(kernels=kernels, jobs=jobs, deadline=deadline)
        return {kernels[-1]: "RuntimeError: boom"}

    monkeypatch.setattr(precompile, "precompile", fake_precompile)
    failed = precompile.precompile_cases(QUICK + QUICK, 3, echo=lines.append, deadline=time.time() + 100)
    expected = list(dict.fromkeys(k for c in QUICK if (k := impls.case_kernel(c, "sm_90"))))
    assert seen["kernels"] == expected and seen["jobs"] == 3
    assert seen["deadline"] - time.monotonic() == pytest.approx(100, abs=5)  # epoch seconds -> monotonic
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


def test_the_default_jobs_leave_two_cores_and_stay_between_2_and_16(monkeypatch):
    for cores, jobs in ((2, 2), (8, 6), (128, 16)):
        monkeypatch.setattr(precompile.os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
        assert precompile.default_jobs() == jobs


def test_the_worker_waits_for_a_kernel_until_the_compile_alongside_has_it(on_sm_90, monkeypatch):
    kernels = list(dict.fromkeys(k for c in QUICK if (k := impls.case_kernel(c, "sm_90"))))
    first = next(c for c in QUICK if impls.case_kernel(c, "sm_90") == kernels[0])
    second = next(c for c in QUICK if impls.case_kernel(c, "sm_90") == kernels[1])
    go_on = threading.Event()

    def fake_precompile(kernels, jobs, echo, deadline, ready):  # the first kernel at once, the rest once told
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
    assert not os.path.exists(ready)  # the folder goes with the compile
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
    assert lines == ["compiling the TileLang kernels beside the timing failed (RuntimeError: boom); each case compiles its own"]


def test_nothing_to_wait_for_without_a_compile_or_a_tilelang_kernel(on_sm_90, monkeypatch, tmp_path):
    tilelang = next(c for c in QUICK if c.impl == "tilelang-hopper")
    assert precompile.wait_compiled(None, tilelang, "cuda:0") == 0
    assert precompile.wait_compiled(str(tmp_path), next(c for c in QUICK if c.impl == "flash_mla"), "cuda:0") == 0

    def broken_table(case, arch):
        raise ValueError("kernels/tuned/sm_90.yaml: version: must be 1")

    monkeypatch.setattr(impls, "case_kernel", broken_table)  # the launch reports it, as without the compile
    assert precompile.wait_compiled(str(tmp_path), tilelang, "cuda:0") == 0


def test_a_kernels_marker_is_the_same_in_another_process():
    kernel = impls.case_kernel(next(c for c in QUICK if c.impl == "tilelang-seesaw" and c.paged), "sm_90")
    [(item, name)] = list(precompile.in_processes(precompile.marker, [kernel], 2))
    assert name == precompile.marker(kernel) and len(name) == 24

"""A record and a bench compile their TileLang kernels in parallel before timing (measure.precompile), so a
kernel edit costs one parallel compile, not a compile per case inside the timed run: which kernels (those
the launches then build), in which order, and that a fault there is a printed line, never a lost record."""

import dataclasses
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

    def fake_precompile(kernels, jobs, echo, deadline):
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

"""A record and a bench compile their TileLang kernels in parallel before timing (measure.precompile), so a
kernel edit costs one parallel compile, not a compile per case inside the timed run: which kernels, in
which order, and what is left to the launch."""

import time

import pytest

from mlagate import config
from mlagate.kernels import mla_decode as m
from mlagate.kernels.mla_decode_paged import PagedShape
from mlagate.measure import environment, impls, precompile

CFG = config.load()
QUICK = CFG.cases("quick", CFG.implementations, "cuda", ["float16"])


def by_impl(cases, arch):
    return {(c.impl, c.batch, c.workload): impls.case_kernel(c, arch) for c in cases}


def test_each_tilelang_case_names_the_kernel_its_launch_compiles():
    kernels = by_impl(QUICK, "sm_90")
    shape = m.Shape(64, 4096, 16, "float16")
    assert kernels["tilelang-seesaw", 64, "dense"] == (shape, impls.tilelang_config("tilelang-seesaw", shape, "sm_90"))
    assert kernels["tilelang-seesaw", 64, "dense"][1].schedule == "seesaw"
    assert kernels["tilelang-hopper", 64, "dense"][1] != m.HOPPER  # the committed table's tuned config
    ragged = next(c for c in QUICK if c.impl == "tilelang-seesaw" and c.paged and c.batch == 128
                  and c.workload.startswith("ragged"))
    paged_shape, config, lengths = impls.case_kernel(ragged, "sm_90")
    assert paged_shape == PagedShape.holding(ragged.lengths, 16, ragged.page_size, "float16")
    assert config.schedule == "pipelined" and lengths == tuple(ragged.lengths)  # the seesaw's paged is hopper's
    assert {k for (impl, _, _), k in kernels.items() if not impl.startswith("tilelang-")} == {None}


def test_a_config_that_cannot_run_on_the_arch_is_left_to_the_launch():
    kernels = by_impl(QUICK, "gfx942")
    assert {impl for (impl, _, _), k in kernels.items() if k is not None} == {"tilelang-cdna3"}


def test_the_kernels_are_compiled_once_each_in_the_cases_order_within_the_deadline(monkeypatch):
    seen, lines = {}, []

    def fake_precompile(kernels, jobs, echo, deadline):
        seen.update(kernels=kernels, jobs=jobs, deadline=deadline)
        return {kernels[-1]: "RuntimeError: boom"}

    monkeypatch.setattr(environment, "device", lambda: "cuda:0")
    monkeypatch.setattr(m, "device_arch", lambda device: "sm_90")
    monkeypatch.setattr(precompile, "precompile", fake_precompile)
    cases = QUICK + QUICK  # every case twice: one compile per kernel
    failed = precompile.precompile_cases(cases, 3, echo=lines.append, deadline=time.time() + 100)
    expected = list(dict.fromkeys(k for c in QUICK if (k := impls.case_kernel(c, "sm_90"))))
    assert seen["kernels"] == expected and seen["jobs"] == 3
    assert seen["deadline"] - time.monotonic() == pytest.approx(100, abs=5)  # epoch seconds -> monotonic
    assert failed == {expected[-1]: "RuntimeError: boom"}
    assert lines[0].startswith(f"compiled {len(expected) - 1} of {len(expected)} TileLang kernels in 3 processes")
    assert "failed: " in lines[0] and "boom" in lines[0]


def test_no_tilelang_case_compiles_nothing(monkeypatch):
    monkeypatch.setattr(environment, "device", lambda: "cuda:0")
    monkeypatch.setattr(m, "device_arch", lambda device: "sm_90")
    monkeypatch.setattr(precompile, "precompile", lambda *a, **k: pytest.fail("nothing to compile"))
    assert precompile.precompile_cases([c for c in QUICK if c.impl == "flash_mla"], 3) == {}


def test_the_default_jobs_leave_two_cores_and_stay_between_1_and_16(monkeypatch):
    for cores, jobs in ((None, 1), (2, 1), (8, 6), (128, 16)):
        monkeypatch.setattr(precompile.os, "cpu_count", lambda: cores)
        assert precompile.default_jobs() == jobs

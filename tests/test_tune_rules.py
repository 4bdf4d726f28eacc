"""`mlagate tune`'s pure decisions (mlagate/tune/rules.py) pinned to exact outputs: which candidates make one
launch, a shape's plan and its refusals, the gain, the drift of the committed config at the threshold's edge, and
whether an earlier run's files in --out (its identity, a candidate file) can be resumed, with every message."""

import math

import pytest

from mlagate.case import Case, CaseResult, RunStatus
from mlagate.kernels import mla_decode as m
from mlagate.kernels import tuned
from mlagate.tune import rules as decide

B64 = (64, 4096, 16, "float16", 1)  # tuned.shape_key
DEFAULT = tuned.candidate_impl(m.HOPPER)


def result(impl, us=None, status=RunStatus.OK, reason=None, **more) -> CaseResult:
    case = Case(impl, 64, 4096, "float16", 16)
    if status != RunStatus.OK:
        return CaseResult(case, status, reason, **more)
    return CaseResult(case, status, median_ms=us / 1e3, tflops=1e3 / us, **more)


# -- one launch, one measurement ------------------------------------------------------------------

def test_configs_whose_threads_the_plan_caps_alike_are_one_launch():
    """CDNA3 keeps scores in registers: at 16 heads its head block feeds one wavefront, so 128 and 256 threads
    both launch 64; the config's own threads are not part of the launch."""
    small, large = (m.plan(m.Shape(64, 4096, 16), m.CDNA3.with_(threads=t), "gfx942") for t in (128, 256))
    assert (small.threads, large.threads) == (64, 64)
    assert decide.duplicates({"small": small, "large": large}) == {"large": "small"}
    wide = m.plan(m.Shape(64, 4096, 64), m.CDNA3.with_(threads=256), "gfx942")
    assert decide.duplicates({"small": small, "wide": wide}) == {}


def test_a_shape_plan_keeps_s_q_and_heads_in_its_cases_and_folder():
    shape = m.Shape(64, 4096, 16, "bfloat16", s_q=2)
    plan = decide.ShapePlan(shape, {}, {}, {}, DEFAULT, DEFAULT)
    assert plan.case("x") == Case("x", 64, 4096, "bfloat16", 16, 2)
    assert plan.folder == "b64-s4096-h16-sq2-bfloat16"


def test_a_candidate_the_kernel_cannot_plan_is_refused_with_the_kernels_reason():
    refused, n32 = m.HOPPER.with_(block_H=48), m.HOPPER.with_(block_N=32)
    shape = m.Shape(64, 4096, 128)
    plan = decide.shape_plan(shape, m.HOPPER, [refused, n32, m.HOPPER.with_(name="hopper")], {}, "sm_90")
    assert plan == decide.ShapePlan(
        shape, {DEFAULT: m.HOPPER, tuned.candidate_impl(n32): n32}, {},
        {tuned.candidate_impl(refused): "cannot run this shape: query rows (128 = s_q 1 x heads 128) must be a "
                                        "multiple of the head block block_H=48 (config hopper)"},
        DEFAULT, DEFAULT)


# -- gain and winner -------------------------------------------------------------------------------

def test_a_gain_needs_both_the_candidate_and_the_default_measured():
    ok, failed = result("a", 80), result("d", status=RunStatus.FAILED, reason="crash")
    assert decide.gain(ok, result("d", 100)) == pytest.approx(0.25)
    assert decide.gain(failed, result("d", 100)) is None
    assert decide.gain(ok, failed) is None and decide.gain(ok, None) is None


def test_a_failed_candidate_that_carries_tflops_is_no_measurement():
    failed = result("a", status=RunStatus.FAILED, reason="wrong result", tflops=900.0, median_ms=0.01)
    assert decide.winner({"a": failed}, "a") is None
    w = decide.winner({"a": failed, "b": result("b", 100)}, "a")
    assert (w.impl, w.default, w.gain) == ("b", None, None)


# -- drift -----------------------------------------------------------------------------------------

def test_a_committed_config_that_did_not_measure_is_broken_with_its_reason_and_the_best():
    best = decide.winner({"best": result("best", 85)}, "best")
    skipped = {"table": result("table", status=RunStatus.SKIPPED, reason="over the limit"), "best": best.result}
    assert decide.drift(B64, skipped, "table", best, 0.05) == decide.Drift(
        B64, decide.DriftKind.BROKEN, "table", "best", None, "over the limit")
    assert decide.drift(B64, {"best": best.result}, "table", best, 0.05) == decide.Drift(
        B64, decide.DriftKind.BROKEN, "table", "best", None, "not measured")
    assert decide.drift(B64, {}, "table", None, 0.05) == decide.Drift(
        B64, decide.DriftKind.BROKEN, "table", None, None, "not measured")


def test_a_committed_config_beaten_by_exactly_the_threshold_holds():
    """265.625 µs against 250 µs is exactly 6.25 % (binary fractions): drift is more than the threshold."""
    results = {"table": result("table", 265.625), "best": result("best", 250)}
    best = decide.winner(results, "table")
    assert decide.drift(B64, results, "table", best, 0.0625) is None
    assert decide.drift(B64, results, "table", best, 0.0624) == decide.Drift(
        B64, decide.DriftKind.BEATEN, "table", "best", 0.0625)
    assert decide.drift(B64, results, "table", None, 0.0) is None  # nothing to compare it with


def test_a_shape_decision_keeps_the_committed_name_even_when_it_is_a_duplicate():
    results = {"default": result("default", 100), "best": result("best", 80)}
    tune = decide.decide_shape(B64, results, {"table": "default"}, "default", "table", 0.05)
    best = decide.Winner("best", results["best"], results["default"])
    assert tune == decide.ShapeTune(B64, results, {"table": "default"}, "default", "table", best,
                                    decide.Drift(B64, decide.DriftKind.BEATEN, "table", "best", pytest.approx(0.25)))


# -- resuming: the identity ------------------------------------------------------------------------

def test_a_resume_of_another_tune_names_every_change_and_how_to_start_over():
    saved = {"kernel": "a", "timing": {"window_ms": 5, "warmup_ms": 1}, "gpu": "H100"}
    now = {"kernel": "b", "timing": {"window_ms": 6, "warmup_ms": 1}, "gpu": "H100"}
    with pytest.raises(ValueError) as refused:
        decide.resumed_identity(saved, now, "out/tune.json")
    assert str(refused.value) == ("out/tune.json is a tune of another kernel, GPU or settings (kernel: was 'a', now "
                                  "'b'; timing.window_ms: was 5, now 6); give another --out, or remove that folder "
                                  "to start over")
    with pytest.raises(ValueError) as refused:
        decide.resumed_identity([], now, "out/tune.json")
    assert str(refused.value) == ("out/tune.json: not a tune's identity (a JSON mapping); remove that folder to "
                                  "start over")


def test_a_resume_with_a_gpu_of_a_tune_that_only_lowered_takes_this_gpu():
    saved = {"kernel": "k", "gpu": None}
    assert decide.resumed_identity(saved, {"kernel": "k", "gpu": "H200"}, "t") == {"kernel": "k", "gpu": "H200"}
    assert decide.resumed_identity({"kernel": "k", "gpu": "H200"}, {"kernel": "k", "gpu": None}, "t") == {
        "kernel": "k", "gpu": "H200"}


def test_identity_changes_see_keys_on_one_side_keys_after_a_missing_gpu_and_a_dict_that_became_a_value():
    assert decide.identity_changes({"kernel": "k"}, {"kernel": "k", "limit": 5}) == ["limit: was None, now 5"]
    assert decide.identity_changes({"gpu": None, "kernel": "a"}, {"gpu": "H200", "kernel": "b"}) == [
        "kernel: was 'a', now 'b'"]
    assert decide.identity_changes({"timing": {"window_ms": 5}}, {"timing": None}) == [
        "timing: was {'window_ms': 5}, now None"]
    assert decide.identity_changes({"timing": 3}, {"timing": {"window_ms": 5}}) == [
        "timing: was 3, now {'window_ms': 5}"]


# -- resuming: a candidate's file ------------------------------------------------------------------

def record(**changes) -> dict:
    done = result(DEFAULT, 100).to_dict()
    return {"candidate": DEFAULT, "config": {}, "stage": "done", "smem": 1000, "result": done, **changes}


def test_a_sound_candidate_file_passes_lowered_or_done():
    assert decide.record_problem(record(), DEFAULT) is None
    assert decide.record_problem(record(smem=None), DEFAULT) is None
    assert decide.record_problem(record(stage="lowered", result=None), DEFAULT) is None
    failed = result(DEFAULT, status=RunStatus.FAILED, reason="crash").to_dict()
    assert decide.record_problem(record(result=failed), DEFAULT) is None


@pytest.mark.parametrize("content, problem", [
    ("x" * 38, f"must be a mapping with candidate, config, stage, smem, result, got '{'x' * 38}'"),
    ("x" * 39, f"must be a mapping with candidate, config, stage, smem, result, got '{'x' * 36}..."),
    (record(candidate="other"), "candidate: 'other' is not the file's own candidate"),
    (record(stage="half"), "stage: must be one of lowered, done, got 'half'"),
    (record(smem="12"), "smem: must be an integer or null, got '12'"),
    (record(smem=True), "smem: must be an integer or null, got True"),
    (record(stage="lowered"), "result: a lowered candidate has none yet"),
    (record(result={"impl": "x", "batch": 64, "seqlen": 4096, "dtype": "float16"}),
     "result: not a measured case (KeyError: 'status')"),
    (record(result={**record()["result"], "median_ms": math.nan}),
     "result.median_ms: an ok candidate's must be a finite number > 0 and within [1e-06, 10000], got nan"),
    (record(result={**record()["result"], "tflops": 0.0}),
     "result.tflops: an ok candidate's must be a finite number > 0 and within [1e-06, 100000], got 0.0")])
def test_a_damaged_candidate_file_says_what_is_wrong(content, problem):
    assert decide.record_problem(content, DEFAULT) == problem

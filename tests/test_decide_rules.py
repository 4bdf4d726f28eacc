"""The gate's rules one by one, on small hand-made results (mlagate.decide.verdict, .stats).

Each test pins one rule at its boundary, with the kind of each note it leaves (what code acts
on) and the exact message the report shows, so a changed comparison, constant or message
fails here. The numbers are chosen to be exact
in binary floating point where a test sits on a boundary.
"""

import copy
import hashlib
import json
import math
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from mlagate import config, exits
from mlagate.decide import stats
from mlagate.decide import verdict as decide
from mlagate.decide.vocabulary import EXIT_CODE, Kind, Note, Outcome, Status
from mlagate.measure import summary
from mlagate.store.env import parse_env
from mlagate.store.errors import StoreError
from mlagate.store.results import CommitResults, Store
from mlagate.store.results_file import BENCH_RATIO, BENCH_TIME, Entry, case_keys

HOP = ("tilelang-hopper", 64, 4096, "float16", 128, 1, "float16", "dense")
HOP_16 = ("tilelang-hopper", 64, 4096, "float16", 16, 1, "float16", "dense")
CDNA = ("tilelang-cdna3", 64, 4096, "float16", 128, 1, "float16", "dense")
VENDOR = ("flash_mla", 64, 4096, "float16", 128, 1, "float16", "dense")

RAW = yaml.safe_load(config.DEFAULT_PATH.read_text())


def make_cfg(threshold=0.025, screen=0.0125, alpha=0.01, min_samples=20, floor=0.70, max_drop=0.05,
             lookback=3, max_slowdown=0.05, vendor_heads=(16, 32, 64, 128), vendor_q_len_heads=None, unsure="fail"):
    """The repository's perf.yml with the gate's numbers set here, so these tests do not move with it."""
    raw = copy.deepcopy(RAW)
    g = raw["gate"]
    g["gated"] = ["tilelang-hopper", "tilelang-cdna3"]
    raw["platforms"]["cuda"]["tilelang"] = HOP[0]  # the config these rules are written around
    g["latency"].update(threshold=threshold, screen=screen, alpha=alpha, min_samples=min_samples)
    raw["timing"].update(min_samples=max(min_samples, raw["timing"]["min_samples"]),
                         samples_per_window=max(min_samples, raw["timing"]["samples_per_window"]))
    g["vendor_ratio"]["cuda"].update(floor=floor, max_drop=max_drop)
    g["drift"].update(lookback=lookback, max_slowdown=max_slowdown)
    g["confirm"]["unsure"] = unsure
    raw["platforms"]["cuda"]["vendor_heads"] = list(vendor_heads)
    raw["platforms"]["cuda"]["vendor_q_len_heads"] = list(vendor_heads if vendor_q_len_heads is None
                                                          else vendor_q_len_heads)
    return config.parse(raw)


CFG = make_cfg()


def samples(median_us, n=40, spread=0.002):
    """n samples (seconds) spread evenly +-spread around median_us."""
    return tuple(float(v) for v in median_us * 1e-6 * (1 + spread * np.linspace(-1, 1, n)))


def ok(times):
    return Entry("ok", summary.median(times), tuple(times))


def results(commit="c", times=None, ratios=None):
    """CommitResults from {case: samples or Entry} and {case: ratio or Entry}."""
    times = {k: v if isinstance(v, Entry) else ok(v) for k, v in (times or {}).items()}
    ratios = {k: v if isinstance(v, Entry) else Entry("ok", v) for k, v in (ratios or {}).items()}
    return CommitResults("m", commit, 0, [], {BENCH_TIME: times, BENCH_RATIO: ratios})


def evaluate(base_us=100.0, head_us=100.0, base_ratio=0.8, head_ratio=0.8, cfg=CFG, case=HOP, **kwargs):
    base = results("base", {case: samples(base_us)} if base_us else {}, {case: base_ratio} if base_ratio else {})
    head = results("head", {case: samples(head_us)} if head_us else {}, {case: head_ratio} if head_ratio else {})
    return decide.evaluate(base, head, cfg, "cuda", **kwargs)


def one(verdict):
    assert len(verdict.cases) == 1, verdict.cases
    return verdict.cases[0]


def notes(found) -> list:
    """(kind, text) of each Note: the kind is what code acts on, the text what the report shows."""
    assert all(isinstance(n, Note) and isinstance(n.kind, Kind) for n in found), found
    return [(n.kind, n.text) for n in found]


# -- verdicts and exit codes ------------------------------------------------------

def test_exit_codes_and_labels():
    assert [decide.Verdict(o, []).exit_code for o in Outcome] == [0, 1, 2, 2]  # unsure: could not decide
    assert EXIT_CODE == {Outcome.PASS: exits.OK, Outcome.REGRESSION: exits.REGRESSION, Outcome.UNSURE: exits.ERROR,
                         Outcome.ERROR: exits.ERROR}
    assert decide.CaseVerdict(HOP, Status.PASS).label == "tilelang-hopper h=128 b=64 s=4096 float16"
    flagged = decide.CaseVerdict(HOP, Status.PASS, flagged=True)
    assert decide.Verdict(Outcome.PASS, [decide.CaseVerdict(CDNA, Status.PASS), flagged]).flagged() == [flagged]


def test_statuses_and_outcomes_are_the_strings_the_report_and_json_show():
    assert [s.value for s in Status] == ["pass", "regression", "error", "no_baseline", "removed", "skipped",
                                         "accepted", "unsure"]
    # the PR comment's template shows each of them (anything else reads "?")
    template = (Path(__file__).parent.parent / ".github/workflows/perf-comment.yml").read_text()
    assert 'IN("pass", "regression", "error", "no_baseline", "removed", "skipped", "accepted", "unsure")' in template
    assert [o.value for o in Outcome] == ["pass", "regression", "unsure", "error"]
    assert 'IN("pass", "regression", "unsure", "error")' in template
    assert f"{Status.NO_BASELINE}" == "no_baseline" and json.dumps([Outcome.ERROR]) == '["error"]'
    # a plain string is read as its member, so the comparisons in evaluate hold for it too
    assert decide.CaseVerdict(HOP, "removed").status is Status.REMOVED
    assert decide.Verdict("error", []).outcome is Outcome.ERROR
    with pytest.raises(ValueError):
        decide.Verdict("fail", [])


def test_an_unchanged_head_passes_with_nothing_to_report():
    verdict = evaluate()
    assert (verdict.outcome, verdict.exit_code, verdict.errors, verdict.warnings) == (Outcome.PASS, 0, [], [])
    assert (verdict.base, verdict.head, verdict.platform) == ("base", "head", "cuda")
    cv = one(verdict)
    assert (cv.status, cv.reasons, cv.warnings) == (Status.PASS, [], [])
    assert not (cv.flagged or cv.over_threshold or cv.below_floor)
    assert cv.base_median_s == pytest.approx(100e-6) and cv.head_median_s == pytest.approx(100e-6)
    assert cv.change == pytest.approx(0, abs=1e-12) and cv.p_value > 0.4
    assert (cv.vendor_ratio, cv.base_vendor_ratio) == (0.8, 0.8)
    assert cv.confirmation is None


# -- the latency rule ---------------------------------------------------------------

@pytest.mark.parametrize("change,p,past", [
    (0.025, 0.0, True),       # the threshold itself is slower
    (0.0249, 0.0, False),
    (0.5, 0.01, False),       # p must be below alpha, not equal
    (0.5, 0.0099, True),
    (0.0, 0.5, False),        # both conditions, not either
    (0.5, 0.5, False),
    (0.0, 0.0, False),
])
def test_past_needs_both_the_slowdown_and_the_p_value(change, p, past):
    assert decide._past(change, p, 0.025, 0.01) is past


def test_is_slower_on_sample_sets():
    base = samples(100)
    assert decide.is_slower(base, samples(103), 0.025, 0.01)
    assert not decide.is_slower(base, samples(102), 0.025, 0.01)   # significant but under the threshold
    assert not decide.is_slower(base, samples(97), 0.025, 0.01)    # faster
    assert not decide.is_slower(base, base, 0.025, 0.01)
    noisy = samples(103, n=4, spread=0.5)                            # 3% slower medians, not significant
    assert not decide.is_slower(samples(100, n=4, spread=0.5), noisy, 0.025, 0.01)


def test_a_slowdown_past_the_threshold_is_a_regression_with_the_numbers():
    cv = one(evaluate(head_us=103.0))
    assert cv.status == Status.REGRESSION and cv.flagged and cv.over_threshold
    assert cv.change == pytest.approx(0.03) and cv.p_value < 1e-6
    assert cv.p_value == stats.slower_p_value(samples(100), samples(103))
    assert notes(cv.reasons) == [(Kind.LATENCY, f"latency +3.0% (median 100.0 → 103.0 µs, p = {cv.p_value:.1e}; "
                                                "threshold +2.5% at p < 0.01)")]
    assert cv.warnings == []  # no confirmations were asked for: nothing to say about them


def test_the_latency_reason_converts_seconds_to_microseconds():
    base = results("base", {HOP: (0.499,) * 20 + (0.5,) + (0.501,) * 20}, {HOP: 0.8})
    head = results("head", {HOP: (0.549,) * 20 + (0.55,) + (0.551,) * 20}, {HOP: 0.8})
    cv = one(decide.evaluate(base, head, CFG, "cuda"))
    assert cv.reasons[0].kind is Kind.LATENCY
    assert cv.reasons[0].text.startswith("latency +10.0% (median 500000.0 → 550000.0 µs, p = ")


def test_between_screen_and_threshold_is_flagged_but_passes_unconfirmed():
    cv = one(evaluate(head_us=102.0))
    assert cv.flagged and not cv.over_threshold and cv.status == Status.PASS
    assert cv.reasons == []
    assert notes(cv.warnings) == [(Kind.UNDER_THRESHOLD,
                                   "+2.0%: past the 1.25% screen, under the 2.5% threshold; not re-measured")]


def test_under_the_screen_is_not_flagged():
    cv = one(evaluate(head_us=101.0))
    assert not cv.flagged and cv.status == Status.PASS and cv.reasons == [] and cv.warnings == []


def test_a_faster_head_passes():
    cv = one(evaluate(head_us=90.0))
    assert cv.status == Status.PASS and not cv.flagged and cv.change == pytest.approx(-0.1)


@pytest.mark.parametrize("base_n,head_n,error", [
    (19, 40, True), (40, 19, True),   # the smaller side decides
    (20, 20, False),                   # min_samples itself is enough
    (20, 400, False),
])
def test_min_samples(base_n, head_n, error):
    base = results("base", {HOP: samples(100, n=base_n)}, {HOP: 0.8})
    head = results("head", {HOP: samples(100, n=head_n)}, {HOP: 0.8})
    verdict = decide.evaluate(base, head, CFG, "cuda", history=[base, base])
    cv = one(verdict)
    if error:
        assert cv.status == Status.ERROR and verdict.outcome == Outcome.ERROR and verdict.exit_code == 2
        assert notes(cv.reasons) == [(Kind.TOO_FEW_SAMPLES, f"too few samples: base {base_n}, head {head_n} "
                                                            "(gate.latency.min_samples = 20)")]
        assert cv.base_median_s is None and cv.change is None and cv.warnings == []
    else:
        assert cv.status == Status.PASS and verdict.outcome == Outcome.PASS and cv.reasons == []
        assert cv.base_median_s == pytest.approx(100e-6)


def test_min_samples_comes_from_the_config():
    cv = one(evaluate(cfg=make_cfg(min_samples=41)))
    assert cv.status == Status.ERROR and cv.reasons[0].kind is Kind.TOO_FEW_SAMPLES
    assert cv.reasons[0].text.endswith("(gate.latency.min_samples = 41)")


@pytest.mark.parametrize("side", ["base", "head"])
@pytest.mark.parametrize("empty", [None, ()])
def test_results_without_samples_name_the_side(side, empty):
    entries = {"base": ok(samples(100)), "head": ok(samples(100))}
    entries[side] = Entry("ok", 100e-6, empty)
    base = results("base", {HOP: entries["base"]}, {HOP: 0.8})
    head = results("head", {HOP: entries["head"]}, {HOP: 0.8})
    cv = one(decide.evaluate(base, head, CFG, "cuda", history=[base, base]))
    assert cv.status == Status.ERROR
    assert notes(cv.reasons) == [(Kind.NO_SAMPLES, f"no raw samples in the {side} results (record with asv run "
                                                   "--record-samples; `mlagate record` does)")]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1e-4, 0.0])  # 0.0: a time is > 0, not >= 0
@pytest.mark.parametrize("sides", [("base",), ("head",), ("base", "head")])
def test_samples_that_are_not_finite_times_over_zero_are_an_error_naming_the_first_bad_side(sides, bad):
    times = {side: samples(100)[:-1] + (bad,) if side in sides else samples(100) for side in ("base", "head")}
    base = results("base", {HOP: Entry("ok", 100e-6, times["base"])}, {HOP: 0.8})
    head = results("head", {HOP: Entry("ok", 100e-6, times["head"])}, {HOP: 0.8})
    verdict = decide.evaluate(base, head, CFG, "cuda")
    cv = one(verdict)
    assert (cv.status, verdict.outcome, cv.change) == (Status.ERROR, Outcome.ERROR, None)
    assert notes(cv.reasons) == [(Kind.BAD_SAMPLES, f"{sides[0]} samples are not all finite times > 0")]


WIDE = samples(100, spread=0.06)  # 40 samples +-6%: the smallest slowdown they can show is +3.2%


def test_samples_that_cannot_show_the_threshold_are_under_powered():
    same = results("base", {HOP: WIDE}, {HOP: 0.8}), results("head", {HOP: WIDE}, {HOP: 0.8})
    cv = one(decide.evaluate(*same, CFG, "cuda"))
    assert cv.status == Status.PASS and cv.detectable == pytest.approx(0.0315, abs=1e-4)
    assert notes(cv.warnings) == [(Kind.UNDER_POWERED, "under-powered: the smallest slowdown its record samples "
                                                       "could show is +3.2% (alpha 0.01, power 80%), above the "
                                                       "+2.5% threshold")]


def test_a_detectable_change_at_the_threshold_is_not_under_powered():
    same = results("base", {HOP: WIDE}, {HOP: 0.8}), results("head", {HOP: WIDE}, {HOP: 0.8})
    detectable = stats.detectable_change(WIDE, WIDE, 0.01, decide.POWER)
    cv = one(decide.evaluate(*same, make_cfg(threshold=detectable), "cuda"))
    assert cv.detectable == detectable and cv.warnings == []


# -- confirmation ---------------------------------------------------------------------

def test_without_a_confirmation_a_case_over_the_threshold_fails_and_says_so_when_one_was_expected():
    cv = one(evaluate(head_us=103.0, confirmations={}))
    assert cv.status == Status.REGRESSION and cv.confirmation is None
    assert notes(cv.warnings) == [(Kind.NO_REMEASURE, "no interleaved re-measure for this case")]


def test_a_confirmation_that_agrees_fails_the_case():
    confirm = {HOP: (samples(100, n=30), samples(104, n=31))}
    cv = one(evaluate(head_us=102.0, confirmations=confirm))  # flagged under the threshold: the re-measure decides
    assert cv.status == Status.REGRESSION
    assert cv.confirmation["agrees"] is True and cv.confirmation["samples"] == (30, 31)
    assert cv.confirmation["change"] == pytest.approx(0.04)
    assert cv.confirmation["p_value"] == stats.slower_p_value(*confirm[HOP])
    assert cv.warnings == []


def test_a_confirmation_that_disagrees_clears_the_case():
    confirm = {HOP: (samples(100), samples(100))}
    cv = one(evaluate(head_us=103.0, confirmations=confirm))
    assert cv.status == Status.PASS and cv.confirmation["agrees"] is False
    p = cv.confirmation["p_value"]
    assert notes(cv.warnings) == [(Kind.NOT_CONFIRMED, f"not confirmed: interleaved re-measure shows +0.0% "
                                                       f"(p = {p:.2g})")]


def test_a_confirmation_of_an_unflagged_case_is_ignored():
    cv = one(evaluate(confirmations={HOP: (samples(100), samples(110))}))
    assert cv.status == Status.PASS and cv.confirmation is None


def test_a_vendor_ratio_drop_is_confirmed_at_its_own_smaller_threshold():
    """max_drop under the latency threshold: a 2.2% slowdown confirms a ratio drop, not a latency flag."""
    cfg = make_cfg(max_drop=0.02)
    confirm = {HOP: (samples(100), samples(102.2))}
    dropped = one(evaluate(head_ratio=0.8 * 0.97, cfg=cfg, confirmations=confirm))
    assert dropped.confirmation["agrees"] is True and dropped.status == Status.REGRESSION
    flagged = one(evaluate(head_us=103.0, cfg=cfg, confirmations=confirm))
    assert flagged.confirmation["agrees"] is False and flagged.status == Status.PASS


@pytest.mark.parametrize("confirmation", [
    ((), samples(103)), (samples(100), ()),                     # a side without samples
    (samples(100), samples(103)[:-1] + (math.nan,)),            # samples, not all of them times
    (samples(100)[:-1] + (0.0,), samples(103)),
])
def test_a_re_measure_without_samples_or_with_bad_ones_is_an_error(confirmation):
    verdict = evaluate(head_us=103.0, confirmations={HOP: confirmation})
    cv = one(verdict)
    assert (cv.status, verdict.outcome, cv.confirmation) == (Status.ERROR, Outcome.ERROR, None)
    assert [n.kind for n in cv.reasons] == [Kind.LATENCY, Kind.BAD_REMEASURE]
    assert cv.reasons[1].text == "the interleaved re-measure gave no samples or samples that are not finite times > 0"


def test_an_unsure_case_passes_with_a_warning_where_perf_yml_says_pass():
    confirm = {HOP: ((1.0, 1.01, 0.99), (1.1, 1.11, 1.09))}  # three samples a side: no interval, unsure
    verdict = evaluate(head_us=103.0, cfg=make_cfg(unsure="pass"), confirmations=confirm)
    cv = one(verdict)
    assert (cv.status, verdict.outcome, verdict.unsure_fails) == (Status.UNSURE, Outcome.PASS, False)
    assert notes(cv.warnings) == [(Kind.UNSURE_PASSED, "unsure, passed: perf.yml's gate.confirm.unsure is pass")]


def test_unsure_pass_says_nothing_of_a_case_the_re_measure_decided():
    confirm = {HOP: (samples(100, n=30), samples(104, n=31))}
    cv = one(evaluate(head_us=102.0, cfg=make_cfg(unsure="pass"), confirmations=confirm))
    assert cv.status == Status.REGRESSION and cv.warnings == []


# -- the vendor ratio -----------------------------------------------------------------

def test_vendor_ratio_at_the_floor_passes_and_below_it_fails():
    assert one(evaluate(base_ratio=0.8, head_ratio=0.7)).status == Status.REGRESSION  # also a 12.5% drop
    at_floor = one(evaluate(base_ratio=0.7, head_ratio=0.7))
    assert at_floor.status == Status.PASS and not at_floor.below_floor and at_floor.warnings == []
    below = one(evaluate(base_ratio=0.7, head_ratio=0.69))  # base at the floor is not a known gap
    assert below.status == Status.REGRESSION and below.below_floor
    assert notes(below.reasons) == [(Kind.BELOW_FLOOR, "vendor ratio 0.69 below the floor 0.70")]


def test_a_new_case_below_the_floor_fails_and_above_it_passes():
    new_low = one(evaluate(base_us=None, base_ratio=None, head_ratio=0.6))
    assert new_low.status == Status.REGRESSION and new_low.below_floor
    assert notes(new_low.reasons) == [(Kind.BELOW_FLOOR, "vendor ratio 0.60 below the floor 0.70")]
    assert notes(new_low.warnings) == [(Kind.NO_BASE, "new case: no base result")]
    assert one(evaluate(base_us=None, base_ratio=None, head_ratio=0.75)).status == Status.NO_BASELINE


def test_reaching_the_floor_from_below_is_no_gap():
    cv = one(evaluate(base_ratio=0.6, head_ratio=0.7))  # floor 0.70: head is at it
    assert cv.status == Status.PASS and cv.warnings == [] and cv.reasons == [] and not cv.below_floor


def test_a_gap_base_already_has_is_a_warning():
    cv = one(evaluate(base_ratio=0.6, head_ratio=0.6))
    assert cv.status == Status.PASS and not cv.below_floor and cv.reasons == []
    assert notes(cv.warnings) == [(Kind.KNOWN_GAP, "vendor ratio 0.60 below the floor 0.70, as on base (0.60): "
                                                   "a known gap, not this change")]


def test_a_known_gap_still_may_not_drop_further():
    cv = one(evaluate(base_ratio=0.6, head_ratio=0.5))
    assert cv.status == Status.REGRESSION and cv.flagged and cv.over_threshold and not cv.below_floor
    assert notes(cv.reasons) == [(Kind.RATIO_DROP, "vendor ratio dropped 16.7% (0.600 → 0.500; max drop 5%)")]


def test_vendor_ratio_drop_boundary():
    rule = CFG.gate.ratio["cuda"]
    at_limit = one(evaluate(base_ratio=0.8, head_ratio=0.8 * (1 - rule.max_drop)))
    assert at_limit.status == Status.PASS and not at_limit.flagged and at_limit.reasons == []
    dropped = one(evaluate(base_ratio=0.8, head_ratio=0.72))
    assert dropped.status == Status.REGRESSION and dropped.flagged and dropped.over_threshold
    assert notes(dropped.reasons) == [(Kind.RATIO_DROP, "vendor ratio dropped 10.0% (0.800 → 0.720; max drop 5%)")]
    assert one(evaluate(base_ratio=0.8, head_ratio=0.9)).status == Status.PASS  # a better ratio


def test_no_vendor_ratio_in_head_is_an_error():
    verdict = evaluate(head_ratio=None)
    cv = one(verdict)
    assert cv.status == Status.ERROR and verdict.outcome == Outcome.ERROR
    assert notes(cv.reasons) == [(Kind.NO_RATIO, "no vendor ratio in the head results: flash_mla was not measured "
                                                 "at this point (skipped, failed, or its dtype is not one flash_mla "
                                                 "takes)")]
    assert one(evaluate(base_us=None, base_ratio=None, head_ratio=None)).status == Status.ERROR  # a new case too


def test_no_vendor_ratio_where_the_vendor_has_no_kernel_is_declared():
    cfg = make_cfg(vendor_heads=(16, 32, 64))
    cv = one(evaluate(head_ratio=None, cfg=cfg))
    assert cv.status == Status.PASS and cv.reasons == [] and cv.vendor_ratio is None
    assert notes(cv.warnings) == [(Kind.NO_VENDOR_KERNEL, "no vendor ratio: flash_mla has no 128-head kernel "
                                                          "(perf.yml vendor_heads [16, 32, 64]); gated on latency "
                                                          "alone")]
    low = one(evaluate(case=HOP_16, base_ratio=0.6, head_ratio=0.3, cfg=cfg))  # 16 heads: judged
    assert low.status == Status.REGRESSION


def test_no_vendor_ratio_where_the_vendor_has_no_kernel_for_the_query_tokens():
    cfg = make_cfg(vendor_heads=(16, 128), vendor_q_len_heads=(16,))  # aiter's bf16 kernels
    mtp_128 = HOP[:5] + (2, "float16", "dense")
    cv = one(evaluate(case=mtp_128, head_ratio=None, cfg=cfg))
    assert cv.status == Status.PASS and cv.vendor_ratio is None
    assert notes(cv.warnings) == [(Kind.NO_VENDOR_KERNEL, "no vendor ratio: flash_mla has no 128-head kernel for 2 "
                                                          "query tokens (perf.yml vendor_q_len_heads [16]); gated on "
                                                          "latency alone")]
    has_one = HOP[:5] + (1, "float16", "dense")
    assert one(evaluate(case=has_one, head_ratio=None, cfg=cfg)).status == Status.ERROR
    # 16 heads: judged
    low = one(evaluate(case=HOP_16[:5] + (2, "float16", "dense"), base_ratio=0.6, head_ratio=0.3, cfg=cfg))
    assert low.status == Status.REGRESSION and low.label == "tilelang-hopper h=16 s_q=2 b=64 s=4096 float16"


def test_the_ratio_rules_hold_only_the_platforms_tilelang_config():
    cv = one(evaluate(case=CDNA, head_ratio=None))  # gated, but the cuda platform's tilelang is hopper
    assert cv.status == Status.PASS and cv.vendor_ratio is None and cv.warnings == []


def test_an_fp8_cache_reads_its_own_vendors_kernels_in_the_env_sidecars():
    """The fp8 cache's vendor is flashinfer: its version moved, so the ratio drop is re-baselined, not failed."""
    fp8 = ("tilelang-hopper", 64, 4096, "bfloat16", 16, 1, "float8_e4m3fn", "dense")
    envs = tuple(parse_env({"start": {"vendors": {"flashinfer": {"version": v, "kernels": {}}}}})
                 for v in ("0.7", "0.8"))
    cv = one(evaluate(case=fp8, head_ratio=0.72, envs=envs))
    assert cv.status == Status.PASS and cv.reasons == [] and not cv.ratio_dropped
    assert notes(cv.warnings) == [(Kind.VENDOR_CHANGED, "vendor kernel changed: flashinfer 0.7 ran its kernel in "
                                                        "base, 0.8 its kernel in head; the ratio (0.8 → 0.72) is "
                                                        "re-baselined, not gated")]


# -- case states ------------------------------------------------------------------------

def case_states(base_entry, head_entry, ratio=0.8, cfg=CFG):
    base = results("base", {HOP: base_entry} if base_entry else {}, {HOP: 0.8})
    head = results("head", {HOP: head_entry} if head_entry else {}, {HOP: ratio} if ratio else {})
    return decide.evaluate(base, head, cfg, "cuda", history=[base, base])


def without_128_heads():
    """CFG whose grids no longer list HOP (128 heads)."""
    raw = copy.deepcopy(RAW)
    raw["gate"]["gated"] = ["tilelang-hopper", "tilelang-cdna3"]
    raw["platforms"]["cuda"]["tilelang"] = HOP[0]
    for name in ("quick", "full"):
        raw["grid"][name]["heads"] = [h for h in raw["grid"][name]["heads"] if h != 128] or [16]
    return config.parse(raw)


def test_case_states():
    good = ok(samples(100))
    other = results("head", {HOP_16: good}, {HOP_16: 0.8})  # head measured something, not HOP
    both = results("base", {HOP: good, HOP_16: good}, {HOP: 0.8, HOP_16: 0.8})
    missing = decide.evaluate(both, other, CFG, "cuda")
    assert missing.outcome == Outcome.ERROR
    assert (missing.cases[0].case, missing.cases[0].status, notes(missing.cases[0].reasons)) == (
        HOP, Status.ERROR, [(Kind.MISSING_IN_HEAD, "in base, not in head, and perf.yml still lists it: head was "
                                                   "not measured there (record head with the grid base was recorded "
                                                   "with)")])
    removed = decide.evaluate(both, other, without_128_heads(), "cuda").cases[0]
    assert (removed.case, removed.status, notes(removed.warnings), removed.reasons) == (
        HOP, Status.REMOVED, [(Kind.REMOVED, "in base, not in head: perf.yml no longer lists it")], [])
    nothing = case_states(good, None)  # head measured no gated case at all
    assert nothing.outcome == Outcome.ERROR and notes(nothing.errors) == [(Kind.NO_GATED_CASES, (
        "no gated case (tilelang-hopper, tilelang-cdna3) measured in head head: nothing to compare"))]
    failed = case_states(good, Entry("failed"))
    assert failed.outcome == Outcome.ERROR
    assert notes(one(failed).reasons) == [(Kind.FAILED_IN_HEAD, "benchmark failed in head (see the asv log sidecar)")]
    new = one(case_states(None, good))
    assert (new.status, notes(new.warnings)) == (Status.NO_BASELINE, [(Kind.NO_BASE, "new case: no base result")])
    rebased = one(case_states(Entry("failed"), good))
    assert (rebased.status, notes(rebased.warnings)) == (Status.NO_BASELINE, [(Kind.NO_BASE, "base result is failed")])
    both_skipped = case_states(Entry("skipped"), Entry("skipped"), ratio=None)
    assert (one(both_skipped).status, notes(one(both_skipped).warnings)) == (
        Status.SKIPPED, [(Kind.NO_BASE, "base result is skipped")])
    assert both_skipped.outcome == Outcome.ERROR  # neither side measured a gated case: nothing was compared
    assert [e.kind for e in both_skipped.errors] == [Kind.NO_GATED_CASES] * 2
    new_skipped = one(case_states(None, Entry("skipped"), ratio=None))
    assert new_skipped.status == Status.SKIPPED and new_skipped.reasons == []
    dropped = case_states(good, Entry("skipped"))
    assert dropped.outcome == Outcome.ERROR
    assert (one(dropped).status, notes(one(dropped).reasons)) == (
        Status.ERROR, [(Kind.SKIPPED_IN_HEAD, "measured in base but skipped in head")])
    removed_without_ratio = one(case_states(good, None, ratio=None, cfg=without_128_heads()))
    assert removed_without_ratio.status == Status.REMOVED and removed_without_ratio.reasons == []


def test_only_gated_implementations_are_judged_in_a_stable_order():
    cases = {k: samples(100) for k in (VENDOR, HOP, CDNA, HOP_16)}
    ratios = {HOP: 0.8, HOP_16: 0.8}
    verdict = decide.evaluate(results("b", cases, ratios), results("h", cases, ratios), CFG, "cuda")
    assert [c.case for c in verdict.cases] == sorted([HOP, CDNA, HOP_16], key=str)
    assert verdict.outcome == Outcome.PASS


def test_nothing_gated_is_an_error():
    base = results("b", {VENDOR: samples(100)})
    verdict = decide.evaluate(base, base, CFG, "cuda")
    assert verdict.outcome == Outcome.ERROR and verdict.cases == []
    assert notes(verdict.errors) == [(Kind.NO_GATED_CASES,
                                      "no gated cases (tilelang-hopper, tilelang-cdna3) in either result")]


def test_an_error_outweighs_a_regression():
    base = results("b", {HOP: samples(100), HOP_16: samples(100)}, {HOP: 0.8, HOP_16: 0.8})
    slow = results("h", {HOP: samples(110), HOP_16: samples(100)}, {HOP: 0.8, HOP_16: 0.8})
    assert decide.evaluate(base, slow, CFG, "cuda").outcome == Outcome.REGRESSION
    broken = results("h", {HOP: samples(110), HOP_16: Entry("failed")}, {HOP: 0.8})
    verdict = decide.evaluate(base, broken, CFG, "cuda")
    assert verdict.outcome == Outcome.ERROR and verdict.exit_code == 2
    assert {c.case: c.status for c in verdict.cases} == {HOP: Status.REGRESSION, HOP_16: Status.ERROR}


# -- drift --------------------------------------------------------------------------------

def history_of(*medians_us, case=HOP):
    return [results(f"main{i}", {case: samples(m)}) for i, m in enumerate(medians_us)]


def drift(head_us, history, cfg=CFG):
    base = results("base", {HOP: samples(head_us)}, {HOP: 0.8})
    head = results("head", {HOP: samples(head_us)}, {HOP: 0.8})
    return one(decide.evaluate(base, head, cfg, "cuda", history=history))


def test_no_drift_no_warning():
    cv = drift(101.0, history_of(100.0, 102.0))
    assert cv.status == Status.PASS and cv.warnings == [] and cv.reasons == []


def test_drift_warns_with_the_numbers():
    cv = drift(106.0, history_of(100.0, 103.0))
    assert cv.status == Status.PASS and cv.reasons == []  # a warning, never a failure
    assert notes(cv.warnings) == [(Kind.DRIFT, "drift: 6.0% slower than the best of the last 2 main results "
                                               "(100.0 µs)")]
    assert cv.drift is cv.warnings[0]


def test_drift_at_exactly_the_limit_warns():
    cfg = make_cfg(max_slowdown=0.25)  # 0.625 / 0.5 - 1 = 0.25 exactly
    history = [results("m", {HOP: (0.5,) * 30}), results("n", {HOP: (0.75,) * 30})]

    def around(median):  # 31 samples, median exactly `median`
        return results("h", {HOP: (median - 0.01,) * 15 + (median,) + (median + 0.01,) * 15}, {HOP: 0.8})

    at_limit = around(0.625)
    cv = one(decide.evaluate(at_limit, at_limit, cfg, "cuda", history=history))
    assert notes(cv.warnings) == [(Kind.DRIFT, "drift: 25.0% slower than the best of the last 2 main results "
                                               "(500000.0 µs)")]
    under = around(0.6249)
    assert one(decide.evaluate(under, under, cfg, "cuda", history=history)).warnings == []


def test_drift_needs_two_usable_main_results():
    assert drift(120.0, history_of(100.0)).warnings == []
    unusable = [results("f", {HOP: Entry("failed")}), results("s", {HOP: Entry("skipped")}),
                results("n", {HOP: Entry("ok", 1e-6, None)}), results("x", {CDNA: samples(1)})]
    assert drift(120.0, history_of(100.0) + unusable).warnings == []
    assert notes(drift(120.0, unusable + history_of(100.0, 110.0)).warnings) == [
        (Kind.DRIFT, "drift: 20.0% slower than the best of the last 2 main results (100.0 µs)")]


def test_drift_looks_back_only_lookback_results():
    # lookback 3: the fast result four commits back no longer counts
    cv = drift(108.0, history_of(50.0, 105.0, 100.0, 104.0))
    assert notes(cv.warnings) == [(Kind.DRIFT, "drift: 8.0% slower than the best of the last 3 main results "
                                               "(100.0 µs)")]
    assert notes(drift(108.0, history_of(50.0, 105.0, 100.0, 104.0), cfg=make_cfg(lookback=4)).warnings) == [
        (Kind.DRIFT, "drift: 116.0% slower than the best of the last 4 main results (50.0 µs)")]


def test_drift_is_not_computed_for_a_broken_case():
    base = results("base", {HOP: samples(100, n=5)}, {HOP: 0.8})
    cv = one(decide.evaluate(base, base, CFG, "cuda", history=history_of(50.0, 50.0)))
    assert cv.status == Status.ERROR and cv.warnings == [] and cv.drift is None


# -- build findings ---------------------------------------------------------------------------

def test_build_findings_fail_a_pass_only_when_one_failed():
    fine, bad = SimpleNamespace(failed=False), SimpleNamespace(failed=True)
    v = decide.add_build_findings(decide.Verdict(Outcome.PASS, []), [fine])
    assert v.outcome == Outcome.PASS and v.build_findings == [fine]
    v = decide.add_build_findings(v, (bad,))
    assert v.outcome == Outcome.REGRESSION and v.exit_code == 1 and v.build_findings == [fine, bad]
    assert decide.add_build_findings(decide.Verdict(Outcome.ERROR, []), [bad]).outcome == Outcome.ERROR


# -- statistics -----------------------------------------------------------------------------

def test_median_and_iqr():
    assert summary.median([3.0, 1.0, 2.0, 10.0]) == 2.5
    assert summary.iqr(list(range(1, 10))) == 4.0  # quartiles 3 and 7


@pytest.mark.parametrize("n,confidence,bounds", [
    (30, 0.99, (7.0, 22.0)),   # order statistics x[k-1], x[n-k] with k = 8
    (30, 0.90, (10.0, 19.0)),
    (10, 0.99, (0.0, 9.0)),
    (8, 0.99, (0.0, 7.0)),     # P(median outside [x0, x7]) = 2/256 < 1%: the smallest n with a 99% interval
])
def test_median_ci_is_the_binomial_order_statistic_interval(n, confidence, bounds):
    values = [float(v) for v in range(n)][::-1]  # unsorted input
    assert summary.median_ci(values, confidence) == bounds


def test_median_ci_is_nan_when_too_few_samples():
    low, high = summary.median_ci([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    assert math.isnan(low) and math.isnan(high)


@pytest.mark.parametrize("values,fraction", [
    ([-3.0, 3, 3, 3, 5, 7, 7, 7, 13], 0.0),        # quartiles 3 and 7: fences at -3 and 13 exactly, kept
    ([-3.5, 3, 3, 3, 5, 7, 7, 7, 13], 1 / 9),      # beyond the low fence only
    ([-3.0, 3, 3, 3, 5, 7, 7, 7, 13.5], 1 / 9),    # beyond the high fence only
    ([-3.5, 3, 3, 3, 5, 7, 7, 7, 13.5], 2 / 9),
    ([-2.0, 1, 2, 3, 6.1], 1 / 5),                 # quartiles 1 and 3 exactly: -2 on the fence, 6.1 past 6
])
def test_outlier_fraction_uses_tukey_fences(values, fraction):
    assert summary.outlier_fraction(values) == pytest.approx(fraction)


def test_summary():
    values = [-3.5, 3, 3, 3, 5, 7, 7, 7, 13.5]
    assert summary.describe(values) == {"n": 9, "median": 5.0, "iqr": 4.0, "ci_low": -3.5, "ci_high": 13.5,
                                     "min": -3.5, "max": 13.5, "outliers": pytest.approx(2 / 9)}
    assert summary.describe(list(range(30)), confidence=0.9)["ci_low"] == 10.0


def test_median_ratio_and_direction_of_the_p_value():
    assert stats.median_ratio([2.0, 2.0, 2.0], [3.0, 3.0, 3.0]) == 1.5
    slow, fast = samples(100), samples(110)
    assert stats.slower_p_value(slow, fast) < 1e-6 < 0.99 < stats.slower_p_value(fast, slow)


# -- what the rules read: perf.yml ---------------------------------------------------------

def with_values(**changes):
    """RAW with dotted keys ("gate__latency__threshold" for gate.latency.threshold) set."""
    raw = copy.deepcopy(RAW)
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = raw
        for p in parents:
            node = node[p]
        node[leaf] = value
    return raw


def test_parse_keeps_every_value_of_perf_yml():
    cfg, t, g = config.parse(RAW), RAW["timing"], RAW["gate"]
    assert cfg.implementations == tuple(RAW["implementations"])
    assert cfg.grid.sizes == {name: (tuple(v["batch"]), tuple(v["seqlen"]), tuple(v["heads"]), tuple(v["q_len"]))
                              for name, v in RAW["grid"].items()}
    for name, p in RAW["platforms"].items():
        got = cfg.platform(name)
        assert (got.vendor, got.tilelang, got.dtypes, got.vendor_heads, got.vendor_q_len_heads) == (
            p["vendor"], p["tilelang"], tuple(p["dtypes"]), tuple(p["vendor_heads"]), tuple(p["vendor_q_len_heads"]))
    tm = cfg.timing
    assert (tm.cold_l2, tm.cuda_graph, tm.warmup_ms, tm.window_ms, tm.samples_per_window, tm.min_samples,
            tm.max_clock_drop, tm.record_s) == (t["cold_l2"], t["cuda_graph"], t["warmup_ms"], t["window_ms"],
                                                t["samples_per_window"], t["min_samples"], t["max_clock_drop"],
                                                t["record_s"])
    assert {name: (b.warmup_ms, b.windows) for name, b in tm.budgets.items()} == {
        name: (b["warmup_ms"], b["windows"]) for name, b in t["budgets"].items()}
    assert isinstance(tm.warmup_ms, float) and isinstance(tm.window_ms, float)  # YAML ints read as floats
    assert {a: (v.tflops, v.tbps) for a, v in cfg.roofline.items()} == {
        a: (v["tflops"], v["tbps"]) for a, v in RAW["roofline"].items()}
    gt = cfg.gate
    assert (gt.gated, gt.threshold, gt.screen, gt.alpha, gt.min_samples) == (
        tuple(g["gated"]), g["latency"]["threshold"], g["latency"]["screen"], g["latency"]["alpha"],
        g["latency"]["min_samples"])
    assert {k: (r.floor, r.max_drop) for k, r in gt.ratio.items()} == {
        k: (r["floor"], r["max_drop"]) for k, r in g["vendor_ratio"].items()}
    assert (gt.drift_lookback, gt.drift_max_slowdown, gt.max_new_spill_bytes, gt.shared_memory_limit) == (
        g["drift"]["lookback"], g["drift"]["max_slowdown"], g["build"]["max_new_spill_bytes"],
        g["build"]["shared_memory_limit"])
    c = g["confirm"]
    assert gt.confirm == config.Confirm(c["min_rounds"], c["max_rounds"], c["budget_s"], c["unsure"] == "fail")


def reordered(value):
    """The same mapping with every key order reversed."""
    if isinstance(value, dict):
        return {k: reordered(value[k]) for k in reversed(list(value))}
    return value


def test_the_digest_is_the_content_not_its_key_order():
    digest = config.parse(RAW).digest
    assert digest == hashlib.sha256(json.dumps(RAW, sort_keys=True).encode()).hexdigest()[:16]
    assert config.parse(reordered(RAW)).digest == digest
    assert config.parse(with_values(gate__latency__alpha=0.02)).digest != digest


# (dotted key, the parsed value, a value accepted at the boundary, one just past it, the message)
BOUNDARIES = [
    ("timing__warmup_ms", lambda c: c.timing.warmup_ms, 0, -0.5, "must be >= 0, got -0.5"),
    ("timing__window_ms", lambda c: c.timing.window_ms, 0.5, 0, "must be > 0, got 0.0"),
    ("timing__min_samples", lambda c: c.timing.min_samples, 20, 0, "must be >= 1, got 0"),
    ("timing__samples_per_window", lambda c: c.timing.samples_per_window, 20, 0, "must be >= 1, got 0"),
    ("timing__max_clock_drop", lambda c: c.timing.max_clock_drop, 1, 1.5, "must be <= 1, got 1.5"),
    ("timing__max_clock_drop", lambda c: c.timing.max_clock_drop, 0.01, 0, "must be > 0, got 0.0"),
    ("timing__record_s", lambda c: c.timing.record_s, 0.5, 0, "must be > 0, got 0.0"),
    ("timing__budgets__record__windows", lambda c: c.timing.budget("record").windows, 1, 0, "must be >= 1, got 0"),
    ("timing__budgets__confirm__warmup_ms", lambda c: c.timing.budget("confirm").warmup_ms, 0, -1,
     "must be >= 0, got -1.0"),
    ("roofline__sm_90__tflops", lambda c: c.roofline["sm_90"].tflops, 0.5, 0, "must be > 0, got 0.0"),
    ("roofline__gfx942__tbps", lambda c: c.roofline["gfx942"].tbps, 0.5, 0, "must be > 0, got 0.0"),
    ("gate__vendor_ratio__cuda__floor", lambda c: c.gate.ratio["cuda"].floor, 0, -0.1, "must be >= 0, got -0.1"),
    ("gate__vendor_ratio__rocm__max_drop", lambda c: c.gate.ratio["rocm"].max_drop, 0, -0.1,
     "must be >= 0, got -0.1"),
    ("gate__vendor_ratio__rocm__max_drop", lambda c: c.gate.ratio["rocm"].max_drop, 1, 1.5, "must be <= 1, got 1.5"),
    ("gate__latency__threshold", lambda c: c.gate.threshold, 1, 1.5, "must be <= 1, got 1.5"),
    # screen is 0.0125: a threshold equal to it is allowed
    ("gate__latency__threshold", lambda c: c.gate.threshold, 0.0125, 0, "must be > 0, got 0.0"),
    ("gate__latency__screen", lambda c: c.gate.screen, 0.001, 0, "must be > 0, got 0.0"),
    ("gate__latency__screen", lambda c: c.gate.screen, 0.0125, 1.5, "must be <= 1, got 1.5"),
    ("gate__latency__alpha", lambda c: c.gate.alpha, 0.5, 0.6, "must be <= 0.5, got 0.6"),
    ("gate__latency__alpha", lambda c: c.gate.alpha, 0.001, 0, "must be > 0, got 0.0"),
    ("gate__latency__min_samples", lambda c: c.gate.min_samples, 3, 2, "must be >= 3, got 2"),
    ("gate__drift__lookback", lambda c: c.gate.drift_lookback, 2, 1, "must be >= 2, got 1"),
    ("gate__drift__max_slowdown", lambda c: c.gate.drift_max_slowdown, 0.5, 0, "must be > 0, got 0.0"),
    ("gate__confirm__min_rounds", lambda c: c.gate.confirm.min_rounds, 2, 1, "must be >= 2, got 1"),
    ("gate__confirm__max_rounds", lambda c: c.gate.confirm.max_rounds, 6, 5,
     "must be >= gate.confirm.min_rounds (6), got 5"),
    ("gate__confirm__budget_s", lambda c: c.gate.confirm.budget_s, 0.5, 0, "must be > 0, got 0.0"),
    ("gate__build__max_new_spill_bytes", lambda c: c.gate.max_new_spill_bytes, 0, -1, "must be >= 0, got -1"),
    ("gate__build__shared_memory_limit__sm_90", lambda c: c.gate.shared_memory_limit["sm_90"], 1, 0,
     "must be >= 1, got 0"),
]


@pytest.mark.parametrize("key,parsed,accepted,rejected,message", BOUNDARIES,
                         ids=[f"{b[0]}={b[2]}" for b in BOUNDARIES])
def test_every_bound_of_perf_yml(key, parsed, accepted, rejected, message):
    assert parsed(config.parse(with_values(**{key: accepted}))) == accepted
    path = key.replace("__", ".")
    with pytest.raises(config.ConfigError, match=f"^{re.escape(path)}: {re.escape(message)}$"):
        config.parse(with_values(**{key: rejected}))


def test_every_record_holds_the_samples_the_gate_needs():
    """timing.min_samples is what a record guarantees per case (a long kernel's windows stretch);
    the gate cannot ask for more, and a window must be able to time that many."""
    with pytest.raises(config.ConfigError, match=r"^gate.latency.min_samples: must be <= timing.min_samples \(19\)"):
        config.parse(with_values(timing__min_samples=19))
    with pytest.raises(config.ConfigError, match=r"^timing.samples_per_window: must be >= timing.min_samples \(20\)"):
        config.parse(with_values(timing__samples_per_window=19))


def test_screen_may_equal_threshold():
    assert config.parse(with_values(gate__latency__screen=0.025)).gate.screen == 0.025
    with pytest.raises(config.ConfigError, match=r"^gate.latency.screen: must be <= gate.latency.threshold "
                                                 r"\(0.025\), got 0.03$"):
        config.parse(with_values(gate__latency__screen=0.03))


@pytest.mark.parametrize("key,value,message", [
    ("grid__quick__batch", 64, r"^grid.quick.batch: must be a non-empty list, got 64$"),
    ("grid__quick__batch", [True], r"^grid.quick.batch: every entry must be an integer >= 1, got True$"),
    ("grid__quick__batch", ["64"], r"^grid.quick.batch: every entry must be an integer >= 1, got '64'$"),
    ("implementations", "torch", r"^implementations: must be a non-empty list, got 'torch'$"),
    ("platforms__rocm__dtypes", ["float8"], r"^platforms.rocm.dtypes: 'float8' is not one of float16, bfloat16$"),
    ("platforms__cuda__vendor_heads", [24], r"^platforms.cuda.vendor_heads: 24 is not one of 16, 32, 64, 128$"),
    ("gate__gated", ["tilelang-hopper", "tilelang-cdna3"],
     r"^gate.gated: must list platforms.cuda.tilelang \('tilelang-seesaw'\), the config held to the vendor ratio "
     r"there; got tilelang-hopper, tilelang-cdna3$"),
    ("implementations", ["tilelang-cdna3", "flash_mla", "aiter", "torch"],
     r"^platforms.cuda.tilelang: 'tilelang-seesaw' is not in implementations$"),
    ("gate__latency", 5, r"^gate.latency: must be a mapping, got int$"),
    ("grid", None, r"^grid: must be a mapping, got NoneType$"),
    ("gate__latency__treshold", 0.1, r"^gate.latency.treshold: unknown key \(allowed: threshold, screen, alpha, "
                                     r"min_samples\)$"),
    ("extra", 1, r"^extra: unknown key \(allowed: grid, implementations, platforms, timing, roofline, gate, tune, "
                 r"workloads\)$"),
    ("timing__cold_l2", "yes", r"^timing.cold_l2: must be bool, got 'yes'$"),
    ("gate__latency__min_samples", True, r"^gate.latency.min_samples: must be int, got True$"),
])
def test_invalid_values_are_named_exactly(key, value, message):
    with pytest.raises(config.ConfigError, match=message):
        config.parse(with_values(**{key: value}))


def test_the_top_level_must_be_a_mapping():
    with pytest.raises(config.ConfigError, match=r"^top level: must be a mapping, got list$"):
        config.parse([])


def test_a_batch_of_one_is_allowed():
    assert config.parse(with_values(grid__full__batch=[1])).grid.sizes["full"][0] == (1,)


def test_cases_follow_the_grid_and_the_vendors_heads():
    cfg = config.parse(with_values(grid__quick={"batch": [64, 128], "seqlen": [4096], "heads": [16, 64], "q_len": [1]}))
    cases = cfg.cases("quick", ["tilelang-cdna3", "aiter"], "rocm")  # aiter has no 64-head kernel
    assert [c.key for c in cases] == [
        ("tilelang-cdna3", 64, 4096, "bfloat16", 16, 1, "bfloat16", "dense"),
        ("tilelang-cdna3", 128, 4096, "bfloat16", 16, 1, "bfloat16", "dense"),
        ("tilelang-cdna3", 64, 4096, "bfloat16", 64, 1, "bfloat16", "dense"),
        ("tilelang-cdna3", 128, 4096, "bfloat16", 64, 1, "bfloat16", "dense"),
        *(("tilelang-cdna3", b, 4096, "bfloat16", h, 1, "float8_e4m3fnuz", "dense")
          for h in (16, 64) for b in (64, 128)),
        ("aiter", 64, 4096, "bfloat16", 16, 1, "bfloat16", "dense"),
        ("aiter", 128, 4096, "bfloat16", 16, 1, "bfloat16", "dense"),
        # the fp8 cache: aiter's a16w8 at 16 heads only (perf.yml platforms.rocm.fp8_vendor)
        ("aiter", 64, 4096, "bfloat16", 16, 1, "float8_e4m3fnuz", "dense"),
        ("aiter", 128, 4096, "bfloat16", 16, 1, "float8_e4m3fnuz", "dense")]
    assert {c.dtype for c in cfg.cases("quick", ["torch"], "rocm", dtypes=("float16",))} == {"float16"}
    assert len(cfg.cases("quick", ["flash_mla"], "cuda")) == 4 * 2  # flash_mla has every head count; x 2 caches
    assert cases[0].label() == "tilelang-cdna3 h=16 b=64 s=4096 bfloat16"
    with pytest.raises(config.ConfigError, match=r"^platforms.tpu: not configured$"):
        cfg.platform("tpu")


def test_peaks_read_the_arch_without_its_a_suffix():
    cfg = config.parse(RAW)
    assert cfg.peaks("sm_90a") == cfg.peaks("sm_90") == cfg.roofline["sm_90"]
    assert cfg.peaks("gfx942") == cfg.roofline["gfx942"]
    assert cfg.peaks(None) is None and cfg.peaks("sm_80") is None


def test_a_gpus_own_roofline_entry_overrides_its_archs():
    """An H100 SXM and an H200 are both sm_90 with 3.35 and 4.8 TB/s: a run's GPU name picks its own peaks, another
    GPU of the arch (or one not recorded) reads the arch's, and a name that is no string is not looked up."""
    cfg = config.parse(RAW)
    h100 = "NVIDIA H100 80GB HBM3"
    assert cfg.roofline_key("sm_90a", h100) == h100 and cfg.peaks("sm_90a", h100).tbps == 3.35
    assert cfg.roofline_key("sm_90", "NVIDIA H200") == "sm_90" and cfg.peaks("sm_90", "NVIDIA H200").tbps == 4.8
    assert cfg.peaks("sm_90", None) == cfg.peaks("sm_90", ["x"]) == cfg.roofline["sm_90"]
    assert cfg.roofline_key("sm_80", "NVIDIA A100") is None and cfg.peaks("sm_80", "NVIDIA A100") is None


# -- what the rules read: results files ----------------------------------------------------------

COLUMNS = ["result", "params", "version", "started_at", "duration", "stats_ci_99_a", "stats_ci_99_b",
           "stats_q_25", "stats_q_75", "stats_number", "stats_repeat", "samples", "profile"]
PARAMS = [["'tilelang-hopper'"], ["64", "128"], ["4096"], ["'float16'"], ["128"]]
CASE_64, CASE_128 = (("tilelang-hopper", 64, 4096, "float16", 128, 1, "float16", "dense"),
                     ("tilelang-hopper", 128, 4096, "float16", 128, 1, "float16", "dense"))


def results_json(commit, times=(1e-4, 2e-4), ratios=None, date=1700000000000, samples=((1e-4, 1.1e-4), None)):
    results = {BENCH_TIME: [list(times), PARAMS, "v", 0, 1.0, None, None, None, None, None, None,
                            [list(s) if s else None for s in samples]]}
    if ratios is not None:  # asv ends a track_* row before the samples column
        results[BENCH_RATIO] = [list(ratios), PARAMS, "v", 0, 1.0, None, None, None, None, None, None]
    data = {"commit_hash": commit, "env_name": "e", "date": date, "params": {}, "python": "3.11",
            "requirements": {}, "env_vars": {}, "result_columns": COLUMNS, "results": results,
            "durations": {}, "version": 2}
    if date is None:
        del data["date"]
    return data


def write_results(root, commit, name="env", **kwargs):
    folder = root / "m"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "machine.json").write_text(json.dumps({"machine": "m", "version": 1}))
    path = folder / f"{commit[:8]}-{name}.json"
    path.write_text(json.dumps(results_json(commit, **kwargs)))
    return path


A, B = "ab" + "0" * 38, "ab" + "1" * 38


def test_a_results_file_reads_entries_samples_and_date(tmp_path):
    write_results(tmp_path, A, times=(1e-4, float("nan")), ratios=[0.8, None])
    r = Store(tmp_path).load("m", A)
    assert (r.machine, r.commit, r.date) == ("m", A, 1700000000000)
    t = r.entries(BENCH_TIME)
    assert t[CASE_64] == Entry("ok", 1e-4, (1e-4, 1.1e-4))
    assert t[CASE_128].status == "skipped" and t[CASE_128].value is None
    ratio = r.entries(BENCH_RATIO)
    assert ratio[CASE_64] == Entry("ok", 0.8) and ratio[CASE_128] == Entry("failed")
    assert r.entries("mla_decode.Nothing.track_nothing") == {}


def test_a_results_file_without_a_samples_column_reads_values(tmp_path):
    path = write_results(tmp_path, A)
    data = results_json(A)
    data["result_columns"] = COLUMNS[:-2]
    data["results"][BENCH_TIME] = data["results"][BENCH_TIME][:-1]
    path.write_text(json.dumps(data))
    assert Store(tmp_path).load("m", A).entries(BENCH_TIME)[CASE_64] == Entry("ok", 1e-4)


def test_a_results_file_without_a_date_reads_date_zero(tmp_path):
    write_results(tmp_path, A, date=None)
    assert Store(tmp_path).load("m", A).date == 0


def test_two_files_of_one_commit_are_merged(tmp_path):
    first = write_results(tmp_path, A, name="env1", date=5)
    data = results_json(A, date=9, ratios=[0.8, 0.7])
    del data["results"][BENCH_TIME]
    second = tmp_path / "m" / f"{A[:8]}-env2.json"
    second.write_text(json.dumps(data))
    r = Store(tmp_path).load("m", A)
    assert (r.paths, r.date) == ([str(first), str(second)], 9)
    assert set(r.benchmarks) == {BENCH_TIME, BENCH_RATIO}


def test_a_commit_prefix_must_be_unique(tmp_path):
    write_results(tmp_path, A)
    write_results(tmp_path, B, name="other")
    s = Store(tmp_path)
    with pytest.raises(StoreError, match=f"^{re.escape(str(tmp_path / 'm'))}: commit prefix 'ab' is ambiguous$"):
        s.load("m", "ab")
    assert s.load("m", "ab0").commit == A and s.load("m", "cd") is None


def test_loading_is_cached_until_a_file_changes(tmp_path):
    path = write_results(tmp_path, A)
    s = Store(tmp_path)
    first = s.load_all("m")
    assert s.load_all("m") is first
    write_results(tmp_path, B, name="other")
    assert set(s.load_all("m")) == {A, B}
    data = results_json(A, times=(3e-4, 4e-4))
    path.write_text(json.dumps(data))
    import os
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert s.load_all("m")[A].entries(BENCH_TIME)[CASE_64].value == 3e-4


def test_an_unreadable_file_is_a_problem_with_its_reason(tmp_path):
    root = tmp_path / "results with spaces"
    write_results(root, A)
    bad = root / "m" / f"{B[:8]}-env.json"
    bad.write_text("not json at all")
    s = Store(root)
    assert set(s.load_all("m")) == {A}
    assert [(p.path, p.reason) for p in s.problems] == [
        (str(bad), "not readable JSON (not complete JSON: Expecting value (line 1, column 1))")]
    assert str(s.problems[0]) == f"{bad}: not readable JSON (not complete JSON: Expecting value (line 1, column 1))"


def test_incomplete_results_files_name_what_is_missing(tmp_path):
    path = write_results(tmp_path, A)
    data = results_json(A)
    del data["results"]
    path.write_text(json.dumps(data))
    s = Store(tmp_path)
    s.load_all("m")
    assert s.problems[0].reason == "not a complete asv results file (KeyError: 'results')"
    data = results_json(A)
    data["results"][BENCH_TIME][0] = [1e-4]  # one result for two cases
    path.write_text(json.dumps(data))
    s = Store(tmp_path)
    s.load_all("m")
    assert str(path) == s.problems[0].path and BENCH_TIME in s.problems[0].reason


def test_case_keys_need_every_parameter():
    assert case_keys(PARAMS[:4]) == [CASE_64, CASE_128]  # results from before heads: 128 heads
    assert case_keys(PARAMS) == [CASE_64, CASE_128]  # before q_len: one query token, and the dense benchmarks
    assert case_keys([*PARAMS, ["1"]]) == [CASE_64, CASE_128]  # the dense benchmarks: no workload parameter
    ragged = case_keys([*PARAMS, ["'ragged-4k'"]])  # a workload benchmark from before q_len
    assert ragged == [(*key[:-1], "ragged-4k") for key in (CASE_64, CASE_128)]
    # before kv_dtype: a cache in the query's dtype; a workload benchmark's seventh parameter is its workload
    assert case_keys([*PARAMS, ["1"], ["'ragged-4k@ab'"]]) == [(*key[:-1], "ragged-4k@ab")
                                                                for key in (CASE_64, CASE_128)]
    fp8 = case_keys([*PARAMS, ["1"], ["'float8_e4m3fn'"]])
    assert fp8 == [(*key[:-2], "float8_e4m3fn", "dense") for key in (CASE_64, CASE_128)]
    with pytest.raises(ValueError, match=r"parameter kv_dtype: 'int4' is not a dtype"):
        case_keys([*PARAMS, ["1"], ["'float8_e4m3fn'", "'int4'"], ["'ragged-4k@ab'"]])
    with pytest.raises(ValueError, match=r"^3 parameters, expected impl, batch, seqlen, dtype, heads, q_len, "
                                         r"kv_dtype, workload$"):
        case_keys(PARAMS[:3])


def test_an_unknown_machine_names_the_known_ones(tmp_path):
    with pytest.raises(StoreError, match=r"no results for machine 'x' \(known: none\)$"):
        Store(tmp_path).load_all("x")
    write_results(tmp_path, A)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "machine.json").write_text("{}")
    with pytest.raises(StoreError, match=r"no results for machine 'x' \(known: a, m\)$"):
        Store(tmp_path).load_all("x")


def test_a_corrupt_sidecar_is_a_problem_naming_its_path(tmp_path):
    s = Store(tmp_path)
    path = s.sidecar_path("m", A, "env")
    assert path == tmp_path / "m" / "ab000000-env.sidecar"
    path.parent.mkdir(parents=True)
    path.write_text("{broken")
    assert s.read_sidecar("m", A, "env") is None
    assert s.problems[0].path == str(path) and s.problems[0].reason.startswith("corrupt sidecar (")
    s.read_sidecar("m", A, "env")
    assert len(s.problems) == 1  # reported once


def test_gate_confirm_unsure_is_fail_or_pass_and_nothing_else():
    assert config.parse(with_values(gate__confirm__unsure="pass")).gate.confirm.unsure_fails is False
    assert config.parse(with_values(gate__confirm__unsure="fail")).gate.confirm.unsure_fails is True
    with pytest.raises(config.ConfigError, match=r"^gate.confirm.unsure: must be one of fail, pass, got 'maybe'$"):
        config.parse(with_values(gate__confirm__unsure="maybe"))
    with pytest.raises(config.ConfigError, match=r"^gate.confirm.unsure: must be str, got True$"):
        config.parse(with_values(gate__confirm__unsure=True))
    with pytest.raises(config.ConfigError, match=r"^gate.confirm.rounds: unknown key"):
        config.parse(with_values(gate__confirm__rounds=10))  # the fixed round count is gone


@pytest.mark.parametrize("base_ratio, head_ratio", [(0.8, -0.5), (-0.8, 0.8), (0.8, math.inf), (0.8, math.nan)])
def test_a_vendor_ratio_that_is_no_positive_finite_number_is_an_error_naming_both(base_ratio, head_ratio):
    cv = one(evaluate(base_ratio=base_ratio, head_ratio=head_ratio))
    assert cv.status == Status.ERROR
    assert notes(cv.reasons) == [(Kind.BAD_RATIO, f"vendor ratio not a finite number > 0 (base {base_ratio}, head "
                                                  f"{head_ratio})")]


def test_an_fp8_cache_without_its_vendors_kernel_for_the_query_tokens_names_fp8_vendor_keys():
    raw = copy.deepcopy(RAW)
    raw["gate"]["gated"] = ["tilelang-hopper", "tilelang-cdna3"]
    raw["platforms"]["cuda"]["tilelang"] = "tilelang-hopper"
    raw["platforms"]["cuda"]["fp8_vendor"].update(heads=[16, 32], q_len_heads=[32])
    cfg = config.parse(raw)
    fp8 = ("tilelang-hopper", 64, 4096, "bfloat16", 16, 2, "float8_e4m3fn", "dense")
    cv = one(evaluate(case=fp8, head_ratio=None, cfg=cfg))
    assert cv.status == Status.PASS
    assert notes(cv.warnings) == [(Kind.NO_VENDOR_KERNEL, "no vendor ratio: flashinfer has no 16-head kernel for 2 "
                                                          "query tokens (perf.yml fp8_vendor.q_len_heads [32]); gated "
                                                          "on latency alone")]

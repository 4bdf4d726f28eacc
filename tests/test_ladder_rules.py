"""The ladder's pure rules (mlagate/ladder/rules.py) pinned to exact outputs: the --steps grammar and its messages,
the calibration's probe and fit, the patch's refusals and its step-0 comment, a gate verdict's step result, the
table's rows and summaries at the tolerance's edge, and a calibration.json read back on a resume."""

import json
import math

import pytest

from mlagate.case import Case
from mlagate.decide.verdict import CaseVerdict, Verdict
from mlagate.decide.vocabulary import Kind, Note, Outcome, Status
from mlagate.ladder import rules as ladder

SPUN = Case("tilelang-hopper", 64, 4096, "float16", 16)
MISSING = Case("tilelang-hopper", 128, 4096, "float16", 16)
UNSPUN = Case("tilelang-hopper", 64, 4096, "float16", 16, workload="uniform-paged@946e5f23")
DENSE_ARGS = ("Q, Q_pe, KV, K_pe, Kv_scale, Block_table, bx, by, seqlen, first_token, n_blocks, acc_o, logsum, "
              "scores_max")
OLD_DENSE_ARGS = "Q, Q_pe, KV, K_pe, Block_table, bx, by, seqlen, first_token, n_blocks, acc_o, logsum, scores_max"


# -- --steps ---------------------------------------------------------------------------------------

def test_steps_take_a_percent_sign_and_the_largest_step_is_allowed():
    assert ladder.parse_steps("0%, 2.5%,50") == (0.0, 2.5, 50.0)


@pytest.mark.parametrize("text, message", [
    ("", "--steps: '' is not a percentage (give e.g. --steps 0,1,2,3,5,8)"),
    (None, "--steps: '' is not a percentage (give e.g. --steps 0,1,2,3,5,8)"),
    ("1,%5", "--steps: '%5' is not a percentage (give e.g. --steps 0,1,2,3,5,8)"),
    ("50.5", "--steps: '50.5' is out of range; a step is a slowdown of 0 to 50 %"),
    ("-0.5%", "--steps: '-0.5%' is out of range; a step is a slowdown of 0 to 50 %"),
    ("inf", "--steps: 'inf' is out of range; a step is a slowdown of 0 to 50 %"),
    ("5,5%", "--steps: '5%' is given twice")])
def test_a_bad_step_is_refused_with_the_item_quoted(text, message):
    with pytest.raises(ValueError) as refused:
        ladder.parse_steps(text)
    assert str(refused.value) == message


# -- the patch's lookup key and the calibration ----------------------------------------------------

def test_a_shape_key_is_the_config_name_after_tilelang_and_the_dense_shape():
    """The config is everything after "tilelang-" (as run.py maps an impl to its config), a dash in it too."""
    assert ladder.shape_key(SPUN.key) == ("hopper", 64, 4096, 16, "float16", 1)
    key = ("tilelang-hopper-v2", 32, 1024, "bfloat16", 64, 2, "bfloat16", "dense")
    assert ladder.shape_key(key) == ("hopper-v2", 32, 1024, 64, "bfloat16", 2)


def test_the_probe_spins_8_percent_of_the_case_at_1_5_ghz_and_at_least_1000_cycles():
    assert ladder.probe_cycles(100e-6) == 12000
    assert ladder.probe_cycles(10.0) == 1_200_000_000  # the longest latency a file may hold: every cycle counts
    assert ladder.probe_cycles(1e-6) == 1000  # 120 cycles would drown in the clock's noise
    assert ladder.probe_cycles(100e-6, clock_hz=2e9, share=0.05) == 10000


def test_a_probe_that_added_no_time_is_refused_with_both_medians_in_microseconds():
    with pytest.raises(ValueError) as refused:
        ladder.fit(1.0, 0.9, 1000)
    assert str(refused.value) == ("calibration: a spin of 1000 cycles added no time (1000000.00 -> 900000.00 µs); "
                                  "the GPU's timing is not usable for the ladder")


# -- the patch -------------------------------------------------------------------------------------

def test_a_kernel_file_the_step_cannot_wrap_says_why_with_the_arguments_it_knows():
    assert ladder.unpatchable("def program(p):\n    pass\n") == "defines no attend_macro"
    old = "x = 1\ndef attend_macro(shape):\n    def attend(Q, KV):\n        pass\n"
    assert ladder.unpatchable(old) == (
        f"has an attend macro whose arguments are not ({DENSE_ARGS}) or ({OLD_DENSE_ARGS})")
    assert ladder.unpatchable(old, ladder.SEESAW_FILE) == (
        "has an attend macro whose arguments are not (Q, Q_pe, KV, K_pe, bx, by, bz, first_token, n_pairs, out, "
        "lse_out)")
    new = f"x = 1\ndef attend_macro(shape):\n    def attend({OLD_DENSE_ARGS}):\n        pass\n"
    assert ladder.unpatchable(new) is None


def test_step_0_of_a_file_without_a_final_newline_is_one_comment_line_of_its_own():
    assert ladder.patched("x = 1", 0, {}, "run1") == "x = 1\n# mlagate ladder run1: step 0% (no delay)\n"
    assert ladder.patched("x = 1\n", 0, {}, "run1") == "x = 1\n# mlagate ladder run1: step 0% (no delay)\n"


def test_a_spun_step_of_a_file_without_a_final_newline_keeps_its_last_line_whole():
    text = ladder.patched("x = 1", 5, {("hopper", 64, 4096, 16, "float16", 1): 4000}, "run1")
    assert text.startswith("x = 1\n\n\n# mlagate ladder run1: step 5% -- a calibrated spin")
    assert "    ('hopper', 64, 4096, 16, 'float16', 1): 4000,\n" in text


# -- a gate run's step result ----------------------------------------------------------------------

def test_a_step_result_keeps_every_field_of_the_re_measure_the_clocks_and_the_gates_errors():
    calibrated = {c.label(): {"steps": {"2.5": {"cycles": 2800, "injected": 0.026}}} for c in (SPUN, MISSING)}
    flagged = CaseVerdict(SPUN.key, Status.REGRESSION, reasons=[Note(Kind.LATENCY, "slower")], change=0.024,
                          flagged=True, detectable=0.011,
                          confirmation={"change": 0.027, "p_value": 1e-6, "agrees": True, "rounds": 3,
                                        "decision": "regression"})
    cleared = CaseVerdict(UNSPUN.key, Status.PASS, change=0.013, flagged=True, confirmation={"change": -0.002})
    verdict = Verdict(Outcome.REGRESSION, [flagged, cleared], errors=[Note(Kind.NO_GATED_CASES, "a gate error")])
    clocks = {UNSPUN.key: {"raw": 0.013, "normalized": 0.004, "binned": 0.001}, MISSING.key: {"raw": 1.0}}
    result = ladder.step_result(verdict, (SPUN, MISSING), calibrated, 2, 2.5, "c" * 40, clocks)
    assert result == {
        "rep": 2, "step": 2.5, "commit": "c" * 40, "outcome": "regression", "exit_code": 1,
        "errors": ["a gate error"],
        "cases": [
            {"case": list(SPUN.key), "label": SPUN.label(), "cycles": 2800, "injected": 0.026, "recorded": 0.024,
             "confirmed": 0.027, "confirm_p": 1e-6, "rounds": 3, "decision": "regression", "detectable": 0.011,
             "status": "regression", "reasons": ["latency"]},
            {"case": list(MISSING.key), "label": MISSING.label(), "cycles": 2800, "injected": 0.026,
             "recorded": None, "confirmed": None, "confirm_p": None, "rounds": None, "decision": None,
             "detectable": None, "status": "missing", "reasons": ["not in the gate's verdict"]}],
        "untouched": [{"case": list(UNSPUN.key), "label": UNSPUN.label(), "recorded": 0.013, "confirmed": -0.002,
                       "status": "pass", "clock": {"raw": 0.013, "normalized": 0.004, "binned": 0.001}}]}
    json.dumps(result)  # it is written to the step's JSON file as it is


# -- the table -------------------------------------------------------------------------------------

def step_doc(rep, step, cases, untouched=None) -> dict:
    doc = {"rep": rep, "step": step, "commit": "c" * 40, "outcome": "pass", "exit_code": 0, "errors": [],
           "cases": cases}
    return doc if untouched is None else {**doc, "untouched": untouched}


def case_doc(injected, recorded, confirmed, status, label="a", **more) -> dict:
    return {"case": ["tilelang-hopper", 64], "label": label, "cycles": 1, "injected": injected,
            "recorded": recorded, "confirmed": confirmed, "confirm_p": None, "status": status, "reasons": [], **more}


def test_a_row_carries_the_case_key_and_its_errors_in_percentage_points():
    doc = step_doc(1, 5.0, [case_doc(0.0625, 0.0675, None, "regression", rounds=2, detectable=0.01),
                            case_doc(None, None, None, "missing", label="b")])
    assert ladder.rows([doc]) == [
        {"rep": 1, "step": 5.0, "label": "a", "case": ["tilelang-hopper", 64], "injected": 0.0625,
         "recorded": 0.0675, "confirmed": None, "status": "regression", "rounds": 2, "detectable": 0.01,
         "recorded_pp": pytest.approx(0.5), "confirmed_pp": None},
        {"rep": 1, "step": 5.0, "label": "b", "case": ["tilelang-hopper", 64], "injected": None, "recorded": None,
         "confirmed": None, "status": "missing", "rounds": None, "detectable": None, "recorded_pp": None,
         "confirmed_pp": None}]


def test_a_summary_counts_each_status_and_an_error_of_exactly_the_tolerance_is_within():
    """0.005 against 0 is exactly 0.5 pp (TOLERANCE_PP); a step nothing ran for has no injected range."""
    assert ladder.error_pp(0.005, 0.0) == ladder.TOLERANCE_PP
    docs = [step_doc(1, 1.0, [case_doc(0.0, 0.005, None, "pass"), case_doc(0.0, -0.00625, 0.0, "pass", label="b"),
                              case_doc(0.01, 0.02, 0.01, "regression", label="c"),
                              case_doc(0.02, None, None, "unsure", label="d"),
                              case_doc(None, None, None, "missing", label="e")])]
    assert ladder.summary(ladder.rows(docs), (1.0, 2.0)) == [
        {"step": 1.0, "n": 5, "pass": 2, "fail": 1, "unsure": 1, "other": 1, "injected_min": 0.0,
         "injected_max": 0.02, "max_recorded_pp": 1.0, "max_confirmed_pp": 0.0, "measured": 5, "within": 3},
        {"step": 2.0, "n": 0, "pass": 0, "fail": 0, "unsure": 0, "other": 0, "injected_min": None,
         "injected_max": None, "max_recorded_pp": None, "max_confirmed_pp": None, "measured": 0, "within": 0}]


def test_the_noise_floor_counts_a_change_of_exactly_the_tolerance_as_within():
    def untouched(recorded, status="pass", **more):
        return {"case": ["x"], "label": "u", "recorded": recorded, "status": status, **more}

    docs = [step_doc(1, 0.0, [], [untouched(0.005), untouched(-0.01, "regression", confirmed=0.0025)]),
            step_doc(2, 0.0, [], [untouched(0.00625, clock={"normalized": 0.003, "binned": None})])]
    assert ladder.untouched(docs) == [
        {"label": "u", "n": 3, "max_pp": 1.0, "rms_pp": math.sqrt((0.25 + 1.0 + 0.390625) / 3),
         "rms_normalized_pp": pytest.approx(0.3), "rms_binned_pp": None, "confirmed": 1, "max_confirmed_pp": 0.25,
         "measured": 4, "within": 2, "fail": 1}]


# -- resuming --------------------------------------------------------------------------------------

def test_a_saved_calibration_of_other_steps_or_cases_of_the_same_length_is_another_ladder():
    wanted = {"base": "a", "cases": [("c", 1)], "steps": (0, 5)}
    saved = json.loads(json.dumps(wanted))
    assert ladder.mismatch(saved, wanted) == []
    assert ladder.mismatch({**saved, "steps": [0, 8], "cases": [["c", 2]]}, wanted) == ["cases", "steps"]


def calibration(**changes) -> dict:
    step = {"cycles": 1, "injected": -1.0}
    doc = {"run_id": "r1", "cases_calibrated": {"a": {"median_s": 1e-4, "steps": {"0": {"cycles": None},
                                                                                 "5": step}}}}
    return {**doc, **changes}


def with_step(step) -> dict:
    return calibration(cases_calibrated={"a": {"median_s": 1e-4, "steps": {"5": step}}})


def test_a_calibration_at_the_edges_of_each_range_reads_back():
    """A cycle count of 1 and an injected share of -1 or 10 are in range; a step may leave injected out."""
    assert ladder.calibration_problem(calibration()) is None
    for step in ({"cycles": 1, "injected": 10.0}, {"cycles": 7}, {"cycles": None, "injected": 0}):
        assert ladder.calibration_problem(with_step(step)) is None, step


@pytest.mark.parametrize("doc, problem", [
    ([], "a JSON list, not an object"),
    (calibration(run_id=""), "run_id: must be a name, got ''"),
    (calibration(run_id=5), "run_id: must be a name, got 5"),
    ({"cases_calibrated": {}}, "run_id: must be a name, got None"),
    (calibration(cases_calibrated={}), "cases_calibrated: must be a mapping of case labels, got {}"),
    (calibration(cases_calibrated=["a"]), "cases_calibrated: must be a mapping of case labels, got ['a']"),
    (calibration(cases_calibrated={"a": "x"}), "cases_calibrated.a.steps: must be a mapping of steps"),
    (calibration(cases_calibrated={"a": {"median_s": 1e-4, "steps": []}}),
     "cases_calibrated.a.steps: must be a mapping of steps"),
    (calibration(cases_calibrated={"a": {"median_s": 20.0, "steps": {}}}),
     "cases_calibrated.a.median_s: must be a latency in [1e-09, 10] s"),
    (with_step(5), "cases_calibrated.a.steps.5.cycles: must be a positive integer or null, got 'no step'"),
    (with_step({"cycles": 0}), "cases_calibrated.a.steps.5.cycles: must be a positive integer or null, got 0"),
    (with_step({"cycles": 2.0}), "cases_calibrated.a.steps.5.cycles: must be a positive integer or null, got 2.0"),
    (with_step({"cycles": 3, "injected": math.nan}),
     "cases_calibrated.a.steps.5.injected: must be a finite share, got nan"),
    (with_step({"cycles": 3, "injected": -1.5}),
     "cases_calibrated.a.steps.5.injected: must be a finite share, got -1.5"),
    (with_step({"cycles": 3, "injected": 10.5}),
     "cases_calibrated.a.steps.5.injected: must be a finite share, got 10.5")])
def test_a_damaged_calibration_names_the_key_and_what_it_holds(doc, problem):
    assert ladder.calibration_problem(doc) == problem

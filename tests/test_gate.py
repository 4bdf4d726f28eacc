"""The gate driven by real asv results recorded on an H200, and copies altered
to produce each situation the gate must handle."""

import json

import pytest

import gate_fixtures as fx
from mlagate import cli, config
from mlagate.decide.verdict import Kind, Outcome, Status, evaluate
from mlagate.report.text import annotations, gate_markdown
from mlagate.store.env import RunEnv
from mlagate.store.results import Store
from mlagate.store.results_file import BENCH_RATIO, BENCH_TIME

HOPPER_128 = ("tilelang-hopper", 128, 4096, "float16", 128, 1, "float16", "dense")


@pytest.fixture
def root(tmp_path):
    return fx.copy_store(tmp_path)


def by_case(verdict):
    return {c.case: c for c in verdict.cases}


def test_pass_on_a_docs_only_change(root):
    verdict = fx.evaluate(root, head=fx.DOCS)
    assert verdict.outcome == Outcome.PASS and verdict.exit_code == 0
    assert {c.case for c in verdict.cases} == {fx.HOPPER_64, HOPPER_128}
    assert all(abs(c.change) < 0.025 for c in verdict.cases)
    assert all(c.vendor_ratio > 0.7 for c in verdict.cases)


def test_a_real_slowdown_is_a_regression(root):
    verdict = fx.evaluate(root, head=fx.SLOW)
    assert verdict.outcome == Outcome.REGRESSION and verdict.exit_code == 1
    for cv in verdict.cases:
        assert cv.status == Status.REGRESSION
        assert cv.change > 0.2 and cv.p_value < 1e-10
        assert [r.kind for r in cv.reasons] == [Kind.LATENCY]


def test_small_slowdown_between_screen_and_threshold_passes_without_confirmation(root):
    fx.slow_case(root, fx.DOCS, fx.HOPPER_64, 1.02)
    cv = by_case(fx.evaluate(root, head=fx.DOCS))[fx.HOPPER_64]
    assert cv.flagged and cv.status == Status.PASS
    assert [w.kind for w in cv.warnings] == [Kind.UNDER_THRESHOLD]


def test_confirmation_decides_a_flagged_case(root):
    fx.slow_case(root, fx.DOCS, fx.HOPPER_64, 1.10)
    store = Store(root)
    base_samples = store.load(fx.MACHINE, fx.BASE).entries(BENCH_TIME)[fx.HOPPER_64].samples
    same = {fx.HOPPER_64: (base_samples, base_samples)}
    slower = {fx.HOPPER_64: (base_samples, tuple(s * 1.10 for s in base_samples))}
    cleared = by_case(fx.evaluate(root, head=fx.DOCS, confirmations=same))[fx.HOPPER_64]
    assert cleared.status == Status.PASS and [w.kind for w in cleared.warnings] == [Kind.NOT_CONFIRMED]
    assert cleared.confirmation["agrees"] is False
    confirmed = by_case(fx.evaluate(root, head=fx.DOCS, confirmations=slower))[fx.HOPPER_64]
    assert confirmed.status == Status.REGRESSION and confirmed.confirmation["agrees"] is True


def with_floor(floor):
    raw = _raw_config()
    raw["gate"]["vendor_ratio"]["cuda"]["floor"] = floor
    return config.parse(raw)


def test_vendor_ratio_falling_below_the_floor_fails(root):
    base_ratio = Store(root).load(fx.MACHINE, fx.BASE).entries(BENCH_RATIO)[fx.HOPPER_64].value
    fx.edit(root, fx.DOCS, BENCH_RATIO, fx.HOPPER_64, lambda v, s: (base_ratio * 0.97, s))  # under max_drop
    floor = base_ratio * 0.985
    cv = by_case(fx.evaluate(root, head=fx.DOCS, cfg=with_floor(floor)))[fx.HOPPER_64]
    assert cv.status == Status.REGRESSION and cv.below_floor
    assert [r.kind for r in cv.reasons] == [Kind.BELOW_FLOOR] and f"{floor:.2f}" in cv.reasons[0].text


def test_a_case_below_the_floor_on_base_too_is_a_known_gap_not_this_change(root):
    verdict = fx.evaluate(root, head=fx.DOCS, cfg=with_floor(0.9))
    assert verdict.outcome == Outcome.PASS
    assert all(Kind.KNOWN_GAP in [w.kind for w in c.warnings] for c in verdict.cases)


def test_a_new_case_below_the_floor_fails(root):
    fx.drop_batch(root, fx.BASE, 64)
    cv = by_case(fx.evaluate(root, head=fx.DOCS, cfg=with_floor(0.9)))[fx.HOPPER_64]
    assert cv.status == Status.REGRESSION and cv.below_floor
    assert [r.kind for r in cv.reasons] == [Kind.BELOW_FLOOR] and "0.90" in cv.reasons[0].text


def test_vendor_ratio_drop_fails(root):
    fx.edit(root, fx.DOCS, BENCH_RATIO, fx.HOPPER_64, lambda v, s: (v * 0.9, s))
    cases = by_case(fx.evaluate(root, head=fx.DOCS))
    assert cases[fx.HOPPER_64].status == Status.REGRESSION and cases[fx.HOPPER_64].ratio_dropped
    dropped = cases[fx.HOPPER_64].reasons[0]
    assert dropped.kind is Kind.RATIO_DROP and "10.7% (0.784 → 0.701" in dropped.text  # the numbers, as shown
    assert cases[HOPPER_128].status == Status.PASS


def test_new_case_has_no_baseline(root):
    fx.drop_batch(root, fx.BASE, 64)
    verdict = fx.evaluate(root, head=fx.DOCS)
    cases = by_case(verdict)
    assert cases[fx.HOPPER_64].status == Status.NO_BASELINE
    assert verdict.outcome == Outcome.PASS


def test_removed_case_is_reported(root):
    fx.drop_batch(root, fx.DOCS, 64)
    raw = _raw_config()
    for name in ("quick", "full"):  # perf.yml no longer measures batch 64
        raw["grid"][name]["batch"] = [128]
    for w in raw["workloads"].values():
        w["batch"] = [128]
    cases = by_case(fx.evaluate(root, head=fx.DOCS, cfg=config.parse(raw)))
    assert cases[fx.HOPPER_64].status == Status.REMOVED
    assert cases[HOPPER_128].status == Status.PASS


def test_a_case_missing_in_head_that_perf_yml_still_lists_is_an_error(root):
    fx.drop_batch(root, fx.DOCS, 64)
    verdict = fx.evaluate(root, head=fx.DOCS)
    assert verdict.outcome == Outcome.ERROR
    assert [r.kind for r in by_case(verdict)[fx.HOPPER_64].reasons] == [Kind.MISSING_IN_HEAD]


@pytest.mark.parametrize("grid,status", [("quick", Status.REMOVED), ("full", Status.ERROR), (None, Status.ERROR)])
def test_a_missing_case_is_judged_by_the_grid_head_was_recorded_with(root, grid, status):
    """HOPPER_64 (128 heads) is in the full grid, not the quick one: a quick-grid head lacks it by design."""
    fx.drop_batch(root, fx.DOCS, 64)
    verdict = fx.evaluate(root, head=fx.DOCS, envs=(None, RunEnv(grid=grid) if grid else None))
    cv = by_case(verdict)[fx.HOPPER_64]
    assert cv.status == status
    if status == Status.REMOVED:
        assert [w.text for w in cv.warnings] == ["in base, not in head: head's grid (quick) does not list it"]


def test_failed_case_is_an_error(root):
    fx.edit(root, fx.DOCS, BENCH_TIME, fx.HOPPER_64, fx.fail)
    verdict = fx.evaluate(root, head=fx.DOCS)
    assert verdict.outcome == Outcome.ERROR and verdict.exit_code == 2
    assert [r.kind for r in by_case(verdict)[fx.HOPPER_64].reasons] == [Kind.FAILED_IN_HEAD]


def test_gated_case_skipped_in_head_is_an_error(root):
    fx.edit(root, fx.DOCS, BENCH_TIME, fx.HOPPER_64, fx.skip)
    cv = by_case(fx.evaluate(root, head=fx.DOCS))[fx.HOPPER_64]
    assert cv.status == Status.ERROR and [r.kind for r in cv.reasons] == [Kind.SKIPPED_IN_HEAD]


@pytest.mark.parametrize("damage", [fx.skip, fx.fail])
def test_a_gated_case_without_vendor_ratio_is_an_error_for_that_case(root, damage):
    fx.edit(root, fx.DOCS, BENCH_RATIO, fx.HOPPER_64, damage)
    verdict = fx.evaluate(root, head=fx.DOCS)
    assert verdict.outcome == Outcome.ERROR and verdict.exit_code == 2
    cases = by_case(verdict)
    assert cases[fx.HOPPER_64].status == Status.ERROR
    no_ratio = cases[fx.HOPPER_64].reasons[0]
    assert no_ratio.kind is Kind.NO_RATIO and "flash_mla" in no_ratio.text  # names the vendor
    assert cases[HOPPER_128].status == Status.PASS
    assert "tilelang-hopper h=128 b=64 s=4096 float16" in gate_markdown(verdict)


def test_results_without_samples_are_an_error(root):
    fx.edit(root, fx.DOCS, BENCH_TIME, fx.HOPPER_64, lambda v, s: (v, None))
    cv = by_case(fx.evaluate(root, head=fx.DOCS))[fx.HOPPER_64]
    assert cv.status == Status.ERROR and [r.kind for r in cv.reasons] == [Kind.NO_SAMPLES]


def test_drift_against_recent_main_results_warns(root):
    store = Store(root)
    base, head = store.load(fx.MACHINE, fx.BASE), store.load(fx.MACHINE, fx.SLOW)
    verdict = evaluate(base, base, fx.as_recorded(config.load()), "cuda", history=[base, base, head])
    assert verdict.outcome == Outcome.PASS and not any(c.drift for c in verdict.cases)
    verdict = evaluate(head, head, fx.as_recorded(config.load()), "cuda", history=[base, base, head])
    drifting = [c for c in verdict.cases if Kind.DRIFT in [w.kind for w in c.warnings]]
    assert drifting and all(c.drift.kind is Kind.DRIFT for c in drifting)
    warnings = [a for a in annotations(verdict) if a.startswith("::warning")]
    assert drifting and len(warnings) == len(drifting)
    assert all("perf drift" in a and "slower than the best of the last" in a for a in warnings)


# -- through the command line ----------------------------------------------------

def gate_cli(root, tmp_path, *extra, base=fx.BASE, head=fx.DOCS):
    return cli.main([*extra, "gate", "--base", base, "--head", head, "--machine", fx.MACHINE,
                     "--results", str(root), "--out", str(tmp_path / "out")])


def test_cli_pass_writes_report_and_verdict(root, tmp_path, capsys):
    assert gate_cli(root, tmp_path) == 0
    out = capsys.readouterr().out
    assert "perf gate: pass" in out
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text())
    assert verdict["outcome"] == "pass" and verdict["exit_code"] == 0
    assert (tmp_path / "out" / "tflops.png").stat().st_size > 1000


def test_cli_regression_prints_annotations(root, tmp_path, capsys):
    assert gate_cli(root, tmp_path, head=fx.SLOW) == 1
    out = capsys.readouterr().out
    # ':' and ',' in a title are percent-encoded: GitHub splits a command's properties at them
    assert "::error title=perf regression%3A tilelang-hopper h=128 b=64 s=4096 float16::latency +" in out
    assert "| tilelang-hopper h=128 b=64 s=4096 float16 |" in (tmp_path / "out" / "gate.md").read_text()
    # verdict.json shows each status and note as its text, as before the notes carried a kind
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text())
    assert (verdict["outcome"], verdict["exit_code"]) == ("regression", 1)
    for case in verdict["cases"]:
        assert case["status"] == "regression" and case["drift"] is None
        assert len(case["reasons"]) == 1 and case["reasons"][0].startswith("latency +")
    assert all(isinstance(w, str) for w in verdict["warnings"])


def test_a_corrupt_base_env_record_is_named_and_decides_nothing(root, tmp_path, capsys):
    env = root / fx.MACHINE / f"{fx.BASE[:8]}-env.sidecar"
    env.write_text("{not json")
    assert gate_cli(root, tmp_path, head=fx.SLOW) == 1  # the verdict stands; only the page lacks base's GPU
    warnings = json.loads((tmp_path / "out" / "verdict.json").read_text())["warnings"]
    assert any(str(env) in w for w in warnings), warnings
    assert "hardware not recorded" in (tmp_path / "out" / "comparison.html").read_text()
    assert env.read_text() == "{not json"


def test_cli_corrupt_head_file_is_reported_by_path_and_kept(root, tmp_path, capsys):
    path = fx.results_file(root, fx.DOCS)
    path.write_text(path.read_text()[: len(path.read_text()) // 2])  # a partial write
    assert gate_cli(root, tmp_path) == 2
    err = capsys.readouterr().err
    assert f"{path}: corrupt results file of head fbc171ef" in err
    assert "restore it" in err and "mlagate record" not in err  # record would be refused over it
    assert path.exists()


def test_cli_missing_base_says_what_to_run(root, tmp_path, capsys):
    missing = "0" * 40
    assert gate_cli(root, tmp_path, base=missing) == 2
    err = capsys.readouterr().err
    assert f"mlagate record --rev {missing} --machine h200" in err


def test_cli_bad_config_names_the_key(root, tmp_path, capsys):
    raw = _raw_config()
    raw["gate"]["latency"]["treshold"] = raw["gate"]["latency"].pop("threshold")
    bad = tmp_path / "perf.yml"
    bad.write_text(json.dumps(raw))
    assert gate_cli(root, tmp_path, "--config", str(bad)) == 2
    assert "gate.latency.treshold: unknown key" in capsys.readouterr().err


def _raw_config():
    return fx.recorded_raw()


def test_a_head_count_the_vendor_lacks_is_gated_on_latency_alone(root):
    """perf.yml's vendor_heads: no ratio is required there, the report says so, latency still decides."""
    raw = _raw_config()
    raw["platforms"]["cuda"]["vendor_heads"] = raw["platforms"]["cuda"]["vendor_q_len_heads"] = [16, 32, 64]
    cfg = config.parse(raw)
    fx.edit(root, fx.DOCS, BENCH_RATIO, fx.HOPPER_64, fx.skip)
    cases = by_case(fx.evaluate(root, head=fx.DOCS, cfg=cfg))
    assert cases[fx.HOPPER_64].status == Status.PASS and cases[fx.HOPPER_64].vendor_ratio is None
    assert Kind.NO_VENDOR_KERNEL in [w.kind for w in cases[fx.HOPPER_64].warnings]
    assert by_case(fx.evaluate(root, head=fx.SLOW, cfg=cfg))[fx.HOPPER_64].status == Status.REGRESSION
    assert by_case(fx.evaluate(root, head=fx.DOCS))[fx.HOPPER_64].status == Status.ERROR  # declared: all heads


def _record_clocks(root, commit, control, windows):
    """Give a copied record the clock facts and sampling windows a record now writes."""
    env_path = root / fx.MACHINE / f"{commit[:8]}-env.sidecar"
    env = json.loads(env_path.read_text())
    env["start"]["clock_control"] = control
    env_path.write_text(json.dumps(env))
    rows = [{"impl": "tilelang-hopper", "samples": {"windows": windows}}]
    (root / fx.MACHINE / f"{commit[:8]}-cases.sidecar").write_text(json.dumps({"results": rows}))


def test_unlocked_clocks_are_a_warning_in_the_report_never_a_failure(root, tmp_path, capsys):
    windows = [{"samples": 100, "sm_mhz": mhz, "kept": kept, "throttle": ["sw_power_cap"]}
               for mhz, kept in ((1350.0, True), (1485.0, True), (1200.0, False))]
    _record_clocks(root, fx.DOCS, {"vendor": "nvidia", "api": "nvml", "locked": None}, windows)
    _record_clocks(root, fx.BASE, {"vendor": "nvidia", "api": "nvml", "locked": True}, windows)
    assert gate_cli(root, tmp_path) == 0
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text())
    clocks = [w for w in verdict["warnings"] if "GPU clocks not" in w]
    assert clocks == [f"head {fx.DOCS[:8]}: GPU clocks not known to be locked on this runner: the SM clock read "
                      "1200-1485 MHz over 3 sampling windows, 1 window(s) dropped as throttled; changes near the "
                      "screen may be clock noise (docs/clocks.md)"]
    assert "clocks not known to be locked" in (tmp_path / "out" / "gate.md").read_text()


def test_windows_that_all_read_one_clock_need_no_warning(root, tmp_path, capsys):
    steady = [{"samples": 100, "sm_mhz": 1755.0, "kept": True}, {"samples": 100, "sm_mhz": 1760.0, "kept": True}]
    _record_clocks(root, fx.DOCS, {"vendor": "nvidia", "api": "nvml", "locked": None}, steady)
    assert gate_cli(root, tmp_path) == 0
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text())
    assert not [w for w in verdict["warnings"] if "GPU clocks" in w]


def test_a_runner_whose_clocks_could_not_be_read_is_told_so(root, tmp_path, capsys):
    _record_clocks(root, fx.DOCS, {"vendor": None, "api": None, "locked": None,
                                   "unavailable": "pynvml is not installed"}, [])
    assert gate_cli(root, tmp_path) == 0
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text())
    assert any("clocks not read on this runner (pynvml is not installed)" in w for w in verdict["warnings"])

"""Reading a change with each window's SM clock (mlagate.decide.clock_compare), on synthetic windows, and the lab
study over the demo's recorded H200 pair."""

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from mlagate.config import ROOT
from mlagate.decide import clock_compare
from mlagate.store.results import CommitResults, Store
from mlagate.store.results_file import BENCH_TIME, Entry


def windows(clocks, per=20):
    return [{"samples": per, "sm_mhz": c, "kept": True} for c in clocks]


def timed(clocks, cycles=1.98e5, per=20, change=0.0):
    """Times of a kernel whose time follows the SM clock exactly (cycles / clock), ``change`` slower."""
    return tuple(t for c in clocks for t in [cycles / (c * 1e6) * (1 + change)] * per)


def test_a_clock_bound_kernel_reads_no_change_normalized_or_binned_where_raw_reads_the_clock():
    base_clocks, head_clocks = [1980] * 6 + [1800] * 4, [1980] * 2 + [1800] * 8
    got = clock_compare.changes(timed(base_clocks), windows(base_clocks), timed(head_clocks), windows(head_clocks))
    assert got["raw"] == pytest.approx(1980 / 1800 - 1)  # the medians sit at different clocks
    assert got["normalized"] == pytest.approx(0.0, abs=1e-12) and got["binned"] == pytest.approx(0.0, abs=1e-12)


def test_a_real_change_reads_the_same_three_ways_at_one_clock():
    clocks = [1980] * 10
    got = clock_compare.changes(timed(clocks), windows(clocks), timed(clocks, change=0.03), windows(clocks))
    assert got == pytest.approx({"raw": 0.03, "normalized": 0.03, "binned": 0.03})


def test_windows_that_do_not_add_up_to_the_samples_read_raw_only():
    clocks = [1980] * 10
    short = windows(clocks)[:-1]
    got = clock_compare.changes(timed(clocks), short, timed(clocks), windows(clocks))
    assert got["normalized"] is None and got["binned"] is None and got["raw"] == 0.0
    dropped = windows(clocks) + [{"samples": 20, "sm_mhz": 1500, "kept": False}]  # dropped windows hold no samples
    assert clock_compare.changes(timed(clocks), dropped, timed(clocks), windows(clocks))["normalized"] == 0.0


def test_no_shared_clock_bins_read_none():
    got = clock_compare.changes(timed([1980] * 4), windows([1980] * 4), timed([1800] * 4), windows([1800] * 4))
    assert got["binned"] is None and got["normalized"] == pytest.approx(0.0, abs=1e-12)
    assert clock_compare.rms_pp([0.003, -0.004, None]) == pytest.approx(np.sqrt(0.125))
    assert clock_compare.rms_pp([None]) is None


def test_the_clock_study_reads_the_demo_pair():
    out = subprocess.run([sys.executable, "-m", "lab.clock_study", "demo/results", "--touched",
                          "tilelang-seesaw h=* float16"], capture_output=True, text=True, check=True).stdout
    assert "untouched cases: 16; rms change (pp): raw 0.609 over 16, normalized 0.613 over 16, binned 0.609 over 16" \
        in out
    # one record against the base: its shift is the mean change, and the rest the changes' spread around it
    assert "each record's shift (its untouched cases' mean raw change): 91da13fe9c +0.096 pp\n" \
        "raw rms with each record's shift taken out: 0.601 pp" in out
    assert "each untouched case's sd over the 2 records, pooled over 16 cases: 0.427 %, 0.436 % with each record's " \
        "shift taken out" in out


def test_the_clock_studys_spread_pools_each_cases_sd_over_every_record_the_base_included(monkeypatch):
    """Two cases, two records against the base at +1% and -1% (both cases alike): each case reads 1, 1.01, 0.99,
    a 1% sd; the records' shifts are the whole of it, so without them nothing is left. A touched case is left out."""
    monkeypatch.syspath_prepend(str(ROOT))  # lab/ is not installed
    from lab.clock_study import spread_line

    rows = {("m", r, case): ({"raw": x}, False) for r, x in (("r1", 0.01), ("r2", -0.01)) for case in ("c1", "c2")}
    rows[("m", "r1", "touched")] = ({"raw": 0.5}, True)
    assert spread_line(rows, {("m", "r1"): 0.01, ("m", "r2"): -0.01}).startswith(
        "each untouched case's sd over the 3 records, pooled over 2 cases: 1.000 %, 0.000 % with each record's shift")


# -- windowed: the samples of each kept window, with its clock ------------------------------------------------------

def test_the_samples_split_by_kept_window_each_with_its_clock_or_none():
    """A window without ``kept`` is kept; a dropped one holds none of the samples; a clock that is no positive
    number reads as unknown; the times come back as floats whatever the samples' type."""
    got = clock_compare.windowed((1, 2, 3, 4, 5, 6, 7), [
        {"samples": 1, "sm_mhz": 1980},
        {"samples": 9, "sm_mhz": 1500, "kept": False},
        {"samples": 2, "sm_mhz": 0, "kept": True},
        {"samples": 1, "sm_mhz": -1980},
        {"samples": 1, "sm_mhz": "1980"},
        {"samples": 1, "sm_mhz": 1},  # the smallest positive reading is still a clock
        {"samples": 1},
        "not a window",
    ])
    assert [(clock, times.tolist()) for clock, times in got] == [
        (1980.0, [1.0]), (None, [2.0, 3.0]), (None, [4.0]), (None, [5.0]), (1.0, [6.0]), (None, [7.0])]
    assert all(times.dtype == np.float64 for _, times in got)


@pytest.mark.parametrize("samples, kept", [
    ((), []),  # nothing recorded at all
    ((0.1,) * 40, None),  # a record from before windows were kept
    ((0.1,) * 40, [{"samples": 40, "kept": False}]),  # every window dropped
    ((0.1,) * 40, [{"samples": 20}]),  # fewer samples in the windows than recorded
    ((0.1,) * 40, [{"samples": 20}, {"samples": 0}, {"samples": 20}]),  # an empty window
    ((0.1,) * 40, [{"samples": 20.0}, {"samples": 20}]),  # a count that is not a whole number
])
def test_windows_that_do_not_account_for_the_samples_read_as_none(samples, kept):
    assert clock_compare.windowed(samples, kept) is None


# -- changes: the three readings ------------------------------------------------------------------------------------

def test_binned_weighs_each_shared_clock_by_the_samples_the_smaller_side_holds_there():
    """1% slower at 1980 MHz (20 base samples, 40 head), 3% at 1800 MHz (60 each): weights 20 and 60."""
    cycles = 1.98e5
    base = [cycles / 1980e6] * 20 + [cycles / 1800e6] * 60
    head = [cycles / 1980e6 * 1.01] * 40 + [cycles / 1800e6 * 1.03] * 60
    got = clock_compare.changes(base, [{"samples": 20, "sm_mhz": 1980}, {"samples": 60, "sm_mhz": 1800}],
                                head, [{"samples": 40, "sm_mhz": 1980}, {"samples": 60, "sm_mhz": 1800}])
    assert got == pytest.approx({"raw": 0.03, "normalized": 0.03, "binned": 1.01 ** 0.25 * 1.03 ** 0.75 - 1})


def test_windows_without_any_clock_read_raw_only():
    clockless = [{"samples": 20}, {"samples": 20}]
    got = clock_compare.changes(timed([1980] * 2), clockless, timed([1980] * 2, change=0.04), clockless)
    assert got == pytest.approx({"raw": 0.04, "normalized": None, "binned": None})


def test_one_window_without_a_clock_leaves_normalized_none_and_bins_the_clocked_windows():
    """A time whose clock is unknown cannot be scaled to the reference; the windows that read one still bin."""
    head_windows = [{"samples": 20, "sm_mhz": 1980}, {"samples": 20}]
    got = clock_compare.changes(timed([1980] * 4), windows([1980] * 4), timed([1980] * 2, change=0.02), head_windows)
    assert got == pytest.approx({"raw": 0.02, "normalized": None, "binned": 0.02})
    got = clock_compare.changes(timed([1980] * 2, change=0.02), head_windows, timed([1980] * 4), windows([1980] * 4))
    assert got == pytest.approx({"raw": 1 / 1.02 - 1, "normalized": None, "binned": 1 / 1.02 - 1})


# -- case_changes and store_changes: the cases of two records ------------------------------------------------------

FP16 = ("tilelang-seesaw", 64, 4096, "float16", 16, 1, "float16", "dense")
FP8 = ("tilelang-seesaw", 64, 4096, "float16", 16, 2, "float8_e4m3fn", "dense")  # 2 query tokens, an fp8 cache
NO_ROW, HEAD_FAILED, BASE_ONLY, NO_SAMPLES, NOT_ASKED = (("flash_mla", batch, 4096, "float16", 16, 1, "float16",
                                                          "dense") for batch in (8, 16, 32, 64, 128))


def recorded(commit, times: dict) -> CommitResults:
    """A commit's latencies: {case key: samples, or an Entry as it is}."""
    entries = {k: v if isinstance(v, Entry) else Entry("ok", float(np.median(v)), v) for k, v in times.items()}
    return CommitResults("h200", commit, 0, [], {BENCH_TIME: entries})


def row(key, kept, **fields):
    """A cases sidecar row of ``key`` as a record writes it (q_len and kv_dtype as fields of their own)."""
    names = ("impl", "batch", "seqlen", "dtype", "heads", "q_len", "kv_dtype", "workload")
    return {**dict(zip(names, key)), "status": "ok", "samples": {"windows": kept}, **fields}


def test_each_case_reads_its_own_windows_from_the_sidecars_rows_and_a_case_without_them_reads_raw():
    """The rows are keyed as the store keys a case: a row from before q_len and kv_dtype is one query token on a
    cache in the query's dtype; an fp8 cache's row (2 query tokens) is another case."""
    base_clocks, head_clocks = [1980] * 6 + [1800] * 4, [1980] * 2 + [1800] * 8
    legacy = {k: v for k, v in row(FP16, windows(base_clocks)).items() if k not in ("q_len", "kv_dtype")}
    base = recorded("b" * 40, {FP16: timed(base_clocks), FP8: timed([1800] * 4), NO_ROW: timed([1980] * 2),
                               HEAD_FAILED: timed([1980]), BASE_ONLY: timed([1980]),
                               NO_SAMPLES: Entry("ok", 1e-4), NOT_ASKED: timed([1980])})
    head = recorded("h" * 40, {FP16: timed(head_clocks), FP8: timed([1800] * 4, change=0.02),
                               NO_ROW: timed([1980] * 2, change=0.05), HEAD_FAILED: Entry("failed"),
                               NO_SAMPLES: Entry("ok", 1e-4), NOT_ASKED: timed([1980])})
    base_cases = {"results": [legacy, row(FP8, windows([1800] * 4)), row(NO_ROW, None, samples=None), "foreign"]}
    head_cases = {"results": [row(FP16, windows(head_clocks)), row(FP8, windows([1800] * 4)),
                              row(NO_ROW, windows([1980] * 2))]}
    keys = [FP16, list(FP8), NO_ROW, HEAD_FAILED, BASE_ONLY, NO_SAMPLES]  # a verdict's JSON holds lists
    got = clock_compare.case_changes(base, base_cases, head, head_cases, keys)
    assert list(got) == [FP16, FP8, NO_ROW]  # a case that failed, lacks a side or its samples has no change
    assert got[FP16] == pytest.approx({"raw": 1980 / 1800 - 1, "normalized": 0.0, "binned": 0.0}, abs=1e-12)
    assert got[FP8] == pytest.approx({"raw": 0.02, "normalized": 0.02, "binned": 0.02})
    assert got[NO_ROW] == pytest.approx({"raw": 0.05, "normalized": None, "binned": None})


def test_sidecars_that_are_missing_or_not_objects_read_raw_only():
    base = recorded("b" * 40, {FP16: timed([1980] * 2)})
    head = recorded("h" * 40, {FP16: timed([1980] * 2, change=0.01)})
    readable = {"results": [row(FP16, windows([1980] * 2))]}
    for base_cases, head_cases in ((None, readable), (readable, ["not", "an", "object"]), (readable, {})):
        got = clock_compare.case_changes(base, base_cases, head, head_cases, [FP16])
        assert got == {FP16: pytest.approx({"raw": 0.01, "normalized": None, "binned": None})}


DEMO_BASE, DEMO_HEAD = "0843a879", "91da13fe"  # the demo's H200 pair, recorded in that order


def test_a_stores_two_commits_read_every_measured_case_with_its_windows():
    """The demo pair: every case both measured (34 of 48) gets all three readings, binned none only where the two
    records share no clock; the seesaw's 16-head fp16 cases moved with the clock."""
    store = Store(ROOT / "demo" / "results")
    cases = [SimpleNamespace(case=key) for key in store.load("h200", DEMO_BASE).entries(BENCH_TIME)]
    got = clock_compare.store_changes(store, "h200", DEMO_BASE, DEMO_HEAD, cases)
    assert len(cases) == 48 and len(got) == 34 and all(v["normalized"] is not None for v in got.values())
    assert {k for k, v in got.items() if v["binned"] is None} == {
        (impl, 128, 4096, "float16", 16, 1, "float16", "dense") for impl in ("torch", "triton")}
    seesaw = ("tilelang-seesaw", 64, 4096, "float16", 16, 1, "float16", "dense")
    assert got[seesaw] == pytest.approx({"raw": 0.0716050, "normalized": 0.0838974, "binned": 0.0607542}, abs=1e-7)
    assert clock_compare.store_changes(store, "h200", DEMO_BASE, "0" * 40, cases) == {}  # a commit not recorded

"""Reading a change with each window's SM clock (mlagate.decide.clock_compare), on synthetic windows, and the lab
study over the demo's recorded H200 pair."""

import subprocess
import sys

import numpy as np
import pytest

from mlagate.decide import clock_compare


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


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

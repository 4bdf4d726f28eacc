"""The timer on a GPU: samples hold kernel time only, never the host's launch time."""

import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mlagate import config  # noqa: E402
from mlagate.config import Budget  # noqa: E402
from mlagate.measure.timer import last_level_cache_bytes, time_gpu  # noqa: E402

pytestmark = pytest.mark.gpu
HOST_MS = 0.3  # Python work before each launch, longer than the tiny kernel it launches
TIMING = config.load().timing
SHORT = Budget(warmup_ms=5, windows=2)


def slow_host_call():
    x = torch.zeros(1, device="cuda")

    def call():
        time.sleep(HOST_MS / 1e3)
        x.add_(1)

    return call


def test_time_gpu_keeps_host_time_out_of_the_samples():
    s = time_gpu(slow_host_call(), TIMING, SHORT)
    assert len(s.times_ms) >= TIMING.min_samples
    assert max(s.times_ms) < HOST_MS / 2, sorted(s.times_ms)[-5:]
    assert s.dropped >= 1  # the first lead was too short for this host: the call was dropped, not timed


def test_time_gpu_flushes_twice_the_last_level_cache():
    s = time_gpu(lambda: torch.ones(1 << 20, device="cuda"), TIMING, SHORT)
    assert s.flush_bytes >= 2 * last_level_cache_bytes(torch.device("cuda", 0))
    assert all(t > 0 for t in s.times_ms)


def test_windows_are_timed_evenly_and_their_clocks_read():
    """A short kernel: far more calls per window than samples_per_window, so every
    stride-th call is timed; each window says what the SM clock read while it ran."""
    s = time_gpu(lambda: torch.ones(1 << 16, device="cuda"), TIMING, "confirm")
    assert s.budget == "confirm"
    assert len(s.windows) == TIMING.budget("confirm").windows
    assert all(0 < w["samples"] <= TIMING.samples_per_window for w in s.windows)
    assert len(s.times_ms) + len(s.dropped_ms) == sum(w["samples"] for w in s.windows)
    assert len(s.times_ms) == sum(w["samples"] for w in s.windows if w["kept"])
    if torch.version.cuda:  # NVML is on every NVIDIA host this runs on
        assert all(w["sm_mhz"] and w["sm_mhz"] > 100 for w in s.windows), s.windows


# A lower bound: torch.cuda._sleep spins for a number of GPU clock cycles, which take at least
# cycles / clock seconds. No GPU's clock reaches MAX_CLOCK_HZ, so a timer reading less than
# SLEEP_CYCLES / MAX_CLOCK_HZ is wrong (zeros, the wrong event pair, or the wrong unit).
SLEEP_CYCLES = 2_000_000  # about 1 ms on an H200 at 1.98 GHz
MAX_CLOCK_HZ = 3.5e9
FLOOR_MS = SLEEP_CYCLES / MAX_CLOCK_HZ * 1e3  # 0.57 ms


def sleeper(cycles):
    return lambda: torch.cuda._sleep(cycles)


def test_time_gpu_times_a_kernel_of_known_length():
    short, long = time_gpu(sleeper(SLEEP_CYCLES), TIMING, SHORT), time_gpu(sleeper(4 * SLEEP_CYCLES), TIMING, SHORT)
    assert min(short.times_ms) > FLOOR_MS, sorted(short.times_ms)[:5]
    assert max(short.times_ms) < 100 * FLOOR_MS, sorted(short.times_ms)[-5:]  # milliseconds, not microseconds
    ratio = np.median(long.times_ms) / np.median(short.times_ms)
    assert 3 < ratio < 5, ratio  # four times the cycles, about four times the time



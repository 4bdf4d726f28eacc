"""The timer on a GPU: samples hold kernel time only, never the host's launch time."""

import time

import pytest

torch = pytest.importorskip("torch")

from mlagate import config  # noqa: E402
from mlagate.config import Budget  # noqa: E402
from mlagate.measure import clocks, timer  # noqa: E402
from mlagate.measure.timer import last_level_cache_bytes, time_gpu  # noqa: E402

gpu = pytest.mark.gpu
HOST_MS = 0.3  # Python work before each launch, longer than the tiny kernel it launches
TIMING = config.load().timing
SHORT = Budget(warmup_ms=5, windows=2)


def slow_host_call():
    x = torch.zeros(1, device="cuda")

    def call():
        time.sleep(HOST_MS / 1e3)
        x.add_(1)

    return call


@gpu
def test_time_gpu_keeps_host_time_out_of_the_samples():
    s = time_gpu(slow_host_call(), TIMING, SHORT)
    assert len(s.times_ms) >= TIMING.min_samples
    assert max(s.times_ms) < HOST_MS / 2, sorted(s.times_ms)[-5:]
    assert s.dropped >= 1  # the first lead was too short for this host: the call was dropped, not timed


@gpu
def test_time_gpu_flushes_twice_the_last_level_cache():
    s = time_gpu(lambda: torch.ones(1 << 20, device="cuda"), TIMING, SHORT)
    assert s.flush_bytes >= 2 * last_level_cache_bytes(torch.device("cuda", 0))
    assert all(t > 0 for t in s.times_ms)


@gpu
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


@gpu
def test_time_gpu_times_a_kernel_of_known_length():
    short, long = time_gpu(sleeper(SLEEP_CYCLES), TIMING, SHORT), time_gpu(sleeper(4 * SLEEP_CYCLES), TIMING, SHORT)
    assert min(short.times_ms) > FLOOR_MS, sorted(short.times_ms)[:5]
    assert max(short.times_ms) < 100 * FLOOR_MS, sorted(short.times_ms)[-5:]  # milliseconds, not microseconds
    # Four times the cycles, about four times the time; the fastest call of each. Under pytest -n other
    # tests' kernels share the GPU in time slices, which only add time (on two H200s with -n 8 the long
    # sleep's fastest call read 6.6x the short one's): a timer that misses the kernel reads about 1x.
    ratio = min(long.times_ms) / min(short.times_ms)
    assert 3 < ratio < 16, ratio




# -- the window arithmetic, on any machine -------------------------------------------

def test_a_window_times_every_stride_th_call_up_to_samples_per_window():
    assert timer.window_plan(0.05, TIMING, 10) == (1000, 10)  # 50 ms of 50 µs calls: every 10th timed
    assert timer.window_plan(1.0, TIMING, 10) == (50, 1)


def test_a_long_kernel_stretches_its_windows_to_hold_min_samples():
    calls, stride = timer.window_plan(25.0, TIMING, 10)  # 25 ms a call: 2 fit in a 50 ms window
    assert stride == 1 and calls * 10 >= TIMING.min_samples
    calls, stride = timer.window_plan(25.0, TIMING, 3)
    assert stride == 1 and calls * 3 >= TIMING.min_samples


def _window(n, mhz, reasons=()):
    return [1.0 + i / 1e3 for i in range(n)], clocks.WindowClock(mhz, 690.0, tuple(reasons), 5)


def test_throttled_windows_are_dropped_and_kept_aside():
    windows = [_window(30, 1450), _window(30, 1460), _window(30, 1200), _window(30, 1455, ["hw_thermal"])]
    s = timer._samples(windows, TIMING, "record", 0, 0, "test", 0)
    assert [w["kept"] for w in s.windows] == [True, True, False, False]
    assert len(s.times_ms) == 60 and len(s.dropped_ms) == 60
    assert s.windows[3]["throttle"] == ["hw_thermal"] and s.windows[2]["sm_mhz"] == 1200


def test_dropping_never_leaves_fewer_than_min_samples():
    windows = [_window(15, 1450), _window(15, 1100)]  # dropping the slow window would leave 15 < 20
    s = timer._samples(windows, TIMING, "record", 0, 0, "test", 0)
    assert all(w["kept"] for w in s.windows) and len(s.times_ms) == 30 and s.dropped_ms == ()


def test_too_few_timed_calls_is_an_error_saying_why():
    with pytest.raises(RuntimeError, match="host never got ahead"):
        timer._samples([_window(5, 1450)], TIMING, "record", 0, 0, "test", 0)


@gpu
def test_samples_name_the_gpu_that_took_them():
    s = time_gpu(lambda: torch.ones(1 << 16, device="cuda"), TIMING, SHORT)
    assert s.uuid == str(torch.cuda.get_device_properties(0).uuid) and len(s.uuid) >= 32


# -- time_gpu's loop on a stand-in device (any machine) -----------------------------------------

class FakeCuda:
    """Device events that say what the test wants: a kernel time, and which timed calls the host
    was late for (the start event already reached when queried)."""

    def __init__(self, kernel_ms, late_every=0):
        self.kernel_ms, self.late_every, self.timed, self.calls = kernel_ms, late_every, 0, 0

    def kernel(self):  # the host's launch takes real time, so the clock is read while a window is queued
        self.calls += 1
        time.sleep(1e-4)

    def install(self, monkeypatch):
        fake = self

        class Event:
            def __init__(self, enable_timing=False):
                self.timing = enable_timing

            def record(self):
                self.at = fake.calls

            def query(self):  # a window's end: done; a start event: reached (late) every late_every-th call
                if not self.timing:
                    return True
                fake.timed += 1
                return bool(fake.late_every) and fake.timed % fake.late_every == 0

            def synchronize(self):
                pass

            def elapsed_time(self, end):
                return (end.at - self.at) * fake.kernel_ms

        cuda = torch.cuda
        for name, value in (("is_available", lambda: True), ("current_device", lambda: 0), ("Event", Event),
                            ("synchronize", lambda *a: None), ("_sleep", lambda cycles: None),
                            ("get_device_properties", lambda d: type("P", (), {"name": "stand-in", "uuid": "u-0"}))):
            monkeypatch.setattr(cuda, name, value, raising=False)
        monkeypatch.setattr(timer, "_Flusher", lambda device, enabled: type("F", (), {"nbytes": 0, "__call__":
                                                                                     lambda self: None})())
        monkeypatch.setattr(timer, "probe", lambda device: type("P", (), {"read": lambda self: clocks.Reading(
            1400.0, 690.0, frozenset({"sw_power_cap"}))})())


def test_each_window_times_its_quota_and_reads_the_clock_while_it_runs(monkeypatch):
    fake = FakeCuda(kernel_ms=1.0)
    fake.install(monkeypatch)
    s = timer.time_gpu(fake.kernel, TIMING, "record")
    assert [w["samples"] for w in s.windows] == [50] * 10  # 50 ms of 1 ms calls, every one timed
    assert all(w["sm_mhz"] == 1400.0 and w["kept"] for w in s.windows) and s.uuid == "u-0"
    assert len(s.times_ms) == 500 and s.dropped == 0


def test_a_call_the_host_was_late_for_is_made_up_in_its_window(monkeypatch):
    """A long kernel: 2 timed calls per window hold exactly min_samples; every third timed call
    lost to the host must not leave the case short (it would fail)."""
    fake = FakeCuda(kernel_ms=25.0, late_every=3)
    fake.install(monkeypatch)
    s = timer.time_gpu(fake.kernel, TIMING, "record")
    assert [w["samples"] for w in s.windows] == [2] * 10
    assert len(s.times_ms) == TIMING.min_samples and s.dropped > 0


def test_each_window_is_planned_from_an_estimate_of_its_own_after_one_warm_up(monkeypatch):
    """A case's windows are calls of their own (docs/measurements.md, 2026-12-06, fifth session): a kernel that
    slows after the first window gets the later windows' plans from its new time, and only the first window
    follows a warm-up."""
    FakeCuda(kernel_ms=1.0).install(monkeypatch)
    estimates, plans, warm_ups = iter([1.0] + [5.0] * 9), [], []
    monkeypatch.setattr(timer, "_warm", set())
    monkeypatch.setattr(timer, "_estimate", lambda call, flush: next(estimates))
    monkeypatch.setattr(timer, "_warm_up", lambda call, flush, calls: warm_ups.append(calls) or calls)
    steady = clocks.summarize([clocks.Reading(1400.0, 690.0, frozenset())])
    monkeypatch.setattr(timer, "_window", lambda call, flush, clock, calls, stride: (
        plans.append((calls, stride)) or ([1.0] * calls, steady, 0)))
    s = timer.time_gpu(lambda: None, TIMING, "record")
    assert plans == [timer.window_plan(1.0, TIMING, 10)] + [timer.window_plan(5.0, TIMING, 10)] * 9
    assert warm_ups == [int(TIMING.warmup_ms / 1.0)]  # the process's first case: timing.warmup_ms, once
    assert s.warmup_calls == warm_ups[0] + 6 * 10 and [w["samples"] for w in s.windows] == [50] + [10] * 9

"""mlagate.measure.clocks on CPU: the window rules, and the probes against fake vendor libraries
that expose exactly the calls and keys found in the real ones (docs/clocks.md)."""

import enum
import types
from types import SimpleNamespace

import pytest

from mlagate.measure import clocks
from mlagate.measure.clocks import Reading, WindowClock, dropped_windows, locked_from_clocks, summarize


def window(mhz, *reasons, power=650.0):
    return WindowClock(mhz, power, tuple(sorted(reasons)), 10)


# ---------------------------------------------------------------- summarize

def test_summarize_takes_medians_and_the_sorted_union_of_reasons():
    readings = [Reading(1400.0, 600.0, frozenset({"sw_power_cap"})),
                Reading(1480.0, 650.0, frozenset()),
                Reading(1350.0, None, frozenset({"gpu_idle", "sw_power_cap"})),
                None]  # a failed poll
    assert summarize(readings) == WindowClock(1400.0, 625.0, ("gpu_idle", "sw_power_cap"), 3)


def test_summarize_of_no_readings_has_no_values():
    assert summarize([]) == WindowClock(None, None, (), 0)
    assert summarize([None, None]) == WindowClock(None, None, (), 0)


def test_summarize_without_clock_readings_keeps_the_power():
    assert summarize([Reading(None, 700.0, frozenset()), Reading(None, 690.0, frozenset())]) \
        == WindowClock(None, 695.0, (), 2)


# ---------------------------------------------------------------- dropped_windows

def test_power_capped_windows_are_kept():
    # An H200 at its 700 W cap: clocks move between ~1350 and ~1485 MHz, sw_power_cap throughout.
    windows = [window(mhz, "sw_power_cap") for mhz in (1350, 1485, 1410, 1455, 1380, 1470)]
    assert dropped_windows(windows, 0.10) == [False] * 6


def test_a_window_more_than_max_clock_drop_below_the_median_is_dropped():
    windows = [window(1450), window(1450), window(1450 * 0.88), window(1450 * 0.92), window(1450)]
    assert dropped_windows(windows, 0.10) == [False, False, True, False, False]
    assert dropped_windows(windows, 0.15) == [False] * 5


@pytest.mark.parametrize("reason", ["hw_slowdown", "sw_thermal", "hw_thermal", "power_brake"])
def test_a_thermal_slowdown_or_power_brake_window_is_dropped_at_full_clock(reason):
    windows = [window(1450, "sw_power_cap"), window(1450, "sw_power_cap", reason), window(1450)]
    assert dropped_windows(windows, 0.10) == [False, True, False]


@pytest.mark.parametrize("reason", ["sw_power_cap", "gpu_idle", "applications_clocks", "sync_boost"])
def test_other_reasons_never_drop_a_window(reason):
    assert dropped_windows([window(1450), window(1450, reason), window(1450)], 0.10) == [False] * 3


def test_when_every_window_would_be_dropped_none_is():
    windows = [window(1450, "hw_thermal"), window(1300, "sw_thermal"), window(1450, "power_brake")]
    assert dropped_windows(windows, 0.10) == [False, False, False]
    assert dropped_windows([], 0.10) == []


def test_windows_without_a_clock_are_not_dropped_for_the_clock_rule():
    windows = [window(None), window(1450), window(1450), window(1200), window(None, "hw_slowdown")]
    # The median is taken over the windows that read a clock (1450): 1200 is 17% below it.
    assert dropped_windows(windows, 0.10) == [False, False, False, True, True]
    assert dropped_windows([window(None), window(None)], 0.10) == [False, False]


# ---------------------------------------------------------------- locked_from_clocks

def test_locked_from_clocks():
    assert locked_from_clocks([1755, 1755, 1760, None]) is True
    assert locked_from_clocks([1350, 1485]) is False
    assert locked_from_clocks([1500, 1500 * 1.02]) is False
    assert locked_from_clocks([None]) is None
    assert locked_from_clocks([]) is None


# ---------------------------------------------------------------- fake NVML

class NVMLError(Exception):
    pass


def fake_pynvml(gpus, event_reasons=True):
    """A pynvml module exposing the nvidia-ml-py 13.615.71 calls clocks.py uses. ``gpus``: NVML's
    own order; each {"uuid", "pci", "sm", "mw", "reasons", "max", "limit_mw"}."""
    nvml = types.ModuleType("pynvml")
    nvml.NVML_CLOCK_GRAPHICS, nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM = 0, 1, 2
    nvml.calls = []

    def by(key, value):
        for g in gpus:
            if g[key] == value:
                return g
        raise NVMLError(f"NVML_ERROR_NOT_FOUND: {value}")

    def clock(h, kind, field):
        return h[field] if kind == nvml.NVML_CLOCK_SM else 9999  # the wrong clock reads as nonsense

    nvml.nvmlInit = lambda: nvml.calls.append("init")
    nvml.nvmlShutdown = lambda: nvml.calls.append("shutdown")
    nvml.nvmlDeviceGetHandleByUUID = lambda uuid: by("uuid", uuid)
    nvml.nvmlDeviceGetHandleByPciBusId = lambda bus: by("pci", bus)
    nvml.nvmlDeviceGetUUID = lambda h: h["uuid"]
    nvml.nvmlDeviceGetClockInfo = lambda h, kind: clock(h, kind, "sm")
    nvml.nvmlDeviceGetMaxClockInfo = lambda h, kind: clock(h, kind, "max")
    nvml.nvmlDeviceGetPowerUsage = lambda h: h["mw"]
    nvml.nvmlDeviceGetEnforcedPowerLimit = lambda h: h["limit_mw"]
    nvml.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: h["reasons"]
    if event_reasons:
        nvml.nvmlDeviceGetCurrentClocksEventReasons = lambda h: h["reasons"]
    return nvml


H200_A = {"uuid": "GPU-11111111-2222-3333-4444-555555555555", "pci": "0000:18:00.0", "sm": 1410,
          "mw": 688_000, "reasons": 0x4, "max": 1980, "limit_mw": 700_000}
H200_B = {"uuid": "GPU-58a5d1c6-0f3a-4d2e-9b1c-7e6f5a4b3c2d", "pci": "0000:dc:00.0", "sm": 1485,
          "mw": 702_500, "reasons": 0x4 | 0x40, "max": 1980, "limit_mw": 700_000}


def torch_props(uuid="", domain=0, bus=0xdc, device=0):
    # torch's _CUuuid prints as the bare 8-4-4-4-12 hex; pci_* are ints (torch.numa.binding reads them so).
    return SimpleNamespace(uuid=uuid, pci_domain_id=domain, pci_bus_id=bus, pci_device_id=device)


@pytest.fixture
def use(monkeypatch):
    """use(library, rocm, props): open_probe() then sees this device and only this vendor library."""
    def install(lib, rocm, props):
        def fake_import(name):
            if lib is None or name != lib.__name__:
                raise ImportError(f"No module named {name!r}")
            return lib
        monkeypatch.setattr(clocks, "_import", fake_import)
        monkeypatch.setattr(clocks, "_device", lambda index: (rocm, props))
    return install


def test_nvml_probe_reads_the_device_torch_uses_by_uuid(use):
    nvml = fake_pynvml([H200_A, H200_B])  # torch's device 0 is NVML's GPU 1 (CUDA_VISIBLE_DEVICES=1)
    use(nvml, False, torch_props(uuid="58a5d1c6-0f3a-4d2e-9b1c-7e6f5a4b3c2d", bus=0x99))
    probe = clocks.open_probe(0)
    assert probe.unavailable is None
    assert probe.read() == Reading(1485.0, 702.5, frozenset({"sw_power_cap", "hw_thermal"}))


def test_nvml_probe_falls_back_to_the_pci_bus_id(use):
    nvml = fake_pynvml([H200_A, H200_B])
    use(nvml, False, torch_props(uuid="00000000-0000-0000-0000-000000000000", bus=0x18))
    assert clocks.open_probe(0).read().sm_mhz == 1410.0


def test_nvml_probe_without_a_matching_gpu_says_so(use):
    nvml = fake_pynvml([H200_A])
    use(nvml, False, torch_props(uuid="00000000-0000-0000-0000-000000000000", bus=0x77))
    probe = clocks.open_probe(0)
    assert "no GPU has torch's UUID" in probe.unavailable and probe.read() is None
    assert nvml.calls == ["init", "shutdown"]


@pytest.mark.parametrize("event_reasons", [True, False])
def test_nvml_reasons_are_decoded_bit_by_bit_under_either_name(use, event_reasons):
    gpu = dict(H200_B, reasons=0xFF)
    nvml = fake_pynvml([gpu], event_reasons=event_reasons)
    if event_reasons:  # the new name wins when both exist
        nvml.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: 0
    use(nvml, False, torch_props(uuid=gpu["uuid"]))
    probe = clocks.open_probe(0)
    assert probe.read().throttle == {"gpu_idle", "applications_clocks", "sw_power_cap", "hw_slowdown",
                                     "sync_boost", "sw_thermal", "hw_thermal", "power_brake"}
    gpu["reasons"] = 0x1 | 0x10
    assert probe.read().throttle == {"gpu_idle", "sync_boost"}
    gpu["reasons"] = 0x80 | 0x100  # 0x100, display clock setting, is outside the vocabulary
    assert probe.read().throttle == {"power_brake"}


def test_an_nvml_read_that_raises_is_none(use):
    nvml = fake_pynvml([H200_B])
    use(nvml, False, torch_props(uuid=H200_B["uuid"]))
    probe = clocks.open_probe(0)

    def lost(h):
        raise NVMLError("NVML_ERROR_GPU_IS_LOST")
    nvml.nvmlDeviceGetPowerUsage = lost
    assert probe.read() is None
    assert probe.facts()["max_sm_mhz"] == 1980.0  # facts go on


def test_nvml_facts(use):
    gpu = dict(H200_B)
    nvml = fake_pynvml([gpu])
    use(nvml, False, torch_props(uuid=gpu["uuid"]))
    probe = clocks.open_probe(0)
    assert probe.facts() == {"vendor": "nvidia", "api": "nvml", "uuid": gpu["uuid"], "max_sm_mhz": 1980.0,
                             "power_limit_w": 700.0, "locked": None}
    gpu["reasons"] = 0x2  # clocks held by an applications-clocks setting
    assert probe.facts()["locked"] is True
    probe.close()
    assert nvml.calls == ["init", "shutdown"]
    assert probe.read() is None and probe.facts()["unavailable"] == "closed"


def test_nvml_init_failure_is_reported(use):
    nvml = fake_pynvml([H200_B])

    def no_driver():
        raise NVMLError("Driver Not Loaded")
    nvml.nvmlInit = no_driver
    use(nvml, False, torch_props(uuid=H200_B["uuid"]))
    probe = clocks.open_probe(0)
    assert probe.unavailable == "NVML: Driver Not Loaded" and probe.read() is None
    assert probe.facts() == {"vendor": "nvidia", "api": "nvml", "locked": None,
                             "unavailable": "NVML: Driver Not Loaded"}


# ---------------------------------------------------------------- fake amdsmi

class AmdSmiException(Exception):
    pass


class AmdSmiLibraryException(AmdSmiException):
    pass


def fake_amdsmi(gpus):
    """An amdsmi module exposing exactly the calls and dict keys clocks.py uses, as they are in
    amdsmi_interface.py of the amdsmi 7.0.2 package (PyPI sdist, amdsmi/amdsmi_interface.py) and of
    ROCm/rocm-systems projects/amdsmi/py-interface/amdsmi_interface.py at commit
    019df164d850f1333bf093d3a6d80f46b7281a36 (the keys are the same in both). Unsupported values
    read "N/A", and the real functions refuse a handle or clock type of the wrong type.
    ``gpus``: amdsmi's own order; each {"bdf", "clk", "max", "watts", "limit", "violations", "lock"}."""
    smi = types.ModuleType("amdsmi")
    smi.AmdSmiException, smi.AmdSmiLibraryException = AmdSmiException, AmdSmiLibraryException
    smi.AmdSmiClkType = enum.IntEnum("AmdSmiClkType", {"SYS": 0, "GFX": 0, "DF": 1, "DCEF": 2, "SOC": 3,
                                                       "MEM": 4, "PCIE": 5})
    smi.calls = []

    class Handle:  # amdsmi_wrapper.amdsmi_processor_handle
        def __init__(self, gpu):
            self.gpu = gpu

    def gpu(handle, clk_type=None):
        if not isinstance(handle, Handle):
            raise AmdSmiException("AmdSmiParameterException: processor_handle")
        if clk_type is not None and not isinstance(clk_type, smi.AmdSmiClkType):
            raise AmdSmiException("AmdSmiParameterException: clock_type")
        smi.calls.append("gpu")
        return handle.gpu

    def violations(handle):
        v = gpu(handle)["violations"]
        if v is None:
            raise AmdSmiLibraryException("AMDSMI_STATUS_NOT_SUPPORTED")
        flags = {k: "N/A" for k in ("active_prochot_thrm", "active_ppt_pwr", "active_socket_thrm",
                                    "active_vr_thrm", "active_hbm_thrm", "active_gfx_clk_below_host_limit")}
        return {"reference_timestamp": 1, "violation_timestamp": "N/A", "acc_counter": 100, "acc_prochot_thrm": 0,
                "acc_ppt_pwr": 50, "acc_socket_thrm": 0, "acc_vr_thrm": 0, "acc_hbm_thrm": 0,
                "per_prochot_thrm": 0, "per_ppt_pwr": 50, "per_socket_thrm": 0, "per_vr_thrm": 0,
                "per_hbm_thrm": 0, **flags, **v}

    smi.amdsmi_init = lambda flag=None: smi.calls.append("init")
    smi.amdsmi_shut_down = lambda: smi.calls.append("shut_down")
    smi.amdsmi_get_processor_handles = lambda: [Handle(g) for g in gpus]
    smi.amdsmi_get_gpu_device_bdf = lambda h: gpu(h)["bdf"]
    smi.amdsmi_get_clock_info = lambda h, clk_type: {
        "clk": gpu(h, clk_type)["clk"], "min_clk": 500, "max_clk": gpu(h)["max"], "clk_locked": False,
        "clk_deep_sleep": "N/A"}
    smi.amdsmi_get_power_info = lambda h: {
        "socket_power": gpu(h)["watts"], "current_socket_power": gpu(h)["watts"], "average_socket_power": "N/A",
        "gfx_voltage": "N/A", "soc_voltage": "N/A", "mem_voltage": "N/A",
        "power_limit": gpu(h)["limit"] * 10**6}  # hwmon's power1_cap, uW, as ROCm 6.3's C code fills it
    smi.amdsmi_get_power_cap_info = lambda h, sensor_ind=0: {  # uW: amd-smi's CLI converts it from MICRO
        "power_cap": gpu(h)["limit"] * 10**6, "default_power_cap": 750 * 10**6, "dpm_cap": 0,
        "min_power_cap": 0, "max_power_cap": 750 * 10**6}
    smi.amdsmi_get_violation_status = violations
    smi.amdsmi_get_gpu_metrics_info = lambda h: {  # a few of its keys: what clocks.py reads, and decoys
        "current_gfxclk": gpu(h)["clk"], "current_gfxclks": [gpu(h)["clk"]] * 8, "throttle_status": False,
        "indep_throttle_status": False, "current_socket_power": gpu(h)["watts"],
        "gfxclk_lock_status": gpu(h)["lock"]}
    return smi


MI300X_A = {"bdf": "0000:0c:00.0", "clk": 1300, "max": 2100, "watts": 540, "limit": 750,
            "violations": {}, "lock": 0}
MI300X_B = {"bdf": "0000:22:00.0", "clk": 2100, "max": 2100, "watts": 734, "limit": 750,
            "violations": {"active_ppt_pwr": True, "active_socket_thrm": False}, "lock": 0}


def test_amd_probe_reads_the_device_torch_uses_by_bdf(use):
    smi = fake_amdsmi([MI300X_A, MI300X_B])  # HIP_VISIBLE_DEVICES=1: torch's 0 is amdsmi's 1
    use(smi, True, torch_props(domain=0, bus=0x22, device=0))
    smi.amdsmi_get_violation_status = lambda h: pytest.fail("sleeps 100 ms in amdsmi: never per poll")
    probe = clocks.open_probe(0)
    assert probe.unavailable is None
    assert probe.read() == Reading(2100.0, 734.0, frozenset())


def test_amd_na_values_read_as_none_and_a_failed_read_is_none(use):
    gpu = dict(MI300X_A, clk="N/A", watts="N/A")
    smi = fake_amdsmi([gpu])
    use(smi, True, torch_props(bus=0x0c))
    probe = clocks.open_probe(0)
    assert probe.read() == Reading(None, None, frozenset())

    def busy(h, clk_type):
        raise AmdSmiLibraryException("AMDSMI_STATUS_BUSY")
    smi.amdsmi_get_clock_info = busy
    assert probe.read() is None


@pytest.mark.parametrize("lock, locked", [(0, False), (0xFF, True), (0x1, True), ("N/A", None)])
def test_amd_facts(use, lock, locked):
    smi = fake_amdsmi([MI300X_A, dict(MI300X_B, lock=lock)])
    use(smi, True, torch_props(bus=0x22))
    probe = clocks.open_probe(0)
    assert probe.facts() == {"vendor": "amd", "api": "amdsmi", "bdf": "0000:22:00.0", "max_sm_mhz": 2100.0,
                             "power_limit_w": 750.0, "locked": locked}
    probe.close()
    assert smi.calls[0] == "init" and smi.calls[-1] == "shut_down"
    assert probe.read() is None


def test_amd_probe_without_a_matching_gpu_says_so(use):
    smi = fake_amdsmi([MI300X_A])
    use(smi, True, torch_props(bus=0x99))
    probe = clocks.open_probe(0)
    assert probe.unavailable == "amdsmi: no GPU has torch's PCI address 0000:99:00"
    assert probe.read() is None and smi.calls[-1] == "shut_down"


# ---------------------------------------------------------------- no library, no torch

@pytest.mark.parametrize("rocm, why, vendor", [(False, "pynvml is not installed", "nvidia"),
                                               (True, "amdsmi is not installed", "amd")])
def test_open_probe_without_the_vendor_library(use, rocm, why, vendor):
    use(None, rocm, torch_props(uuid=H200_B["uuid"]))
    probe = clocks.open_probe()
    assert probe.unavailable == why
    assert probe.read() is None
    assert probe.facts() == {"vendor": vendor, "api": "amdsmi" if rocm else "nvml", "locked": None,
                             "unavailable": why}
    probe.close()


def test_open_probe_when_torch_cannot_describe_the_device(monkeypatch):
    def no_gpu(index):
        raise RuntimeError("Torch not compiled with CUDA enabled")
    monkeypatch.setattr(clocks, "_device", no_gpu)
    probe = clocks.open_probe(3)
    assert probe.unavailable == "torch cannot describe GPU 3: Torch not compiled with CUDA enabled"
    assert probe.read() is None and probe.facts()["locked"] is None


def test_open_probe_never_raises_here():
    """This machine as it is: without a GPU or vendor library the probe says why and reads
    nothing; on a GPU host (NVML on the H200) it reads the clock."""
    probe = clocks.open_probe()
    if probe.unavailable:
        assert probe.read() is None and "unavailable" in probe.facts()
    else:
        assert probe.read().sm_mhz > 0 and probe.facts()["max_sm_mhz"] > 0
    probe.close()


def test_a_vendor_library_broken_unforeseeably_still_gives_a_probe(use):
    smi = fake_amdsmi([MI300X_A])
    del smi.amdsmi_shut_down  # _AmdProbe needs it
    use(smi, True, torch_props(bus=0x0c))
    probe = clocks.open_probe(0)
    assert probe.unavailable.startswith("amdsmi: ") and probe.read() is None

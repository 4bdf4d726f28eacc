"""SM clock, power and slowdown reasons over each sampling window (NVML on NVIDIA, amdsmi on ROCm).

The timer polls ``ClockProbe.read()`` every few ms while the GPU runs a sampling window,
``summarize``s each window's readings, and after a case asks ``dropped_windows`` which windows
to leave out (nvbench's approach, NVIDIA/nvbench#206). A window is dropped when

- it saw a thermal, hardware-slowdown or power-brake reason ("hw_slowdown", "sw_thermal",
  "hw_thermal", "power_brake"), or
- its SM clock is more than ``max_clock_drop`` (e.g. 0.10) below the median SM clock of the
  case's windows; a window without a clock reading is never dropped by this rule.

"sw_power_cap" alone never drops a window: it is the steady state of a power-capped GPU under load
(an H200 at its 700 W cap moves between ~1350 and ~1485 MHz). Nor do "gpu_idle",
"applications_clocks" or "sync_boost". If the rules would drop every window, none is dropped (all
False) and the caller reports it (an empty case is NVIDIA/nvbench#231). docs/clocks.md says what is
read on which vendor, and where the AMD calls were checked.
"""

import importlib
import statistics
from dataclasses import dataclass

DROP_REASONS = frozenset({"hw_slowdown", "sw_thermal", "hw_thermal", "power_brake"})

# nvmlClocksEventReason* bits (= the deprecated nvmlClocksThrottleReason*), nvidia-ml-py 13.615.71.
NVML_REASON_BITS = {0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap",
                    0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal",
                    0x40: "hw_thermal", 0x80: "power_brake"}



@dataclass(frozen=True)
class Reading:
    sm_mhz: float | None
    power_w: float | None
    throttle: frozenset[str]


@dataclass(frozen=True)
class WindowClock:
    sm_mhz: float | None
    power_w: float | None
    throttle: tuple[str, ...]
    readings: int


def _median(values):
    values = [v for v in values if v is not None]
    return float(statistics.median(values)) if values else None


def summarize(readings) -> WindowClock:
    """Summary of one window's readings (None entries, failed reads, are skipped)."""
    readings = [r for r in readings if r is not None]
    reasons = set().union(*(r.throttle for r in readings)) if readings else set()
    return WindowClock(_median(r.sm_mhz for r in readings), _median(r.power_w for r in readings),
                       tuple(sorted(reasons)), len(readings))


def dropped_windows(windows: list[WindowClock], max_clock_drop: float) -> list[bool]:
    """True for each window to drop, by the rules in the module docstring (perf.yml's
    timing.max_clock_drop is checked to lie in (0, 1] where it is read)."""
    median = _median(w.sm_mhz for w in windows)
    drop = [bool(DROP_REASONS.intersection(w.throttle))
            or (median is not None and w.sm_mhz is not None and w.sm_mhz < (1 - max_clock_drop) * median)
            for w in windows]
    return [False] * len(windows) if all(drop) else drop


def locked_from_clocks(sm_mhz) -> bool | None:
    """True when every window's SM clock (None: not read) is the same, the highest within 1% of
    the lowest; None when no window read a clock. The measured answer where NVML cannot say."""
    clocks = [c for c in sm_mhz if c is not None]
    return max(clocks) <= 1.01 * min(clocks) if clocks else None


def _import(name):  # tests replace this to inject a fake vendor library
    return importlib.import_module(name)


def _try(fn):
    try:
        return fn()
    except Exception:  # facts are best effort: a missing value is None, never an error
        return None


def _num(value) -> float | None:
    """amdsmi reports unsupported values as "N/A" (and flags as bools): keep real numbers only."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class ClockProbe:
    """Reads one GPU's clock and power, never raising; this base class is the probe that cannot."""

    def __init__(self, unavailable: str | None, vendor: str | None = None, api: str | None = None):
        self.unavailable, self.vendor, self.api = unavailable, vendor, api

    def read(self) -> Reading | None:
        if self.unavailable:
            return None
        try:
            return self._read()
        except Exception:  # a failed poll is a missing reading, never a failed measurement
            return None

    def facts(self) -> dict:
        facts = {"vendor": self.vendor, "api": self.api, "locked": None}
        if self.unavailable:
            return {**facts, "unavailable": self.unavailable}
        return {**facts, **(_try(self._facts) or {})}

    def close(self):
        if not self.unavailable:
            _try(lambda: self._shutdown())
            self.unavailable = "closed"


class _NvmlProbe(ClockProbe):
    def __init__(self, nvml, handle):
        super().__init__(None, "nvidia", "nvml")
        self._nvml, self._handle, self._shutdown = nvml, handle, nvml.nvmlShutdown
        # The "Throttle" name is deprecated for the "Event" one; an older pynvml has only the old one.
        self._reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) \
            or nvml.nvmlDeviceGetCurrentClocksThrottleReasons

    def _reason_names(self) -> frozenset[str]:
        mask = self._reasons(self._handle)
        return frozenset(name for bit, name in NVML_REASON_BITS.items() if mask & bit)

    def _read(self) -> Reading:
        n, h = self._nvml, self._handle
        return Reading(float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
                       n.nvmlDeviceGetPowerUsage(h) / 1000.0, self._reason_names())  # mW

    def _facts(self) -> dict:
        n, h = self._nvml, self._handle
        reasons = _try(self._reason_names) or frozenset()
        return {"uuid": _try(lambda: n.nvmlDeviceGetUUID(h)),
                "max_sm_mhz": _try(lambda: float(n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM))),
                "power_limit_w": _try(lambda: n.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0),
                # NVML has no getter for a clock lock: the applications-clocks reason proves one only when set.
                "locked": True if "applications_clocks" in reasons else None}


class _AmdProbe(ClockProbe):
    def __init__(self, smi, handle, bdf: str):
        super().__init__(None, "amd", "amdsmi")
        self._smi, self._handle, self._bdf, self._shutdown = smi, handle, bdf, smi.amdsmi_shut_down

    def _read(self) -> Reading:
        smi, h = self._smi, self._handle
        clock = smi.amdsmi_get_clock_info(h, smi.AmdSmiClkType.GFX)
        power = smi.amdsmi_get_power_info(h)
        # MI300 reports current_socket_power; average_socket_power is for older parts.
        watts = _num(power.get("current_socket_power"))
        watts = _num(power.get("average_socket_power")) if watts is None else watts
        # No slowdown reasons: amdsmi_get_violation_status sleeps 100 ms inside the library (it
        # differences two SMU samples), far longer than a window; AMD windows go by the clock rule.
        return Reading(_num(clock.get("clk")), watts, frozenset())

    def _facts(self) -> dict:
        smi, h = self._smi, self._handle
        metrics = _try(lambda: smi.amdsmi_get_gpu_metrics_info(h)) or {}
        lock_mask = _num(metrics.get("gfxclk_lock_status"))  # a bit per XCD; amd-smi's CLK_LOCKED reads it
        return {"bdf": self._bdf,
                "max_sm_mhz": _num(_try(lambda: smi.amdsmi_get_clock_info(h, smi.AmdSmiClkType.GFX)["max_clk"])),
                "power_limit_w": _num(_try(lambda: smi.amdsmi_get_power_cap_info(h)["power_cap"] / 1e6)),  # uW
                "locked": None if lock_mask is None else lock_mask != 0}


def _pci_address(props) -> str | None:
    """torch's PCI address of the device as "dddd:bb:dd" (lower-case hex), or None."""
    parts = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if not all(isinstance(p, int) for p in parts):
        return None
    return "{:04x}:{:02x}:{:02x}".format(*parts)


def _load(name: str, init: str, api: str):  # (the initialised library, None) or (None, why not)
    try:
        lib = _import(name)
        getattr(lib, init)()
        return lib, None
    except ImportError:
        return None, f"{name} is not installed"
    except Exception as e:
        return None, f"{api}: {e}"


def _open_nvml(props) -> ClockProbe:
    nvml, why = _load("pynvml", "nvmlInit", "NVML")
    if nvml is None:
        return ClockProbe(why, "nvidia", "nvml")
    # torch's index counts CUDA_VISIBLE_DEVICES, NVML's counts every GPU: match by UUID, then PCI.
    uuid, pci = str(getattr(props, "uuid", "") or ""), _pci_address(props)
    if uuid and uuid[:4] not in ("GPU-", "MIG-"):
        uuid = "GPU-" + uuid  # torch prints the bare 8-4-4-4-12 hex
    handle = (uuid and _try(lambda: nvml.nvmlDeviceGetHandleByUUID(uuid))) \
        or (pci and _try(lambda: nvml.nvmlDeviceGetHandleByPciBusId(pci + ".0")))
    if handle:
        return _NvmlProbe(nvml, handle)
    _try(nvml.nvmlShutdown)
    return ClockProbe(f"NVML: no GPU has torch's UUID {uuid or '?'} or PCI address {pci or '?'}", "nvidia", "nvml")


def _open_amd(props) -> ClockProbe:
    smi, why = _load("amdsmi", "amdsmi_init", "amdsmi")
    if smi is None:
        return ClockProbe(why, "amd", "amdsmi")
    pci = _pci_address(props)  # amdsmi lists every GPU, HIP only the visible ones: match by PCI
    for handle in (_try(smi.amdsmi_get_processor_handles) or []) if pci else []:
        bdf = str(_try(lambda: smi.amdsmi_get_gpu_device_bdf(handle)) or "").lower()
        if bdf.rsplit(".", 1)[0] == pci:  # torch gives no PCI function number
            return _AmdProbe(smi, handle, bdf)
    _try(smi.amdsmi_shut_down)
    return ClockProbe(f"amdsmi: no GPU has torch's PCI address {pci or '?'}", "amd", "amdsmi")


def _device(device_index):  # (whether torch is a ROCm build, its device properties); tests replace it
    import torch
    if device_index is None:
        device_index = torch.cuda.current_device()
    return bool(getattr(torch.version, "hip", None)), torch.cuda.get_device_properties(device_index)


def open_probe(device_index: int = None) -> ClockProbe:
    """A probe for torch's device ``device_index`` (the current device if None). Never raises."""
    try:
        rocm, props = _device(device_index)
    except Exception as e:
        return ClockProbe(f"torch cannot describe GPU {device_index}: {e}")
    try:
        return _open_amd(props) if rocm else _open_nvml(props)
    except Exception as e:  # a vendor library broken in an unforeseen way still must not stop a run
        return ClockProbe(f"{'amdsmi' if rocm else 'NVML'}: {e}", *(("amd", "amdsmi") if rocm else ("nvidia", "nvml")))

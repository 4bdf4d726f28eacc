"""What a measurement ran on: the GPU this process uses, its platform, clocks and versions;
and how the report reads such a record back."""

import importlib.metadata
import os
import platform as _platform
import subprocess
import time
from pathlib import Path

from mlagate import gitops


def _query(cmd) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def clocks() -> dict:
    """Current SM and memory clocks (MHz) of GPU 0 as the vendor tool reports them."""
    smi = _query(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw",
                  "--format=csv,noheader,nounits", "-i", os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]])
    if smi:
        fields = [f.strip() for f in smi.splitlines()[0].split(",")]
        return dict(zip(("sm_mhz", "mem_mhz", "temp_c", "power_w"), fields))
    rocm = _query(["rocm-smi", "--showclocks", "--json"])
    if rocm:
        return {"rocm_smi": rocm[:2000]}
    return {"unavailable": "neither nvidia-smi nor rocm-smi answered"}


def _version(module: str) -> str | None:
    try:
        mod = __import__(module)
    except Exception:  # a missing or broken package is recorded, not fatal
        return None
    return getattr(mod, "__version__", "unknown")


def gpu_host() -> bool:
    """Whether this machine has a GPU driver's device nodes (NVIDIA or AMD's KFD), whatever torch
    makes of them: a host whose GPU fails must fail its benchmark, not be taken for a CPU machine."""
    return any(Path(p).exists() for p in ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd"))


def device():
    """The GPU this process measures on: torch's current device (one per worker process)."""
    import torch

    return torch.device("cuda", torch.cuda.current_device())


def platform() -> str:
    """'rocm' or 'cuda': which kind of torch build this is."""
    import torch

    return "rocm" if getattr(torch.version, "hip", None) else "cuda"


def environment(device=None, commit=None) -> dict:
    """What a result was measured on: GPU, architecture, versions, clocks, and the commit measured
    (``commit``, for a record of another commit; else the checkout's HEAD)."""
    import torch

    env = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": _platform.node(),
        "python": _platform.python_version(),
        "torch": torch.__version__,
        "triton": _version("triton"),
        "tilelang": _version("tilelang"),
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "platform": platform(),
        "commit": commit or gitops.head_or_none(),
    }
    if torch.cuda.is_available():
        from mlagate.kernels.mla_decode import device_arch

        device = torch.cuda.current_device() if device is None else device
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, arch=device_arch(device), sm_count=props.multi_processor_count,
                   l2_bytes=props.L2_cache_size, memory_bytes=props.total_memory,
                   driver=_query(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]),
                   clocks=clocks(), clock_control=_clock_facts(device))
    env["vendors"] = vendors(env["platform"], env.get("arch"))
    return env


def _distribution(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


# CUDA: the vendor libraries and the PyPI distributions they come from (impls.py imports them by module name)
CUDA_VENDORS = {"flash_mla": ("sgl-flash-mla", "flash-mla"), "flashinfer": ("flashinfer-python", "flashinfer")}
VENDORS = ("aiter", *CUDA_VENDORS)  # every vendor this module records; their cases name the kernels that ran


def vendors(platform: str, arch: str | None) -> dict:
    """The vendor kernels a ratio of this record was taken against: on ROCm aiter's version and, per
    "dtype/heads", the code object its decode dispatch picks on ``arch`` with its resources
    (measure/aiter_dispatch.py); on CUDA, FlashMLA's and FlashInfer's versions (and FlashInfer's backend).
    A vendor that is not installed is recorded as version None. The gate compares these between base and
    head (decide/verdict.py): a vendor that changed its kernel moved the ratio, not TileLang."""
    if platform == "rocm":
        from mlagate.measure import aiter_dispatch

        entry = {"distribution": aiter_dispatch.DISTRIBUTION, "version": aiter_dispatch.version(), "arch": arch}
        if entry["version"] and arch:
            try:
                entry["kernels"] = aiter_dispatch.table(arch)
            except aiter_dispatch.ContractError as e:  # recorded, not fatal: the ratio is still measured
                entry["kernels_unread"] = str(e)
        return {"aiter": entry}
    found = {}
    for vendor, names in CUDA_VENDORS.items():
        name = next((n for n in names if _distribution(n)), names[0])
        found[vendor] = {"distribution": name, "version": _distribution(name)}
    found["flashinfer"]["backend"] = "fa3"  # impls._flashinfer's BatchMLAPagedAttentionWrapper(backend=...)
    return found


def _clock_facts(device) -> dict:
    """Whether the GPU's clocks are locked, its top SM clock and power limit (measure.clocks)."""
    from mlagate.measure import clocks as probes

    probe = probes.open_probe(device)
    try:
        return probe.facts()
    finally:
        probe.close()


def _clock_control_text(c) -> str:
    if c.get("unavailable"):
        return f"not read ({c['unavailable']})"
    locked = {True: "locked", False: "not locked"}.get(c.get("locked"), "not known to be locked")
    return (f"{locked}; top SM clock {c.get('max_sm_mhz', '?')} MHz, power limit {c.get('power_limit_w', '?')} W "
            f"({c.get('api', '?')})")


# -- showing a run's record (store.env.RunEnv: its start and end environment()) ---------

def _clocks_text(c) -> str:
    return (f"SM {c.get('sm_mhz', '?')} MHz, memory {c.get('mem_mhz', '?')} MHz, {c.get('temp_c', '?')} °C, "
            f"{c.get('power_w', '?')} W")


def _toolkit(s) -> str | None:
    return (s.get("cuda") and f"CUDA {s['cuda']}") or (s.get("hip") and f"HIP {s['hip']}")


FIELDS = (  # label, how to read it from the start and end records; None or "": not recorded
    ("GPU", lambda s, e: s.get("gpu")),
    ("arch, SMs", lambda s, e: s.get("arch") and f"{s['arch']}, {s.get('sm_count', '?')} SMs"),
    ("memory, L2", lambda s, e: s.get("memory_bytes") and f"{s['memory_bytes'] / 2**30:.0f} GiB, "
                                                          f"{(s.get('l2_bytes') or 0) / 2**20:.0f} MiB L2"),
    ("driver", lambda s, e: s.get("driver")),
    ("CUDA / HIP", lambda s, e: _toolkit(s)),
    ("torch", lambda s, e: s.get("torch")),
    ("triton", lambda s, e: s.get("triton")),
    ("tilelang", lambda s, e: s.get("tilelang")),
    ("python", lambda s, e: s.get("python")),
    ("host", lambda s, e: s.get("host")),
    ("started / ended", lambda s, e: s.get("time") and f"{s['time']} / {e.get('time', 'not recorded')}"),
    ("clocks at start", lambda s, e: s.get("clocks") and _clocks_text(s["clocks"])),
    ("clocks at end", lambda s, e: e.get("clocks") and _clocks_text(e["clocks"])),
    ("clock control", lambda s, e: s.get("clock_control") and _clock_control_text(s["clock_control"])),
)


def headline(run) -> list:
    """GPU, arch, driver and versions of a run record (a store.env.RunEnv; None: not recorded), the ones recorded."""
    s = run.start if run else {}
    parts = [s.get("gpu"), s.get("arch"), s.get("driver") and f"driver {s['driver']}", _toolkit(s),
             *(s.get(lib) and f"{lib} {s[lib]}" for lib in ("torch", "triton", "tilelang"))]
    return [p for p in parts if p]

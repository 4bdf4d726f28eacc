"""What a measurement ran on: the GPU this process uses, its platform, clocks and versions."""

import os
import platform as _platform
import subprocess
import time

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


def device():
    """The GPU this process measures on: torch's current device (one per worker process)."""
    import torch

    return torch.device("cuda", torch.cuda.current_device())


def platform() -> str:
    """'rocm' or 'cuda': which kind of torch build this is."""
    import torch

    return "rocm" if getattr(torch.version, "hip", None) else "cuda"


def environment(device=None) -> dict:
    """What a result was measured on: GPU, architecture, versions, clocks, commit."""
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
        "commit": gitops.head_or_none(),
    }
    if torch.cuda.is_available():
        from mlagate.kernels.mla_decode import device_arch

        device = torch.cuda.current_device() if device is None else device
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, arch=device_arch(device), sm_count=props.multi_processor_count,
                   l2_bytes=props.L2_cache_size, memory_bytes=props.total_memory,
                   driver=_query(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]),
                   clocks=clocks())
    return env

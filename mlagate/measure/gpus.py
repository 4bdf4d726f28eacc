"""`mlagate gpus`: is this host's GPU free for a benchmark?

A benchmark that shares its GPU with another process measures that process
too, so CI checks first. Two checks:

* containers: running containers that hold a GPU (/dev/kfd, /dev/dri/*,
  /dev/nvidia*, an NVIDIA device request, the nvidia runtime, or --privileged),
  found with the Docker SDK. Ours (compose project ``mlagate`` or an
  ``mlagate*`` image) are stale benchmark containers: ``--stop-stale`` stops
  them. Anyone else's are reported and never touched.
* memory: VRAM in use per GPU from ``rocm-smi`` or ``nvidia-smi`` when either
  is installed.

Exit 0 when idle, 1 when busy (unless ``--allow-busy``), 2 when no Docker
engine is reachable (an OSError, which the CLI turns into exit 2). Which container counts as what is decided by the pure
functions ``gpu_access`` and ``gpu_holders``.
"""

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass

PROJECT = "mlagate"
GPU_DEVICE_PATHS = ("/dev/kfd", "/dev/dri", "/dev/nvidia")


@dataclass(frozen=True)
class GpuHolder:
    id: str
    name: str
    image: str
    access: tuple  # how it reaches the GPU, e.g. ("/dev/kfd", "/dev/dri")
    ours: bool     # started by this project: stale if it is still running now


def gpu_access(attrs: dict) -> tuple:
    """How a container (its `docker inspect` dict) can reach a GPU; empty if it cannot."""
    host = attrs.get("HostConfig") or {}
    found = [d.get("PathOnHost", "") for d in host.get("Devices") or []
             if d.get("PathOnHost", "").startswith(GPU_DEVICE_PATHS)]
    for request in host.get("DeviceRequests") or []:
        capabilities = {c for group in request.get("Capabilities") or [] for c in group}
        if request.get("Driver") == "nvidia" or "gpu" in capabilities:
            ids = ",".join(request.get("DeviceIDs") or []) or f"count={request.get('Count')}"
            found.append(f"GPU device request ({ids})")
    if host.get("Runtime") == "nvidia":
        found.append("nvidia runtime")
    for mount in attrs.get("Mounts") or []:
        source = mount.get("Source", "")
        if source == "/dev" or source.startswith(GPU_DEVICE_PATHS):
            found.append(f"bind mount {source}")
    if host.get("Privileged"):
        found.append("privileged (every host device)")
    return tuple(found)


def gpu_holders(containers, own_id: str = "", project: str = PROJECT) -> list:
    """Running containers (objects with .id, .name, .attrs) that hold a GPU, this process's own
    container excluded: a `mlagate gpus` run inside compose holds the GPU itself."""
    holders = []
    for c in containers:
        if own_id and c.id.startswith(own_id):
            continue
        access = gpu_access(c.attrs)
        if not access:
            continue
        config = c.attrs.get("Config") or {}
        image = config.get("Image", "")
        labels = config.get("Labels") or {}
        ours = (labels.get("com.docker.compose.project") == project
                or image.rsplit("/", 1)[-1].startswith(project))
        holders.append(GpuHolder(c.id, c.name, image, access, ours))
    return holders


def parse_rocm_smi(text: str) -> dict:
    """`rocm-smi --showmeminfo vram --json` -> {gpu index: bytes used}."""
    used = {}
    for card, fields in json.loads(text).items():
        match = re.fullmatch(r"card(\d+)", card)
        if match and isinstance(fields, dict) and "VRAM Total Used Memory (B)" in fields:
            used[int(match.group(1))] = int(fields["VRAM Total Used Memory (B)"])
    return used


def parse_nvidia_smi(text: str) -> dict:
    """`nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits` -> {gpu index: bytes used}."""
    used = {}
    for line in text.strip().splitlines():
        index, mib = (field.strip() for field in line.split(","))
        used[int(index)] = int(mib) * 2**20
    return used


SMI_COMMANDS = (
    ("rocm-smi", ["rocm-smi", "--showmeminfo", "vram", "--json"], parse_rocm_smi),
    ("nvidia-smi", ["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
     parse_nvidia_smi),
)


def vram_used():
    """(tool, {gpu: bytes used}) from the first SMI tool installed; (None, {}) if there is none."""
    for tool, cmd, parse in SMI_COMMANDS:
        if shutil.which(tool):
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            if out.returncode != 0:
                raise OSError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()}")
            return tool, parse(out.stdout)
    return None, {}


def own_container_id() -> str:
    """The id of the container this process runs in ('' on a bare host): Docker bind-mounts
    /var/lib/docker/containers/<id>/hostname onto /etc/hostname, and only inside the container."""
    try:
        with open("/proc/self/mountinfo") as f:
            match = re.search(r"/containers/([0-9a-f]{64})/hostname /etc/hostname ", f.read())
    except OSError:
        return ""
    return match.group(1) if match else ""


def docker_client():
    """A Docker SDK client; raises OSError with the address when no engine answers."""
    try:
        import docker  # lazily: the rest of mlagate works where the SDK or an engine is missing
    except ImportError as e:
        raise OSError(f"the Docker SDK is not installed ({e}); pip install docker==7.2.0") from None
    address = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as e:
        raise OSError(f"no Docker engine reachable at {address}: {e}") from None
    return client

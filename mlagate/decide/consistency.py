"""Do a node's GPUs read alike? Pure: medians of the same case, one per GPU, in; a verdict per GPU out.

A GPU whose median lies more than the gate's screen from the median of its siblings is flagged:
a throttled, shared or otherwise different GPU would put its own drift into every case it records.
With two GPUs neither can be singled out, so both are flagged when they disagree.
"""

import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuReading:
    gpu: int
    uuid: str
    median_s: float
    off: float  # median / the median of the other GPUs' medians - 1
    flagged: bool


def compare_gpus(medians: dict, screen: float, uuids: dict | None = None) -> list:
    """{gpu index: median seconds} -> [GpuReading], by index; fewer than two GPUs: nothing to compare."""
    if len(medians) < 2:
        return []
    readings = []
    for gpu in sorted(medians):
        others = statistics.median(m for g, m in medians.items() if g != gpu)
        off = medians[gpu] / others - 1
        readings.append(GpuReading(gpu, (uuids or {}).get(gpu, ""), medians[gpu], off, abs(off) > screen))
    return readings

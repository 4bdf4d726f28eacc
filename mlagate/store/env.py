"""A record's environment sidecar (``<commit8>-env.sidecar``, and an `mlagate bench --out` file's ``environment``)
read back typed: what the GPU, platform, versions and clocks of a run were, every field checked once here, so the
gate, the pages and the lab read fields, never walk a dict.

The writer is measure/environment.environment() (``start`` and ``end``) and store/record.py (the rest).
A field a record lacks is None; one of the wrong type is refused with its key named (``start.gpu``).
Fields this reader does not know are ignored: a newer record stays readable.
"""

from dataclasses import dataclass, field

# The fields of measure/environment.environment() the report, the gate and the lab read, and their JSON types.
TEXT = ("time", "host", "python", "torch", "triton", "tilelang", "cuda", "hip", "platform", "commit", "gpu", "arch",
        "driver")
COUNTS = ("sm_count", "l2_bytes", "memory_bytes")
OBJECTS = ("clocks", "clock_control", "vendors")


class EnvRecordError(ValueError):
    """A field of an environment record of the wrong type; the message names its key."""


@dataclass(frozen=True)
class RunEnv:
    start: dict = field(default_factory=dict)  # environment() as the run began (TEXT, COUNTS, OBJECTS checked)
    end: dict = field(default_factory=dict)  # ... and as it ended
    platform: str | None = None  # perf.yml's platform the record ran as
    grid: str | None = None  # perf.yml's grid it recorded
    shard: str | None = None  # "I/N" of a runner's share of the grid
    gpu_consistency: dict | None = None  # measure/gpus' check of the GPUs a record ran on
    shards: tuple = ()  # a merged record: each runner's RunEnv

    @property
    def arch(self) -> str | None:
        return self.start.get("arch")

    @property
    def gpu(self) -> str | None:
        return self.start.get("gpu")

    @property
    def time(self) -> str | None:
        return self.start.get("time")

    @property
    def clock_control(self) -> dict | None:
        return self.start.get("clock_control")

    @property
    def vendors(self) -> dict:
        return self.start.get("vendors") or {}

    def runners(self) -> tuple:
        """Each runner's record: a merged record's shards, else the record itself."""
        return self.shards or (self,)


def parse_env(data, where: str = "") -> RunEnv:
    """``data`` (the sidecar's JSON object) as a RunEnv; EnvRecordError names the first bad key (``where`` its
    prefix, for a shard)."""
    if not isinstance(data, dict):
        raise EnvRecordError(f"{where or 'the record'} must be an object, got {type(data).__name__}")
    shards = _typed(data, "shards", list, where) or []
    return RunEnv(start=_snapshot(data, "start", where), end=_snapshot(data, "end", where),
                  platform=_typed(data, "platform", str, where), grid=_typed(data, "grid", str, where),
                  shard=_typed(data, "shard", str, where),
                  gpu_consistency=_typed(data, "gpu_consistency", dict, where),
                  shards=tuple(parse_env(s, f"{where}shards[{i}].") for i, s in enumerate(shards)))


def _snapshot(data: dict, key: str, where: str) -> dict:
    snap = _typed(data, key, dict, where) or {}
    for names, kind in ((TEXT, str), (COUNTS, int), (OBJECTS, dict)):
        for name in names:
            _typed(snap, name, kind, f"{where}{key}.")
    for vendor, entry in (snap.get("vendors") or {}).items():
        entry = _typed(snap["vendors"], vendor, dict, f"{where}{key}.vendors.") or {}
        for row in (_typed(entry, "kernels", dict, f"{where}{key}.vendors.{vendor}.") or {}):
            _typed(entry["kernels"], row, dict, f"{where}{key}.vendors.{vendor}.kernels.")
    return snap


def _typed(data: dict, key: str, kind: type, where: str):
    value = data.get(key)
    if value is None or (isinstance(value, kind) and not (kind is int and isinstance(value, bool))):
        return value
    raise EnvRecordError(f"{where}{key} must be a JSON {_JSON[kind]}, got {value!r:.60}")


_JSON = {str: "string", int: "integer", dict: "object", list: "array"}

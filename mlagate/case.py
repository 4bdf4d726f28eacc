"""A measured case: what was measured (Case), its identity across commits (its key),
and what came of it (CaseResult), one record from the worker to the bench file,
the asv suite, the tables and the report."""

from dataclasses import asdict, dataclass, field, fields, replace
from enum import StrEnum

from mlagate.hardware import ELEMENT_BYTES

# The fields of a case's key, in order: also asv's parameter names, so stored results key the same way.
# q_len: query tokens per sequence (s_q; MTP decode scores 2 or 4 at once); kv_dtype: the KV cache's dtype (the
# query's, or an fp8 format). The workload stays last: the dense benchmarks have every parameter but it.
PARAM_NAMES = ("impl", "batch", "seqlen", "dtype", "heads", "q_len", "kv_dtype", "workload")
DENSE = "dense"  # the grid's own workload: one KV tensor, every sequence at seqlen (perf.yml `workloads:`)
# A TileLang implementation is the prefix and its config family (tilelang-hopper); a tune candidate adds the
# mark and one config of that family, as kernels/tuned.py spells it (tilelang-hopper@N64.H64.split0...).
TILELANG_PREFIX = "tilelang-"
CANDIDATE_MARK = "@"
WORKLOAD_TAG_MARK = "@"  # between a workload's name and its definition's digest in a case key (Workload.tag)
# The seesaw has no fp8 cache: its fp8 cases, dense and paged, run this family's kernel (mla_decode.kernel_config).
FP8_KERNEL_OF = {"tilelang-seesaw": "tilelang-hopper"}


def family_impl(impl: str) -> str:
    """The implementation a tune candidate is one config of (tilelang-hopper@N64... -> tilelang-hopper)."""
    return impl.partition(CANDIDATE_MARK)[0]


@dataclass(frozen=True)
class Case:
    impl: str
    batch: int
    seqlen: int  # a workload's mean length: the batch holds batch x seqlen tokens
    dtype: str
    heads: int = 128
    q_len: int = 1  # query tokens per sequence (s_q), causal among themselves
    kv_dtype: str = ""  # the cache's dtype; "" reads as the query's (a 16-bit cache, as before the axis)
    workload: str = DENSE
    # A workload's paged layout, derived from perf.yml (not part of the key): tokens per page and
    # each sequence's length.
    page_size: int = field(default=0, compare=False)
    lengths: tuple = field(default=(), compare=False)

    def __post_init__(self):
        if not self.kv_dtype:
            object.__setattr__(self, "kv_dtype", self.dtype)
        if self.kv_dtype not in ELEMENT_BYTES:  # a positional workload where kv_dtype now stands, say
            raise ValueError(f"kv_dtype {self.kv_dtype!r} is not a dtype ({', '.join(ELEMENT_BYTES)})")

    @classmethod
    def from_dict(cls, d: dict) -> "Case":
        """The case of a stored row (CaseResult.to_dict's, a cases sidecar's): a row without heads, q_len, kv_dtype
        or a workload reads as the defaults (the record before those axes)."""
        case = cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})
        return replace(case, lengths=tuple(case.lengths))

    @property
    def key(self) -> tuple:
        """Identity of a case across commits (impl, batch, seqlen, dtype, heads, q_len, kv_dtype, workload)."""
        return (self.impl, self.batch, self.seqlen, self.dtype, self.heads, self.q_len, self.kv_dtype,
                self.workload)

    @property
    def paged(self) -> bool:
        return self.workload != DENSE

    def label(self, *, tag: bool = False) -> str:
        return case_label(self.key, tag=tag)


def case_label(key: tuple, *, tag: bool = False) -> str:
    """What a reader sees: a workload by its name (``tag``: with its definition's digest, for the errors that
    say a definition changed), and the kernel a case runs when that is another family's (an fp8 cache's)."""
    impl, batch, seqlen, dtype, heads, q_len, kv_dtype, workload = key
    # one query token and a cache in the query's dtype are left unsaid, so labels (perf-accept.yml's patterns)
    # read as before the q_len and kv_dtype axes
    point = f"{impl} h={heads}" + (f" s_q={q_len}" if q_len != 1 else "") + f" b={batch} s={seqlen} {dtype}" \
        + (f" kv={kv_dtype}" if kv_dtype != dtype else "")
    if workload != DENSE:
        point += " " + (workload if tag else workload.partition(WORKLOAD_TAG_MARK)[0])
    runs = FP8_KERNEL_OF.get(family_impl(impl)) if kv_dtype != dtype else None
    return point + (f" (runs {runs}'s kernel)" if runs else "")


class RunStatus(StrEnum):
    OK = "ok"
    FAILED = "failed"  # wrong result, or an error or crash while measuring: never timed or not finished
    SKIPPED = "skipped"  # cannot run here (kernel or package missing); the reason says why


@dataclass(frozen=True)
class Samples:
    """Per-call kernel times in ms, and how they were taken."""

    times_ms: tuple
    backend: str  # "cuda-event" or "cuda-graph" (HIP events on ROCm)
    flush_bytes: int  # buffer written before every sample; 0 = warm cache
    warmup_calls: int
    device: str
    dropped: int = 0  # calls not timed: the GPU had reached the start event before the host queued them
    budget: str = ""  # the perf.yml timing budget it was taken with
    # Per sampling window: {"samples", "sm_mhz", "power_w", "throttle", "kept"}; times_ms holds the
    # kept windows' samples, dropped_ms those of windows dropped for the clock (measure.clocks).
    windows: tuple = ()
    dropped_ms: tuple = ()
    uuid: str = ""  # the GPU's, as torch reports it: which of a node's GPUs measured it

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(times_ms=list(self.times_ms), windows=[dict(w) for w in self.windows],
                 dropped_ms=list(self.dropped_ms))
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Samples":
        return cls(**{**d, "times_ms": tuple(d["times_ms"]), "windows": tuple(d.get("windows", ())),
                      "dropped_ms": tuple(d.get("dropped_ms", ()))})


# Derived from the samples by the grid runner (or read from the store); in the JSON only where known.
METRICS = ("median_ms", "iqr_ms", "ci99_ms", "outliers", "n", "tflops", "gbps", "roofline", "vendor_ratio")


@dataclass(frozen=True)
class CaseResult:
    """One measured case: its status, raw samples, correctness error and derived metrics.

    The worker sends it (to_dict), the grid runner adds the metrics and writes it to
    the bench JSON file, which from_dict reads back; the report builds it from a
    commit's asv results too (median, TFLOPs and vendor ratio only)."""

    case: Case
    status: RunStatus
    reason: str | None = None  # why it failed or was skipped
    samples: Samples | None = None
    error: dict = field(default_factory=dict)  # max abs/rel error against the reference
    gpu: int | None = None  # the grid runner's GPU index; None: the one GPU as visible
    median_ms: float | None = None
    iqr_ms: float | None = None
    ci99_ms: tuple | None = None  # (low, high) of the median
    outliers: float | None = None  # share of samples
    n: int | None = None
    tflops: float | None = None
    gbps: float | None = None
    roofline: float | None = None  # share of the arch's roofline (perf.yml peaks)
    vendor_ratio: float | None = None  # TFLOPs over the vendor kernel's, same point and GPU
    kernels: tuple = ()  # a vendor case's GPU kernels that ran, by name (measure/kernels_run.py)

    def to_dict(self) -> dict:
        d = {**asdict(self.case), "lengths": list(self.case.lengths), "status": self.status.value,
             "reason": self.reason, "samples": self.samples.to_dict() if self.samples else None, "error": self.error,
             "gpu": self.gpu}
        d.update((name, getattr(self, name)) for name in METRICS if getattr(self, name) is not None)
        if self.ci99_ms is not None:
            d["ci99_ms"] = list(self.ci99_ms)
        if self.kernels:
            d["kernels"] = list(self.kernels)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "CaseResult":
        """Of to_dict's output; files without heads read as heads = 128, without q_len as one query token,
        without kv_dtype as a cache in the query's dtype and without a workload as dense (Case's defaults)."""
        case = Case.from_dict(d)
        known = {name: d[name] for name in METRICS if d.get(name) is not None}
        if "ci99_ms" in known:
            known["ci99_ms"] = tuple(known["ci99_ms"])
        return cls(case, RunStatus(d["status"]), d.get("reason"),
                   Samples.from_dict(d["samples"]) if d.get("samples") else None, d.get("error") or {},
                   d.get("gpu"), **known, kernels=tuple(d.get("kernels") or ()))

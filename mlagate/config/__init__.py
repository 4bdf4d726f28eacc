"""perf.yml -> frozen dataclasses, validated once. Errors name the key path."""

import hashlib
import itertools
import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from mlagate.case import TILELANG_PREFIX, Case, family_impl
from mlagate.config import platforms as config_platforms
from mlagate.config import tune as config_tune
from mlagate.config import workloads as config_workloads
from mlagate.config.confirm import Confirm, parse_confirm
from mlagate.config.platforms import DTYPES, FP8_DTYPES, HEADS, PLATFORMS, Platform, Vendor  # noqa: F401
from mlagate.config.reader import ConfigError, KeyReader, UniqueKeyLoader, open_section_keys
from mlagate.hardware import arch_key

ROOT = Path(__file__).resolve().parents[2]  # the checkout this mlagate is imported from
DEFAULT_PATH = ROOT / "perf.yml"
GRIDS = ("quick", "full")  # perf.yml grid: each section, the same names in every --grid
Q_LENS = tuple(range(1, 9))  # query tokens per sequence (s_q): 1 plain decode, 2-4 MTP; the kernels take 1..8
KNOWN_IMPLS = ("tilelang-hopper", "tilelang-seesaw", "tilelang-cdna3", "flash_mla", "flashinfer", "aiter", "triton",
               "torch")
# The TileLang config families (kernels/mla_decode.py CONFIGS), by their implementations' names.
TILELANG_FAMILIES = tuple(i.removeprefix(TILELANG_PREFIX) for i in KNOWN_IMPLS if i.startswith(TILELANG_PREFIX))


@dataclass(frozen=True)
class Grid:
    sizes: dict  # name -> (batches, seqlens, heads, q_lens)
    workloads: dict  # name -> the workloads measured with the grid (perf.yml `workloads:` names)

    def cases(self, name: str, impls, formats) -> list:
        """The grid's dense cases at each (query dtype, cache dtype) of ``formats``."""
        if name not in self.sizes:
            raise ConfigError(f"grid.{name}: no such grid; known: {sorted(self.sizes)}")
        batches, seqlens, heads, q_lens = self.sizes[name]
        return [Case(impl, b, s, d, h, q, kv) for impl, (d, kv), h, q, b, s
                in itertools.product(impls, formats, heads, q_lens, batches, seqlens)]


BUDGETS = ("record", "baseline", "confirm")


@dataclass(frozen=True)
class Budget:
    """What one timing of one case spends: a warm-up, then sampling windows."""

    warmup_ms: float
    windows: int


@dataclass(frozen=True)
class Timing:
    cold_l2: bool
    cuda_graph: bool
    warmup_ms: float  # once per measuring process, before its first case
    window_ms: float
    samples_per_window: int
    min_samples: int
    max_clock_drop: float
    record_s: float  # a record's measuring time on one GPU
    budgets: dict  # name (BUDGETS) -> Budget

    def budget(self, name: str) -> Budget:
        return self.budgets[name]


@dataclass(frozen=True)
class Peak:
    tflops: float
    tbps: float


@dataclass(frozen=True)
class RatioRule:
    floor: float
    max_drop: float


@dataclass(frozen=True)
class Gate:
    gated: tuple
    threshold: float
    screen: float
    alpha: float
    min_samples: int
    ratio: dict  # platform -> RatioRule
    drift_lookback: int
    drift_max_slowdown: float
    confirm: Confirm
    max_new_spill_bytes: int
    shared_memory_limit: dict  # arch -> bytes


@dataclass(frozen=True)
class Config:
    grid: Grid
    implementations: tuple
    platforms: dict  # "rocm"/"cuda" -> Platform
    timing: Timing
    roofline: dict  # arch or GPU name -> Peak
    gate: Gate
    tune: dict  # family -> config_tune.TuneSpace: what `mlagate tune` measures
    workloads: dict  # name -> config_workloads.Workload
    digest: str  # sha256 of the validated content, stored with every record

    def platform(self, name: str) -> Platform:
        if name not in self.platforms:
            raise ConfigError(f"platforms.{name}: not configured")
        return self.platforms[name]

    def cases(self, grid: str, impls, platform: str, dtypes=None) -> list:
        """The grid's cases on a platform, then its workloads', at the platform's query dtypes unless given, each
        with every cache format of the platform (Platform.formats); a vendor kernel only where it has one."""
        p = self.platform(platform)
        formats = p.formats(dtypes)
        cases = self.grid.cases(grid, impls, formats)
        for w in (self.workloads[name] for name in self.grid.workloads[grid]):
            cases += [self._workload_case(w, impl, b, d, h, p, q, kv)
                      for impl, (d, kv), h, q, b in itertools.product(impls, formats, w.heads, w.q_len, w.batch)]
        return [c for c in cases
                if c.impl != p.vendor_for(c.kv_dtype).impl or p.has_vendor_kernel(c.heads, c.q_len, c.kv_dtype)]

    def listed_keys(self, platform: str, grid: str | None = None) -> frozenset:
        """Every case key perf.yml measures on a platform in ``grid`` (every grid where it is not known), in
        any implementation or dtype: a case base has and head lacks is an error while it is listed here, a
        removal once it is not."""
        grids = [grid] if grid in self.grid.sizes else list(self.grid.sizes)
        return frozenset(c.key for name in grids
                         for c in self.cases(name, self.implementations, platform, dtypes=DTYPES))

    def case(self, key: tuple, platform: str) -> Case:
        """The case of a stored key, a workload's with its page size and lengths."""
        case = Case(*key)
        if not case.paged:
            return case
        name = case.workload.partition(config_workloads.TAG_MARK)[0]
        if name not in self.workloads:
            raise ConfigError(f"workloads.{name}: not in perf.yml, but {case.label(tag=True)} was recorded")
        full = self._workload_case(self.workloads[name], case.impl, case.batch, case.dtype, case.heads,
                                   self.platform(platform), case.q_len, case.kv_dtype)
        if full != case:
            raise ConfigError(f"workloads.{name}: perf.yml defines {full.label(tag=True)}, but {case.label(tag=True)} "
                              "was recorded (the workload changed since)")
        return full

    @staticmethod
    def _workload_case(w, impl, batch, dtype, heads, p: Platform, q_len: int, kv_dtype: str) -> Case:
        return Case(impl, batch, w.mean, dtype, heads, q_len, kv_dtype, w.tag(p.page_size), page_size=p.page_size,
                    lengths=w.lengths(batch))

    def budget_for(self, impl: str, platform: str) -> str:
        """The gated kernels and the vendor kernel their ratios divide by are measured with the
        record budget; the ungated baselines more cheaply."""
        family = family_impl(impl)  # a tune candidate is measured as its family is
        vendors = self.platform(platform).vendor_impls()
        return "record" if family in self.gate.gated or impl in vendors else "baseline"

    def roofline_key(self, arch: str | None, gpu: str | None = None) -> str | None:
        """The roofline entry of a GPU: its own name's (GPUs of one arch differ in bandwidth: an H100 SXM
        3.35 TB/s, an H200 4.8), else its arch's ("sm_90a" reads sm_90's); None where perf.yml has neither."""
        if isinstance(gpu, str) and gpu in self.roofline:
            return gpu
        key = arch_key(arch or "")
        return key if key in self.roofline else None

    def peaks(self, arch: str | None, gpu: str | None = None):
        """The roofline peaks of a GPU (``roofline_key``), or None."""
        return self.roofline.get(self.roofline_key(arch, gpu))


def parse(data) -> Config:
    if not isinstance(data, dict):
        raise ConfigError(f"top level: must be a mapping, got {type(data).__name__}")
    for k in data:
        if not isinstance(k, str):
            raise ConfigError(f"{k}: unknown key (keys are names, got {type(k).__name__})")
    top = KeyReader(data)
    top_keys = ("grid", "implementations", "platforms", "timing", "roofline", "gate", "tune", "workloads")
    unknown = sorted(set(data) - set(top_keys))
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown key (allowed: {', '.join(top_keys)})")

    workloads = config_workloads.parse(top, HEADS, Q_LENS)
    g = top.section("grid", GRIDS)
    sizes, measured = {}, {}
    for name in GRIDS:
        s = g.section(name, ("batch", "seqlen", "heads", "q_len", "workloads"))
        sizes[name] = (s.int_list("batch"), s.int_list("seqlen"), s.int_list("heads", choices=HEADS),
                       s.int_list("q_len", choices=Q_LENS))
        measured[name] = s.choice_list("workloads", tuple(workloads)) if "workloads" in s.data else ()
    grid = Grid(sizes=sizes, workloads=measured)

    impls = top.choice_list("implementations", KNOWN_IMPLS)

    platforms = config_platforms.parse(top, impls)

    t = top.section("timing", ("cold_l2", "cuda_graph", "warmup_ms", "window_ms", "samples_per_window",
                               "min_samples", "max_clock_drop", "record_s", "budgets"))
    b = t.section("budgets", BUDGETS)
    budgets = {}
    for name in BUDGETS:
        s = b.section(name, ("warmup_ms", "windows"))
        budgets[name] = Budget(s.get("warmup_ms", float, minimum=0), s.get("windows", int, minimum=1))
    timing = Timing(
        cold_l2=t.get("cold_l2", bool), cuda_graph=t.get("cuda_graph", bool),
        warmup_ms=t.get("warmup_ms", float, minimum=0),
        window_ms=t.get("window_ms", float, minimum=0, exclusive_min=True),
        samples_per_window=t.get("samples_per_window", int, minimum=1),
        min_samples=t.get("min_samples", int, minimum=1),
        max_clock_drop=t.get("max_clock_drop", float, minimum=0, exclusive_min=True, maximum=1),
        record_s=t.get("record_s", float, minimum=0, exclusive_min=True),
        budgets=budgets,
    )

    r = top.section("roofline", open_section_keys(data.get("roofline")))
    roofline = {}
    for arch in r.data:
        s = r.section(arch, ("tflops", "tbps"))
        roofline[arch] = Peak(s.get("tflops", float, minimum=0, exclusive_min=True),
                              s.get("tbps", float, minimum=0, exclusive_min=True))

    gt = top.section("gate", ("gated", "latency", "vendor_ratio", "drift", "confirm", "build"))
    lat = gt.section("latency", ("threshold", "screen", "alpha", "min_samples"))
    vr = gt.section("vendor_ratio", PLATFORMS)
    ratio = {}
    for name in PLATFORMS:
        s = vr.section(name, ("floor", "max_drop"))
        ratio[name] = RatioRule(s.get("floor", float, minimum=0), s.get("max_drop", float, minimum=0, maximum=1))
    drift = gt.section("drift", ("lookback", "max_slowdown"))
    build = gt.section("build", ("max_new_spill_bytes", "shared_memory_limit"))
    smem = build.section("shared_memory_limit", open_section_keys(build.data.get("shared_memory_limit")))
    gate = Gate(
        gated=gt.choice_list("gated", impls),
        threshold=lat.get("threshold", float, minimum=0, exclusive_min=True, maximum=1),
        screen=lat.get("screen", float, minimum=0, exclusive_min=True, maximum=1),
        alpha=lat.get("alpha", float, minimum=0, exclusive_min=True, maximum=0.5),
        min_samples=lat.get("min_samples", int, minimum=3),
        ratio=ratio,
        drift_lookback=drift.get("lookback", int, minimum=2),
        drift_max_slowdown=drift.get("max_slowdown", float, minimum=0, exclusive_min=True),
        confirm=parse_confirm(gt.section("confirm", ("min_rounds", "max_rounds", "budget_s", "unsure"))),
        max_new_spill_bytes=build.get("max_new_spill_bytes", int, minimum=0),
        shared_memory_limit={arch: smem.get(arch, int, minimum=1) for arch in smem.data},
    )
    if gate.min_samples > timing.min_samples:
        raise ConfigError(f"gate.latency.min_samples: must be <= timing.min_samples ({timing.min_samples}), the "
                          f"samples every record takes, got {gate.min_samples}")
    if timing.samples_per_window < timing.min_samples:
        raise ConfigError(f"timing.samples_per_window: must be >= timing.min_samples ({timing.min_samples}), got "
                          f"{timing.samples_per_window}")
    if gate.screen > gate.threshold:
        raise ConfigError(f"gate.latency.screen: must be <= gate.latency.threshold ({gate.threshold}), "
                          f"got {gate.screen}")
    for name, plat in platforms.items():  # else its vendor ratio, and its latency, would go unwatched
        if plat.tilelang not in gate.gated:
            raise ConfigError(f"gate.gated: must list platforms.{name}.tilelang ({plat.tilelang!r}), the config held "
                              f"to the vendor ratio there; got {', '.join(gate.gated)}")
    tune = config_tune.parse(top, TILELANG_FAMILIES, gate.shared_memory_limit)
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
    return Config(grid, impls, platforms, timing, roofline, gate, tune, workloads, digest)


def load(path=None) -> Config:
    path = Path(path or DEFAULT_PATH)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: cannot read (not UTF-8: {e.reason} at byte {e.start})") from None
    try:
        data = yaml.load(text, Loader=UniqueKeyLoader)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    try:
        return parse(data)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None

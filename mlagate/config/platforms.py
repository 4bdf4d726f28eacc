"""perf.yml `platforms:`: per platform the vendor kernel every ratio divides by, the TileLang config held to
it, the query dtypes and the KV cache formats measured there (kv_dtypes: the query's own 16-bit cache, and the
arch's fp8 format), and the vendor kernel an fp8 cache is held to (fp8_vendor: FlashMLA 1.0.0 takes no fp8 cache
with a 16-bit query, so on Hopper that is FlashInfer)."""

from dataclasses import dataclass

from mlagate.config.reader import ConfigError, KeyReader
from mlagate.config.workloads import MAX_LENGTH
from mlagate.hardware import FP8_KV_FORMAT
from mlagate.kernels.tile_rules import FP8_DTYPES

PLATFORMS = ("rocm", "cuda")
DTYPES = ("float16", "bfloat16")
HEADS = (16, 32, 64, 128)  # query heads per GPU: DeepSeek's 128 under tensor parallelism 8, 4, 2 and 1
# An fp8 cache is read with a bfloat16 query: the TileLang kernels' contract (kernels/mla_decode.py), aiter's
# a16w8 and FlashInfer's e4m3 path alike, so both sides of an fp8 ratio run (bfloat16, the fp8 format).
FP8_QUERY_DTYPE = "bfloat16"


@dataclass(frozen=True)
class Vendor:
    """A vendor kernel as a ratio's denominator: the head counts it has, and of those the ones where it takes
    q_len > 1 too."""

    impl: str
    heads: tuple
    q_len_heads: tuple = ()

    def has_kernel(self, heads: int, q_len: int) -> bool:
        return heads in self.heads and (q_len == 1 or heads in self.q_len_heads)


@dataclass(frozen=True)
class Platform:
    vendor: str
    tilelang: str
    dtypes: tuple  # what the gate measures here: dtypes the vendor kernel takes, so every ratio exists
    vendor_heads: tuple  # head counts the vendor kernel has; elsewhere no ratio exists, by declaration
    page_size: int  # tokens per page of every workload's cache here: one the vendor kernel takes
    vendor_q_len_heads: tuple = ()  # of vendor_heads, those where it takes q_len > 1 too
    kv_dtypes: tuple = ()  # the cache formats measured: a 16-bit one is the query's own; () reads as dtypes
    fp8_vendor: Vendor | None = None  # the vendor of an fp8 cache's ratio (required with an fp8 kv_dtype)

    def vendor_for(self, kv_dtype: str | None = None) -> Vendor:
        """The vendor kernel a case with this cache is held to."""
        if kv_dtype in FP8_DTYPES and self.fp8_vendor is not None:
            return self.fp8_vendor
        return Vendor(self.vendor, self.vendor_heads, self.vendor_q_len_heads)

    def vendor_impl(self, kv_dtype: str | None = None) -> str:
        return self.vendor_for(kv_dtype).impl

    def vendor_impls(self) -> tuple:
        return tuple(dict.fromkeys([self.vendor] + ([self.fp8_vendor.impl] if self.fp8_vendor else [])))

    def has_vendor_kernel(self, heads: int, q_len: int, kv_dtype: str | None = None) -> bool:
        return self.vendor_for(kv_dtype).has_kernel(heads, q_len)

    def formats(self, dtypes=None) -> list:
        """(query dtype, cache dtype) pairs measured here, of the query dtypes ``dtypes`` (default this
        platform's): each 16-bit cache of kv_dtypes in its query's dtype (a query dtype given from outside this
        platform's with its own), each fp8 cache with a FP8_QUERY_DTYPE query."""
        wanted = dtypes or self.dtypes
        kv_dtypes = self.kv_dtypes or self.dtypes
        pairs = [(d, d) for d in wanted if d in kv_dtypes or d not in self.dtypes]  # --dtype's other: its own
        fp8 = [(FP8_QUERY_DTYPE, kv) for kv in kv_dtypes if kv in FP8_DTYPES]
        return pairs + (fp8 if not dtypes or FP8_QUERY_DTYPE in dtypes else [])


def parse(top: KeyReader, impls) -> dict:
    """{name: Platform} of the `platforms:` section, every problem naming its key."""
    p = top.section("platforms", PLATFORMS)
    platforms = {}
    for name in PLATFORMS:
        s = p.section(name, ("vendor", "tilelang", "dtypes", "kv_dtypes", "vendor_heads", "vendor_q_len_heads",
                             "page_size", "fp8_vendor"))
        vendor, tilelang = s.get("vendor", str), s.get("tilelang", str)
        for key, value in (("vendor", vendor), ("tilelang", tilelang)):
            if value not in impls:
                raise ConfigError(f"platforms.{name}.{key}: {value!r} is not in implementations")
        dtypes = s.choice_list("dtypes", DTYPES)
        heads = s.int_list("vendor_heads", choices=HEADS)
        kv_dtypes = _kv_dtypes(s, name, dtypes) if "kv_dtypes" in s.data else dtypes
        fp8_vendor = _fp8_vendor(s, name, impls, kv_dtypes)
        platforms[name] = Platform(vendor, tilelang, dtypes, heads, s.get(
            "page_size", int, minimum=1, maximum=MAX_LENGTH), s.int_list("vendor_q_len_heads", choices=heads),
            kv_dtypes, fp8_vendor)
    return platforms


def _kv_dtypes(s: KeyReader, name: str, dtypes) -> tuple:
    kv_dtypes = s.choice_list("kv_dtypes", DTYPES + FP8_DTYPES)
    for kv in kv_dtypes:
        if kv in FP8_DTYPES and kv != FP8_KV_FORMAT[name]:
            raise ConfigError(f"platforms.{name}.kv_dtypes: {kv} is not {name}'s fp8 format (its arch computes "
                              f"in {FP8_KV_FORMAT[name]})")
        if kv in DTYPES and kv not in dtypes:
            raise ConfigError(f"platforms.{name}.kv_dtypes: a {kv} cache is read in its query's dtype, but "
                              f"{kv} is not in platforms.{name}.dtypes {list(dtypes)}")
    return kv_dtypes


def _fp8_vendor(s: KeyReader, name: str, impls, kv_dtypes) -> Vendor | None:
    has_fp8 = any(kv in FP8_DTYPES for kv in kv_dtypes)
    if "fp8_vendor" not in s.data:
        if has_fp8:
            raise ConfigError(f"platforms.{name}.fp8_vendor: missing (kv_dtypes holds an fp8 cache, whose ratio "
                              "needs its vendor kernel)")
        return None
    if not has_fp8:
        raise ConfigError(f"platforms.{name}.fp8_vendor: no fp8 cache in platforms.{name}.kv_dtypes to hold to it")
    v = s.section("fp8_vendor", ("impl", "heads", "q_len_heads"))
    impl = v.get("impl", str)
    if impl not in impls:
        raise ConfigError(f"platforms.{name}.fp8_vendor.impl: {impl!r} is not in implementations")
    heads = v.int_list("heads", choices=HEADS)
    return Vendor(impl, heads, v.int_list("q_len_heads", choices=heads) if "q_len_heads" in v.data else ())

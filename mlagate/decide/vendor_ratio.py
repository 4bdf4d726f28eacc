"""The vendor-ratio rules of the gate (TileLang TFLOPs over the vendor's, from one run): pure, as verdict.py."""

from mlagate.config import Platform
from mlagate.decide.vocabulary import Kind, Status, fail, positive, warn
from mlagate.measure.aiter_dispatch import kernel_row


def vendor_kernel(env, vendor: str, case: tuple):
    """(version, kernel) of ``vendor`` for ``case`` in a record's env sidecar (a store.env.RunEnv, its vendors
    measure/environment.vendors'); None where the record names none (older records, no record)."""
    entry = env.vendors.get(vendor) if env else None
    if not entry:
        return None
    row = (entry.get("kernels") or {}).get(kernel_row(case[3], case[4], case[5], case[6])) or {}
    return entry.get("version"), row.get("kernel")


def vendor_changed(cv, vendor: str, kernels) -> bool:
    """Base and head ran different vendor kernels (or versions) for this case: the ratio moved with the vendor,
    so its rules are not TileLang's to fail; said, and the case re-baselined. A side that names no kernel (a
    record from before kernels were named) is compared by version alone."""
    base, head = kernels or (None, None)
    if base is None or head is None:
        return False
    both_named = base[1] is not None and head[1] is not None
    if base[0] == head[0] and (base[1] == head[1] or not both_named):
        return False
    warn(cv, Kind.VENDOR_CHANGED, f"vendor kernel changed: {vendor} {base[0]} ran {base[1] or 'its kernel'} in "
                                   f"base, {head[0]} {head[1] or 'its kernel'} in head; the ratio "
                                   f"({cv.base_vendor_ratio} → {cv.vendor_ratio}) is re-baselined, not gated")
    return True


def judge_ratio(cv, base_ratio, head_ratio, rule, platform: Platform, kernels=None):
    """The vendor-ratio rules on one case (verdict.CaseVerdict): a floor on head's ratio, a maximum drop from
    base's; a case whose vendor kernel changed is re-baselined, one the vendor has no kernel for is not judged.
    The vendor is the one of the case's cache (Platform.vendor_for): both sides of a ratio ran the query and cache
    dtypes of the case's key (measure/metrics.add_metrics divides within one point)."""
    cv.vendor_ratio = head_ratio
    cv.base_vendor_ratio = base_ratio
    heads, q_len, kv_dtype = cv.case[4], cv.case[5], cv.case[6]
    v = platform.vendor_for(kv_dtype)
    vendor = v.impl
    keys = ("fp8_vendor.heads", "fp8_vendor.q_len_heads") if v is platform.fp8_vendor else \
        ("vendor_heads", "vendor_q_len_heads")
    has_kernel = v.has_kernel(heads, q_len)
    if has_kernel and head_ratio is not None and vendor_changed(cv, vendor, kernels):
        return
    if heads not in v.heads:
        cache = f" for a {kv_dtype} cache" if v is platform.fp8_vendor else ""
        warn(cv, Kind.NO_VENDOR_KERNEL, f"no vendor ratio: {vendor} has no {heads}-head kernel{cache} (perf.yml "
                                         f"{keys[0]} {list(v.heads)}); gated on latency alone")
        return
    if not has_kernel:
        warn(cv, Kind.NO_VENDOR_KERNEL, f"no vendor ratio: {vendor} has no {heads}-head kernel for {q_len} query "
                                         f"tokens (perf.yml {keys[1]} {list(v.q_len_heads)}); gated on latency "
                                         "alone")
        return
    if head_ratio is None:  # a gated case the vendor rules cannot judge must not pass
        fail(cv, Kind.NO_RATIO, f"no vendor ratio in the head results: {vendor} was not measured at this "
                                 f"point (skipped, failed, or its dtype is not one {vendor} takes)", Status.ERROR)
        return
    if not positive([r for r in (base_ratio, head_ratio) if r is not None]):
        fail(cv, Kind.BAD_RATIO, f"vendor ratio not a finite number > 0 (base {base_ratio}, head {head_ratio})",
              Status.ERROR)
        return
    if head_ratio < rule.floor and base_ratio is not None and base_ratio < rule.floor:
        # the gate judges the change: a gap main already has is reported; max_drop still guards it
        warn(cv, Kind.KNOWN_GAP, f"vendor ratio {head_ratio:.2f} below the floor {rule.floor:.2f}, as on base "
                                  f"({base_ratio:.2f}): a known gap, not this change")
    elif head_ratio < rule.floor:
        cv.below_floor = True
        fail(cv, Kind.BELOW_FLOOR, f"vendor ratio {head_ratio:.2f} below the floor {rule.floor:.2f}")
    if base_ratio is not None and head_ratio < base_ratio * (1 - rule.max_drop):
        cv.flagged = cv.over_threshold = cv.ratio_dropped = True
        fail(cv, Kind.RATIO_DROP, f"vendor ratio dropped {1 - head_ratio / base_ratio:.1%} "
                                   f"({base_ratio:.3f} → {head_ratio:.3f}; max drop {rule.max_drop:.0%})")

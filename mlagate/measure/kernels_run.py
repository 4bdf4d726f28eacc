"""Which GPU kernels a launch runs, by name: a vendor's ratio is only comparable between two records when
the same kernels ran (decide/vendor_ratio.py). torch's profiler (CUPTI on CUDA, roctracer on ROCm) watches one
untimed call, after the case's samples are taken, and the names go into the case's result and, per
"dtype/heads" row, into the record's environment beside the vendor's version."""

import hashlib

from mlagate.measure.aiter_dispatch import kernel_row

# what the profiler lists beside kernels: copies and fills, which name no vendor kernel
NOT_KERNELS = ("Memcpy", "Memset")


def kernels_run(launch) -> tuple:
    """The names of the kernels one call of ``launch`` ran, each once, in the order they first ran; none where this
    torch cannot watch GPU kernels (a build without CUPTI or roctracer, as the MI300X rehearsal's CPU torch)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, supported_activities

    if ProfilerActivity.CUDA not in supported_activities():
        return ()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as watched:
        launch()
        torch.cuda.synchronize()
    names = (e.name for e in watched.events() if e.device_type == DeviceType.CUDA)
    return tuple(dict.fromkeys(n for n in names if not n.startswith(NOT_KERNELS)))


def short_name(name: str) -> str:
    """A kernel's function name without its template arguments and parameters (FlashMLA's run to 4 KB), and a
    digest of the whole name, so two instantiations of one template still read as different kernels."""
    words = name.split("<", 1)[0].split("(", 1)[0].split() or [name]  # "void ns::f<...>(...)" -> ["void", "ns::f"]
    return f"{words[-1].rsplit('::', 1)[-1]}#{hashlib.sha1(name.encode()).hexdigest()[:8]}"


def by_row(rows, vendors: dict) -> dict:
    """``vendors`` (environment.vendors) with each vendor's kernels that ran, per "dtype/heads[/s_q=N]" row
    (aiter_dispatch.kernel_row, the key decide/vendor_ratio.py reads): ``{"kernels": {row: {"ran": [names],
    "kernel": "a + b"}}}``, every case of the row's names once; a row whose ``kernel`` the vendor's dispatch
    already names (aiter's table) keeps it and gains ``ran``. ``rows`` are CaseResult.to_dict()s."""
    ran = {}
    for r in rows:
        if r.get("impl") in vendors and r.get("kernels"):
            row = kernel_row(r["dtype"], r["heads"], r.get("q_len", 1), r.get("kv_dtype"))
            seen = ran.setdefault(r["impl"], {}).setdefault(row, {})
            seen.update(dict.fromkeys(r["kernels"]))
    out = {name: dict(entry) for name, entry in vendors.items()}
    for vendor, rows_ran in ran.items():
        table = {row: dict(v) for row, v in (out[vendor].get("kernels") or {}).items()}
        for row, names in rows_ran.items():
            entry = table.setdefault(row, {})
            entry["ran"] = list(names)
            entry.setdefault("kernel", " + ".join(short_name(n) for n in names))
        out[vendor]["kernels"] = table
    return out

"""What the asv benchmarks call: parameters, the device-event clock, prepared
launches and the one-process grid measurement. No statistics and no file I/O."""

import functools
import math
import os

from mlagate import config as config_mod
from mlagate.measure import EventClock, platform

CONFIG = config_mod.load(os.environ.get("MLAGATE_CONFIG"))
_timing = CONFIG.timing
clock = EventClock(cold_l2=_timing.cold_l2)
repeat = (_timing.min_samples, _timing.asv_max_samples, _timing.asv_rep_ms / 1e3)
warmup_s = _timing.warmup_ms / 1e3


def preload():
    """Import torch up front (~1.7 s): under asv's forkserver every case runs
    in a fork of this process and skips that import. Not tilelang: its import
    asks the driver for devices, and where torch cannot answer through NVML or
    amd-smi that initialises CUDA/HIP here, and no forked child could use the GPU."""
    import torch  # noqa: F401


def _env_list(name, default):
    value = os.environ.get(name)
    return tuple(v.strip() for v in value.split(",") if v.strip()) if value else tuple(default)


def cases():
    grid = os.environ.get("MLAGATE_GRID", "full")
    impls = _env_list("MLAGATE_IMPLS", CONFIG.implementations)
    dtypes = _env_list("MLAGATE_DTYPES", CONFIG.grid.dtypes)
    return CONFIG.grid.cases(grid, impls, dtypes)


def params():
    """asv params (a list per parameter, cartesian product) and their names."""
    cs = cases()

    def unique(values):
        return list(dict.fromkeys(values))

    return ([unique(c.impl for c in cs), unique(c.batch for c in cs), unique(c.seqlen for c in cs),
             unique(c.dtype for c in cs)], ["impl", "batch", "seqlen", "dtype"])


@functools.lru_cache(maxsize=None)
def _inputs(batch, seqlen, dtype):
    import torch

    from mlagate.harness import Inputs

    case = config_mod.Case("", batch, seqlen, dtype, CONFIG.grid.heads)
    return Inputs(case, torch.device("cuda", torch.cuda.current_device()))


@functools.lru_cache(maxsize=None)
def prepared(impl, batch, seqlen, dtype):
    """A checked, zero-argument launch (cached: asv re-runs setup per sample)."""
    import torch

    from mlagate import impls
    from mlagate.harness import checked_launch

    if not torch.cuda.is_available():
        raise NotImplementedError("no CUDA or ROCm GPU is visible to torch")
    inputs = _inputs(batch, seqlen, dtype)
    try:  # WrongResult propagates and fails the benchmark: never timed
        return checked_launch(impl, inputs, inputs.tensors[0].device)[0]
    except impls.Unavailable as e:
        raise NotImplementedError(str(e)) from None


def _key(impl, batch, seqlen, dtype):
    return f"{impl}|{batch}|{seqlen}|{dtype}"


def measure_grid() -> dict:
    """Every case of this run in one worker process, with vendor ratios."""
    import torch

    from mlagate import bench

    if not torch.cuda.is_available():
        return {}
    rows = bench.add_metrics(bench.run_cases(cases(), CONFIG.timing), vendor=CONFIG.platform(platform()).vendor)
    return {_key(r["impl"], r["batch"], r["seqlen"], r["dtype"]): r for r in rows}


def require_measured(grid, impl, batch, seqlen, dtype):
    row = grid.get(_key(impl, batch, seqlen, dtype))
    if row is None:
        raise NotImplementedError("not measured (no GPU, or not in this run's grid)")
    if row["status"] == "skipped":
        raise NotImplementedError(row["reason"])
    if row["status"] == "failed":
        raise RuntimeError(f"{impl} b={batch} s={seqlen} {dtype} failed: {row['reason']}")


def metric(grid, name, impl, batch, seqlen, dtype) -> float:
    """The metric, or NaN where it does not exist (no vendor in this run): never 0."""
    value = grid[_key(impl, batch, seqlen, dtype)].get(name)
    return math.nan if value is None else value

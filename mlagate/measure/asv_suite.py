"""What the asv benchmarks call: parameters, the device-event clock, prepared
launches and the one-process grid measurement. No statistics and no file I/O."""

import functools
import math
import os

from mlagate import config as config_mod
from mlagate.case import PARAM_NAMES, Case, RunStatus
from mlagate.measure.timer import EventClock
from mlagate.measure.environment import device, platform

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
    return CONFIG.cases(grid, impls, platform(), _env_list("MLAGATE_DTYPES", ()))


def params():
    """asv params (a list per parameter, cartesian product) and their names."""
    cs = cases()

    def unique(values):
        return list(dict.fromkeys(values))

    return ([unique(c.impl for c in cs), unique(c.batch for c in cs), unique(c.seqlen for c in cs),
             unique(c.dtype for c in cs), unique(c.heads for c in cs)], list(PARAM_NAMES))


@functools.lru_cache(maxsize=None)
def _inputs(batch, seqlen, dtype, heads):
    from mlagate.measure.harness import Inputs

    case = Case("", batch, seqlen, dtype, heads)
    return Inputs(case, device())


@functools.lru_cache(maxsize=None)
def prepared(impl, batch, seqlen, dtype, heads):
    """A checked, zero-argument launch (cached: asv re-runs setup per sample)."""
    import torch

    from mlagate.measure import impls
    from mlagate.measure.harness import checked_launch

    if not torch.cuda.is_available():
        raise NotImplementedError("no CUDA or ROCm GPU is visible to torch")
    if Case(impl, batch, seqlen, dtype, heads) not in cases():  # asv runs the whole product
        raise NotImplementedError("not in this run's grid (e.g. a head count the vendor kernel lacks)")
    inputs = _inputs(batch, seqlen, dtype, heads)
    try:  # WrongResult propagates and fails the benchmark: never timed
        return checked_launch(impl, inputs, inputs.tensors[0].device)[0]
    except impls.Unavailable as e:
        raise NotImplementedError(str(e)) from None


def measure_grid() -> dict:
    """Every case of this run in one worker process, with vendor ratios: {Case: CaseResult}."""
    import torch

    from mlagate.measure import grid

    if not torch.cuda.is_available():
        return {}
    results = grid.add_metrics(grid.run_cases(cases(), CONFIG.timing), vendor=CONFIG.platform(platform()).vendor)
    return {r.case: r for r in results}


def require_measured(measured, *key):
    result = measured.get(Case(*key))
    if result is None:
        raise NotImplementedError("not measured (no GPU, or not in this run's grid)")
    if result.status == RunStatus.SKIPPED:
        raise NotImplementedError(result.reason)
    if result.status == RunStatus.FAILED:
        raise RuntimeError(f"{result.case.label()} failed: {result.reason}")


def metric(measured, name, *key) -> float:
    """The metric, or NaN where it does not exist (no vendor in this run): never 0."""
    value = getattr(measured[Case(*key)], name)
    return math.nan if value is None else value

"""What the asv benchmarks call: parameters, one measurement of the grid per record, and the
clock that hands its samples to asv. No statistics here."""

import functools
import json
import math
import os
import sys
import time

from mlagate import config as config_mod
from mlagate import progress
from mlagate.case import PARAM_NAMES, Case, RunStatus
from mlagate.measure.environment import platform

# asv's own time per case after the measuring pass (every benchmark and parameter set replayed in one
# process, measure.asv_one_process: milliseconds; 0.2 s when it forked a process for each, docs/measurements.md,
# fourth session of 2026-12-01): the record's deadline keeps it free, so that the whole record fits
# timing.record_s.
ASV_S_PER_CASE = 0.02
# Set by `mlagate record`: when the record must end (epoch seconds), where every case's result
# (clocks, dropped windows, skipped cases) goes beside asv's results, the GPUs to measure on
# (`--gpus`) and this runner's share of the grid points (`--shard I/N`).
DEADLINE_ENV, CASES_ENV, GPUS_ENV, SHARD_ENV = "MLAGATE_DEADLINE", "MLAGATE_CASES_OUT", "MLAGATE_GPUS", "MLAGATE_SHARD"


@functools.cache
def config():
    """The recorded commit's perf.yml (`mlagate record` points MLAGATE_CONFIG at it)."""
    return config_mod.load(os.environ.get("MLAGATE_CONFIG"))


def preload():
    """Import torch up front (~1.7 s): under asv's forkserver every case runs
    in a fork of this process and skips that import. Not tilelang: its import
    asks the driver for devices, and where torch cannot answer through NVML or
    amd-smi that initialises CUDA/HIP here, and no forked child could use the GPU."""
    import torch  # noqa: F401


def _env_list(name, default):
    value = os.environ.get(name)
    return tuple(v.strip() for v in value.split(",") if v.strip()) if value else tuple(default)


def cases(sharded: bool = True):
    """This run's cases; with --shard, only this runner's unless ``sharded`` is False."""
    from mlagate.measure.shards import parse_shard, runner_shard

    grid = os.environ.get("MLAGATE_GRID", "full")
    impls = _env_list("MLAGATE_IMPLS", config().implementations)
    cs = config().cases(grid, impls, platform(), _env_list("MLAGATE_DTYPES", ()))
    if sharded and os.environ.get(SHARD_ENV):
        mine, shards = parse_shard(os.environ[SHARD_ENV])
        cs = [c for c in cs if runner_shard(c, shards) == mine]
    return cs


def params(workloads: bool = False):
    """asv params (a list per parameter, cartesian product) and their names: of the dense grid's
    cases, or of the workloads' (which add the workload parameter). Empty lists: no such case. The
    workloads' are the whole grid's under --shard too (a runner that owns none of their points still
    has their classes, which `mlagate results merge` needs in every shard; the others' are skipped)."""
    cs = [c for c in cases(sharded=not workloads) if c.paged == workloads]
    names = PARAM_NAMES if workloads else PARAM_NAMES[:-1]
    return [list(dict.fromkeys(getattr(c, name) for c in cs)) for name in names], list(names)


def measure_grid() -> dict:
    """Every case of this run, once, in one worker process: {Case: CaseResult}. asv's setup_cache
    for every benchmark, so latency samples, TFLOPs and vendor ratios are one measurement. The
    record-budget cases (what the gate reads) go first, each grid point's together."""
    import torch

    from mlagate.measure import grid, metrics, precompile

    if not torch.cuda.is_available():
        return {}
    cs, here = cases(), platform()
    cfg = config()
    budgets = {c: cfg.budget_for(c.impl, here) for c in cs}
    ordered = sorted(cs, key=lambda c: (budgets[c] != "record", grid.point(c)))
    deadline = float(os.environ[DEADLINE_ENV]) if os.environ.get(DEADLINE_ENV) else None
    if deadline is not None:  # measuring stops in time for asv to store every case, a skipped one too
        deadline -= ASV_S_PER_CASE * len(cases(sharded=False))
    gpus = grid.parse_gpus(os.environ.get(GPUS_ENV))
    # stderr: asv shows it (--show-stderr), and keeps a benchmark's stdout to itself
    said, spent, start = [], {}, time.monotonic()  # what the pass says: the compile's summary, where its time went

    def say(line):
        _to_stderr(line)
        said.append(line)

    with precompile.ahead(ordered, precompile.default_jobs(len(gpus or [0])), echo=say) as compiled:
        results = grid.run_cases(ordered, cfg.timing, budgets=[budgets[c] for c in ordered], deadline=deadline,
                                 gpus=gpus, compiled=compiled, spent=spent)
    say(progress.time_spent(spent, time.monotonic() - start))
    results = metrics.add_metrics(results, vendor=cfg.platform(here).vendor_impl)
    if os.environ.get(CASES_ENV):
        write_cases(os.environ[CASES_ENV], results, said)
    return {r.case: r for r in results}


def _to_stderr(line):
    print(line, file=sys.stderr, flush=True)


def write_cases(path, results, said=()):
    """Every case's status, metrics and sampling windows (the samples themselves are in asv's results), and the
    lines the measuring pass said (asv keeps a setup_cache's stderr to itself: `mlagate record` prints them)."""
    rows = []
    for r in results:
        row = r.to_dict()
        if row.get("samples"):
            row["samples"] = {k: v for k, v in row["samples"].items() if k != "times_ms"}
        rows.append(row)
    with open(path, "w") as f:
        json.dump({"results": rows, "said": list(said)}, f)


class ReplayClock:
    """asv's timer for TimeDecode: asv reads it around each call of the benchmark, and each call
    advances it by the next sample measure_grid took, so the samples asv stores are exactly
    time_gpu's. Loading the same case again (asv re-runs setup between samples) keeps the place; once
    every sample was handed out, a new run of the case starts over (one process runs every case)."""

    def __init__(self):
        self.total_s, self.case, self._samples, self._next = 0.0, None, (), 0

    def __call__(self) -> float:
        return self.total_s

    def load(self, case, samples_s) -> int:
        if case != self.case or self._next >= len(self._samples):
            self.case, self._samples, self._next = case, tuple(samples_s), 0
        self.total_s = 0.0  # asv re-runs setup before each sample: (0 + x) - 0 is x to the bit
        return len(self._samples)

    def advance(self):
        self.total_s += self._samples[self._next]  # IndexError: asv asked for more samples than exist
        self._next += 1


clock = ReplayClock()


def require_measured(measured, *key):
    result = measured.get(Case(*key))
    if result is None:
        raise NotImplementedError("not measured (no GPU, or not in this run's grid)")
    if result.status == RunStatus.SKIPPED:
        raise NotImplementedError(result.reason)
    if result.status == RunStatus.FAILED:
        raise RuntimeError(f"{result.case.label()} failed: {result.reason}")
    return result


def replay(measured, *key) -> int:
    """Load a measured case's samples into the clock; their count (asv's ``repeat``)."""
    result = require_measured(measured, *key)
    return clock.load(result.case, [t / 1e3 for t in result.samples.times_ms])


def metric(measured, name, *key) -> float:
    """The metric, or NaN where it does not exist (no vendor in this run): never 0."""
    value = getattr(measured[Case(*key)], name)
    return math.nan if value is None else value

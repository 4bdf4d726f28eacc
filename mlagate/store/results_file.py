"""One asv results file, read and checked: {benchmark: {case: Entry}}, every value refused
unless it is what mlagate's benchmarks record, naming the file, benchmark and case.

asv's own reader (``asv.results.Results.load`` and its ``get_result_*`` getters) is not
used: the getters fit each column to the parameter grid (a short or null result column
reads as failed cases, a long one is cut) and it reads Infinity, so it passes files the gate
must refuse, and refusing them would mean reading the raw JSON again; so the file is read
here, in asv 0.6's ``result_columns`` layout, and every field is checked.
"""

import ast
import itertools
import math
import re
from dataclasses import dataclass
from pathlib import Path

from mlagate.case import DENSE, PARAM_NAMES, Case, case_label
from mlagate.hardware import ELEMENT_BYTES
from mlagate.json_reader import (
    LATENCY_CEILING_S,
    LATENCY_FLOOR_S,
    RATIO_CEILING,
    TFLOPS_CEILING,
    out_of_bounds,
)
from mlagate.measure.metrics import flops
from mlagate.store.errors import StoreError, read_store_json

BENCH_TIME = "mla_decode.TimeDecode.time_decode"
BENCH_TFLOPS = "mla_decode.Throughput.track_tflops"
BENCH_RATIO = "mla_decode.Throughput.track_vendor_ratio"
# The workloads' benchmarks (their own classes, so asv's parameter product stays the cases that exist):
# read into the dense benchmark of the same measure, their keys told apart by the workload.
WORKLOAD_BENCH = {"mla_decode.TimeWorkload.time_decode": BENCH_TIME,
                  "mla_decode.WorkloadThroughput.track_tflops": BENCH_TFLOPS,
                  "mla_decode.WorkloadThroughput.track_vendor_ratio": BENCH_RATIO}
# What a parameter recorded before it existed reads as: before heads, 128 heads; before q_len, one query
# token per sequence; before kv_dtype, a cache in the query's dtype (Case's ""); before workloads, the dense grid.
LEGACY_VALUES = {"heads": 128, "q_len": 1, "kv_dtype": "", "workload": DENSE}


@dataclass(frozen=True)
class Entry:
    """One benchmark x case: 'ok' with a value (seconds for times), 'failed'
    (asv stored null) or 'skipped' (asv stored NaN)."""

    status: str
    value: float | None = None
    samples: tuple | None = None  # raw samples (seconds), when recorded


def ok_value(entry: Entry | None) -> float | None:
    """The entry's value if it was measured; None if absent, failed or skipped."""
    return entry.value if entry is not None and entry.status == "ok" else None


class _Invalid(ValueError):
    """A results file that parses as JSON but holds what asv never writes; the message says where."""


# The benchmarks mlagate records measure positive quantities: seconds, TFLOPs, a ratio of TFLOPs
# (asv_suite.metric gives NaN, never 0, where one does not exist).
POSITIVE = (BENCH_TIME, BENCH_TFLOPS, BENCH_RATIO)
# ... and physical ones: each within its bounds (json_reader's limits), per value and per raw sample.
BOUNDS = {BENCH_TIME: (LATENCY_FLOOR_S, LATENCY_CEILING_S, "s"), BENCH_TFLOPS: (1e-6, TFLOPS_CEILING, " TFLOPs"),
          BENCH_RATIO: (1 / RATIO_CEILING, RATIO_CEILING, "")}
_KEY_TYPES = (str, int, int, str, int, int, str, str)  # PARAM_NAMES' types
_FULL_HASH = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def case_keys(raw_params) -> list:
    """asv's parameter lists (values as Python literals) -> case keys, in asv's result order.
    A parameter a file lacks reads as LEGACY_VALUES' (heads, q_len, kv_dtype and workload came in that order;
    the dense benchmarks have no workload parameter): four lists are (impl, batch, seqlen, dtype), five add
    heads, six add q_len or, in a workload benchmark recorded before q_len, the workload (told by its type:
    quoted names, where q_len's are integers), seven add kv_dtype or, recorded before kv_dtype, the workload
    (told by its values: dtype names, where a workload's is its name and digest)."""
    if not isinstance(raw_params, list) or not all(isinstance(v, list) for v in raw_params):
        raise _Invalid(f"params must be a list of lists, got {raw_params!r:.80}")
    if not 4 <= len(raw_params) <= len(PARAM_NAMES):
        raise ValueError(f"{len(raw_params)} parameters, expected {', '.join(PARAM_NAMES)}")
    names = list(PARAM_NAMES[:len(raw_params)])
    if len(raw_params) == 6 and raw_params[5] and all(_is_name(v) for v in raw_params[5]):
        names[5] = "workload"
    if len(raw_params) == 7 and not all(_literal(v) in ELEMENT_BYTES for v in raw_params[6]):
        names[6] = "workload"
    by_name = dict(zip(names, raw_params))
    raw_params = [by_name.get(name, [repr(LEGACY_VALUES.get(name))]) for name in PARAM_NAMES]
    values = [[_param(name, kind, v) for v in vs] for name, kind, vs in zip(PARAM_NAMES, _KEY_TYPES, raw_params)]
    keys = [Case(*key).key for key in itertools.product(*values)]  # a legacy "" kv_dtype: the query's
    if len(set(keys)) != len(keys):
        raise _Invalid(f"params repeat a value: {raw_params!r:.120}")
    return keys


def _is_name(text) -> bool:
    return isinstance(_literal(text), str)


def _literal(text):
    try:
        return ast.literal_eval(text) if isinstance(text, str) else None
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def _param(name, kind, text):
    """One parameter value: a Python literal of its type (a case key must match across commits)."""
    value = ast.literal_eval(text) if isinstance(text, str) else None
    if not isinstance(value, kind) or isinstance(value, bool) or (kind is int and value < 1):
        raise _Invalid(f"parameter {name}: {text!r} is not a {'positive integer' if kind is int else 'quoted name'}")
    if name == "kv_dtype" and value not in ("", *ELEMENT_BYTES):
        raise _Invalid(f"parameter kv_dtype: {value!r} is not a dtype ({', '.join(ELEMENT_BYTES)})")
    return value


def _number(value, positive: bool) -> bool:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an int past float's range
        return False
    return finite and (value > 0 or not positive)


def _entry(where: str, value, samples, positive: bool, bounds=None) -> Entry:
    """One case: null is asv's 'failed', NaN its 'skipped'; anything else must be a finite
    number (positive for mlagate's benchmarks, within ``bounds`` (low, high, unit) for its
    measures), and so must every raw sample."""
    if value is None:
        return Entry("failed")
    if isinstance(value, float) and math.isnan(value):
        return Entry("skipped")
    if not _number(value, positive):
        raise _Invalid(f"{where}: value {value!r:.60} is not a {'positive ' if positive else ''}finite number")
    if bounds and out_of_bounds(value, *bounds[:2]):
        raise _Invalid(f"{where}: value {value!r:.40} is outside the physical bounds [{bounds[0]:g}, "
                       f"{bounds[1]:g}]{bounds[2]}")
    if samples is None or samples == []:
        return Entry("ok", float(value))
    if not isinstance(samples, list):
        raise _Invalid(f"{where}: samples must be a list, got {samples!r:.60}")
    bad = next((i for i, s in enumerate(samples) if not _number(s, positive)), None)
    if bad is not None:
        raise _Invalid(f"{where}: sample {bad} of {len(samples)} is {samples[bad]!r:.60}, not a "
                       f"{'positive ' if positive else ''}finite number")
    bad = next((i for i, s in enumerate(samples) if bounds and out_of_bounds(s, *bounds[:2])), None)
    if bad is not None:
        raise _Invalid(f"{where}: sample {bad} of {len(samples)} is {samples[bad]!r:.40}, outside the physical "
                       f"bounds [{bounds[0]:g}, {bounds[1]:g}]{bounds[2]}")
    return Entry("ok", float(value), tuple(float(s) for s in samples))


def _column(row, i, name, keys):
    """A per-case column of one benchmark's row: a list with one item per case (or None if absent)."""
    values = row[i] if i is not None and i < len(row) else None
    if values is not None and (not isinstance(values, list) or len(values) != len(keys)):
        raise _Invalid(f"{name}: {len(values) if isinstance(values, list) else type(values).__name__} "
                       f"where {len(keys)} per-case values go")
    return values


def _benchmark(name, row, columns) -> dict:
    if not isinstance(row, list):
        raise _Invalid(f"{name}: a {type(row).__name__} where asv writes a list of columns")
    params = row[columns.index("params")]
    keys = case_keys(params)
    # a workload benchmark names its workload; the grid's are dense (none of mlagate's writes otherwise)
    if name in WORKLOAD_BENCH and any(k[-1] == DENSE for k in keys):
        raise _Invalid(f"{name}: params {params!r:.120} do not name a workload ({', '.join(PARAM_NAMES)})")
    if name not in WORKLOAD_BENCH and any(k[-1] != DENSE for k in keys):
        raise _Invalid(f"{name}: params {params!r:.120} name a workload; workloads have their own benchmarks")
    results = _column(row, columns.index("result"), f"{name} results", keys)
    samples = _column(row, columns.index("samples") if "samples" in columns else None, f"{name} samples", keys)
    if results is None:
        raise _Invalid(f"{name}: no results")
    measure = WORKLOAD_BENCH.get(name, name)
    return {key: _entry(f"{name} {case_label(key)}", value, samples[i] if samples else None, measure in POSITIVE,
                        BOUNDS.get(measure))
            for i, (key, value) in enumerate(zip(keys, results))}


# A case's TFLOPs and latency come from one measurement (tflops = flops / median latency): a record
# where they disagree by more than this was not measured as one, and its ratios cannot be trusted.
TFLOPS_TOLERANCE = 0.01


def _agree(benchmarks: dict):
    """Refuse a case whose recorded TFLOPs is not its work over its recorded median latency."""
    times, rates = benchmarks.get(BENCH_TIME, {}), benchmarks.get(BENCH_TFLOPS, {})
    for key, rate in rates.items():
        seconds, tflops = ok_value(times.get(key)), ok_value(rate)
        if seconds is None or tflops is None:
            continue
        _, batch, seqlen, _, heads, q_len, _, _ = key
        implied = flops(batch, heads, seqlen, q_len) / seconds / 1e12
        if abs(tflops / implied - 1) > TFLOPS_TOLERANCE:
            raise _Invalid(f"{case_label(key)}: {tflops:.4g} TFLOPs recorded, but its median latency "
                           f"{seconds * 1e6:.4g} us implies {implied:.4g} (off by more than "
                           f"{TFLOPS_TOLERANCE:.0%}): TFLOPs and latency were not measured as one")


def _header(data) -> tuple:
    """(commit, date, result_columns) of a results file, each checked."""
    if not isinstance(data, dict):
        raise _Invalid(f"a JSON {type(data).__name__}, not an object")
    commit, date, columns = data["commit_hash"], data.get("date") or 0, data["result_columns"]
    if not isinstance(commit, str) or not _FULL_HASH.fullmatch(commit):
        raise _Invalid(f"commit_hash {commit!r:.60} is not a full commit hash")
    if not _number(date, positive=False) or date < 0:
        raise _Invalid(f"date {date!r:.60} is not a timestamp")
    if not isinstance(columns, list) or not {"result", "params"} <= set(map(str, columns)):
        raise _Invalid(f"result_columns {columns!r:.80} lack result and params")
    if not isinstance(data["results"], dict):
        raise _Invalid(f"results: a {type(data['results']).__name__}, not an object")
    return commit, int(date), columns


def parse_results_file(path) -> tuple:
    """(commit, date, {bench: {case: Entry}}) from one asv results file; StoreError naming
    the path (and the benchmark and case) if it is not a complete, valid asv results file."""
    path = Path(path)
    data, infinite = read_store_json(path)
    try:
        commit, date, columns = _header(data)
        benchmarks = {}
        for name, row in data["results"].items():
            # disjoint: _benchmark refuses a workload benchmark's dense case and the grid's workload one
            benchmarks.setdefault(WORKLOAD_BENCH.get(name, name), {}).update(_benchmark(name, row, columns))
        if infinite:
            raise _Invalid(f"{infinite}: an infinite number")
        _agree(benchmarks)
        return commit, date, benchmarks
    except _Invalid as e:
        raise StoreError(f"{path}: not a valid asv results file: {e}") from None
    except (KeyError, IndexError, TypeError, ValueError, SyntaxError, MemoryError, RecursionError) as e:
        raise StoreError(f"{path}: not a complete asv results file ({type(e).__name__}: {e})") from None

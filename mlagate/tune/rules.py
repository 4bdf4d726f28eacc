"""`mlagate tune`'s decisions, per shape: which candidates launch the same kernel (measured once), which
candidate wins, and whether the committed table is beaten (the drift watch); and whether an earlier run's
files in --out measured what this run would. Pure: it reads plans (mla_decode.Plan), results (CaseResult) and
records it is given; only shape_plan imports the kernel (and with it tilelang), when it is called."""

from dataclasses import dataclass
from enum import StrEnum

from mlagate.case import Case, CaseResult, RunStatus
from mlagate.json_reader import LATENCY_CEILING_S, LATENCY_FLOOR_S, TFLOPS_CEILING, TFLOPS_FLOOR, out_of_bounds


def launch_key(plan) -> tuple:
    """What a launch really runs: the split fitted to the sequence, the head block and threads the plan
    gave, and every other field of the config (not its name, nor the fields the plan resolved)."""
    rest = plan.config.with_(name="", num_split=0, block_H=0, threads=0)
    return plan.num_split, plan.split_len, plan.block_H, plan.threads, rest


def duplicates(plans: dict) -> dict:
    """{impl: the first impl of the same launch} for each later candidate of ``plans`` ({impl: Plan},
    in candidate order) whose launch an earlier one already makes."""
    first, out = {}, {}
    for impl, plan in plans.items():
        key = launch_key(plan)
        if key in first:
            out[impl] = first[key]
        else:
            first[key] = impl
    return out


@dataclass(frozen=True)
class ShapePlan:
    shape: object  # mla_decode.Shape
    candidates: dict  # impl -> TileConfig to lower and measure, in candidate order
    duplicates: dict  # impl -> the candidate that makes the same launch
    refused: dict  # impl -> why the kernel cannot plan this shape (e.g. heads not a multiple of block_H)
    default: str
    committed: str  # the table's config for this shape, else the default

    @property
    def folder(self) -> str:
        s = self.shape
        return f"b{s.batch}-s{s.seqlen}-h{s.heads}" + (f"-sq{s.s_q}" if s.s_q != 1 else "") + f"-{s.dtype}"

    def case(self, impl: str) -> Case:
        s = self.shape
        return Case(impl, s.batch, s.seqlen, s.dtype, s.heads, s.s_q)


def shape_plan(shape, default, space, committed: dict, arch: str) -> ShapePlan:
    """A shape's candidates: the family default, the committed table's config (``committed``: {shape_key:
    tuned.Entry}) and the space, in that order; those that launch the same kernel once."""
    from mlagate.kernels import mla_decode, tuned

    entry = committed.get(tuned.shape_key(shape))
    mine = entry.config if entry else default
    configs = {tuned.candidate_impl(c): c for c in [default, mine, *space]}
    plans, refused = {}, {}
    for impl, config in configs.items():
        try:
            plans[impl] = mla_decode.plan(shape, config, arch)
        except ValueError as e:
            refused[impl] = f"cannot run this shape: {e}"
    dups = duplicates(plans)
    return ShapePlan(shape, {i: configs[i] for i in plans if i not in dups}, dups, refused,
                     tuned.candidate_impl(default), tuned.candidate_impl(mine))


@dataclass(frozen=True)
class Winner:
    impl: str
    result: CaseResult
    default: CaseResult | None  # the family default's result, None when it did not measure

    @property
    def gain(self) -> float | None:
        return gain(self.result, self.default)


def gain(result: CaseResult, default: CaseResult | None) -> float | None:
    """How much faster than the default: default median / this median - 1; None unless both measured."""
    if default is None or default.status != RunStatus.OK or result.status != RunStatus.OK:
        return None
    return default.median_ms / result.median_ms - 1


def _measured(result: CaseResult | None) -> bool:
    return result is not None and result.status == RunStatus.OK and bool(result.tflops)


def winner(results: dict, default: str) -> Winner | None:
    """The OK candidate of ``results`` ({impl: CaseResult}, in candidate order, duplicates resolved) with
    the most TFLOPs; a tie goes to the family default, then to the first. None when none measured."""
    best = None
    for impl, result in results.items():
        if not _measured(result):
            continue
        if best is None or result.tflops > results[best].tflops or (
                result.tflops == results[best].tflops and impl == default):
            best = impl
    if best is None:
        return None
    return Winner(best, results[best], results[default] if _measured(results.get(default)) else None)


class DriftKind(StrEnum):
    BEATEN = "beaten"  # another candidate is faster than the committed config by more than the threshold
    BROKEN = "broken"  # the committed config itself did not measure (failed, skipped, over the limit)


@dataclass(frozen=True)
class Drift:
    shape: tuple  # tuned.shape_key: (batch, seqlen, heads, dtype, s_q)
    kind: DriftKind
    committed: str  # the table's config for the shape, or the family default where the table has none
    best: str | None
    change: float | None  # BEATEN: committed median / best median - 1
    reason: str | None = None  # BROKEN: why the committed config did not measure


def drift(shape: tuple, results: dict, committed: str, best: Winner | None, threshold: float) -> Drift | None:
    """Whether the committed config of a shape no longer holds: it did not measure, or ``best`` beats it
    by more than ``threshold`` (the gate's latency threshold) in median latency."""
    mine = results.get(committed)
    if not _measured(mine):
        reason = mine.reason if mine is not None else "not measured"
        return Drift(shape, DriftKind.BROKEN, committed, best.impl if best else None, None, reason)
    if best is None or best.impl == committed:
        return None
    change = mine.median_ms / best.result.median_ms - 1
    return Drift(shape, DriftKind.BEATEN, committed, best.impl, change) if change > threshold else None


@dataclass(frozen=True)
class ShapeTune:
    """What was decided for one shape."""

    shape: tuple  # tuned.shape_key
    results: dict  # impl -> CaseResult of each candidate measured (or refused), in candidate order
    duplicates: dict  # impl -> the candidate measured for it (the same launch)
    default: str
    committed: str
    winner: Winner | None
    drift: Drift | None


def decide_shape(shape: tuple, results: dict, duplicates: dict, default: str, committed: str,
                 threshold: float) -> ShapeTune:
    """The winner among ``results`` (a duplicate cannot win: the candidate it repeats comes first), and the
    drift of the committed config, which may be a duplicate."""
    best = winner(results, default)
    resolved = {**results, **{impl: results[first] for impl, first in duplicates.items()}}
    return ShapeTune(shape, results, duplicates, default, committed, best,
                     drift(shape, resolved, committed, best, threshold))


# -- resuming: whether the files of an earlier run measured what this run would -------------------------

RECORD_KEYS = ("candidate", "config", "stage", "smem", "result")
STAGES = ("lowered", "done")  # lowered: passed the pre-filter, not measured yet; done: its result is final


def resumed_identity(saved, now: dict, where: str) -> dict:
    """The identity a run goes on with once ``saved`` (an earlier run's tune.json, read) matches ``now``;
    a run without a GPU keeps the GPU model an earlier one measured on. ValueError naming ``where`` else."""
    if not isinstance(saved, dict):
        raise ValueError(f"{where}: not a tune's identity (a JSON mapping); remove that folder to start over")
    changes = identity_changes(saved, now)
    if changes:
        raise ValueError(f"{where} is a tune of another kernel, GPU or settings ({'; '.join(changes)}); give "
                         "another --out, or remove that folder to start over")
    return {**now, "gpu": now.get("gpu") or saved.get("gpu")}


def identity_changes(saved: dict, now: dict) -> list:
    """'key: was X, now Y' for each part of a tune's identity (tune.json) that differs; a dict's changes by
    its own keys (timing.window_ms). A GPU of None (a run without a GPU only lowers) differs from none."""
    changes = []
    for key in sorted(set(saved) | set(now)):
        was, new = saved.get(key), now.get(key)
        if key == "gpu" and None in (was, new):
            continue
        if isinstance(was, dict) and isinstance(new, dict):
            changes += [f"{key}.{change}" for change in identity_changes(was, new)]
        elif was != new:
            changes.append(f"{key}: was {_short(was)}, now {_short(new)}")
    return changes


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def record_problem(record, impl: str) -> str | None:
    """What is wrong with a candidate file's content (its name is ``impl``), else None."""
    if not isinstance(record, dict) or any(key not in record for key in RECORD_KEYS):
        return f"must be a mapping with {', '.join(RECORD_KEYS)}, got {_short(record)}"
    if record["candidate"] != impl:
        return f"candidate: {record['candidate']!r} is not the file's own candidate"
    if record["stage"] not in STAGES:
        return f"stage: must be one of {', '.join(STAGES)}, got {record['stage']!r}"
    if record["smem"] is not None and type(record["smem"]) is not int:
        return f"smem: must be an integer or null, got {record['smem']!r}"
    if record["stage"] == "lowered":
        return None if record["result"] is None else "result: a lowered candidate has none yet"
    try:
        result = CaseResult.from_dict(record["result"])
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        return f"result: not a measured case ({type(e).__name__}: {e})"
    if result.status == RunStatus.OK:  # a measurement that decides must be one: NaN would pass every comparison
        for key, (low, high) in MEASURED_BOUNDS.items():
            value = getattr(result, key)
            if out_of_bounds(value, low, high):  # both floors are > 0
                return (f"result.{key}: an ok candidate's must be a finite number > 0 and within [{low:g}, "
                        f"{high:g}], got {_short(value)}")
    return None


# An ok candidate's measured numbers (json_reader's physical limits, in the candidate file's units: ms, TFLOPs).
MEASURED_BOUNDS = {"median_ms": (LATENCY_FLOOR_S * 1e3, LATENCY_CEILING_S * 1e3),
                   "tflops": (TFLOPS_FLOOR, TFLOPS_CEILING)}

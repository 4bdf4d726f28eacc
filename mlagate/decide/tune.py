"""`mlagate tune`'s decisions, per shape: which candidates launch the same kernel (measured once), which
candidate wins, and whether the committed table is beaten (the drift watch). Pure: it reads plans
(mla_decode.Plan) and results (CaseResult) it is given, and imports neither torch nor tilelang."""

from dataclasses import dataclass
from enum import StrEnum

from mlagate.case import CaseResult, RunStatus


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
class Winner:
    impl: str
    result: CaseResult
    default: CaseResult | None  # the family default's result, None when it did not measure

    @property
    def gain(self) -> float | None:
        """How much faster than the default: default median / winner median - 1."""
        if self.default is None or self.default.status != RunStatus.OK:
            return None
        return self.default.median_ms / self.result.median_ms - 1


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
    shape: tuple  # tuned.shape_key: (batch, seqlen, heads, dtype)
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

"""`mlagate bisect`'s pipeline: which first-parent commit between good and bad made the kernels slower.

Each commit it looks at goes through the normal `record` path (its latency samples land in the history,
only for the drifting implementations and dtypes) and then through the interleaved re-measure against
good, whose change decides (mlagate/bisect/rules.py). A commit whose record or re-measure fails (does not
build, wrong result) is skipped and named. Without --good, good is the recorded main commit with the best
median of the case that drifted most among the last gate.drift.lookback: where the drift warning looks.
"""

import json
from dataclasses import asdict
from pathlib import Path

from mlagate import gitops, progress
from mlagate.atomic import output_set
from mlagate.bisect import rules as bisect
from mlagate.case import Case
from mlagate.config import Config
from mlagate.decide import acceptance, verdict
from mlagate.gitops import git
from mlagate.measure.impls import TILELANG_PREFIX  # only the TileLang kernels change between commits
from mlagate.measure.summary import median
from mlagate.store.errors import GateError, StoreError
from mlagate.store.results import Store
from mlagate.store.results_file import BENCH_TIME


def first_parent_commits(good: str, bad: str) -> list:
    """good, then every first-parent commit after it up to bad."""
    commits = [good, *git("rev-list", "--first-parent", "--reverse", f"{good}..{bad}").split()]
    if commits[-1] != bad:
        raise GateError(f"{bad[:10]} is not a first-parent descendant of {good[:10]}: nothing to bisect")
    return commits


def _medians(results) -> dict:
    return {Case(*key): median(e.samples) for key, e in results.entries(BENCH_TIME).items()
            if key[0].startswith(TILELANG_PREFIX) and e.status == "ok" and e.samples}


def measured_medians(store: Store, machine: str, name: str, commit: str) -> dict:
    """A side's TileLang medians; none is an error (a bisect that compared nothing found no drift)."""
    found = _medians(store.load(machine, commit))
    if not found:
        raise GateError(f"{store.root / machine}: {name} {commit[:10]} has no TileLang case measured with samples "
                        "(each failed, was skipped or has none): nothing to compare")
    return found


def drift(history: list, bad, max_slowdown: float, marks=()) -> tuple:
    """(good commit, drifting cases): bad's TileLang cases at least ``max_slowdown`` slower than their best
    median in ``history`` (recorded main commits before bad, from the last accepted change of each case:
    ``marks``, verdict.since_mark); good holds the best of the worst one."""
    now, worst = _medians(bad), {}
    for case, value in now.items():
        recorded = verdict.recent_medians(acceptance.since_mark(history, case.label(), marks), case.key)
        if recorded:
            best, commit = min(recorded)
            if value / best - 1 >= max_slowdown:
                worst[case] = (value / best - 1, commit)
    if not worst:
        return None, []
    good = max(worst.values())[1]
    return good, sorted(worst, key=lambda c: c.key)


def run_bisect(cfg: Config, *, bad_rev: str, results: Path, machine: str, good_rev=None, grid="quick",
               echo=print) -> tuple:
    """(bisect.Result, cases): record what is missing, re-measure, search."""
    from mlagate.gate import acceptances, commit_of, main_history, refuse_corrupt
    from mlagate.store.record import record

    store = Store(results)
    bad = commit_of(bad_rev)
    good = None if good_rev is None else commit_of(good_rev)
    for name, commit in (("bad", bad), ("good", good)) if good else (("bad", bad),):
        store.load(machine, commit)
        refuse_corrupt(store, name, commit)  # not "no GPU" to record over it: the store is append-only
    if store.load(machine, bad) is None:
        record(bad, results=store.root, machine=machine, grid=grid, time_budget_s=cfg.timing.record_s, echo=echo)
    bad_medians = measured_medians(store, machine, "bad", bad)
    if good is None:
        history = [r for r in main_history(store, machine, bad, cfg.gate.drift_lookback, strict=True)
                   if r.commit != bad]
        window = history[-cfg.gate.drift_lookback:]
        marks = acceptance.change_marks(window, acceptances(bad, bad)[0])  # main's accepted changes, from bad
        good, cases = drift(window, store.load(machine, bad), cfg.gate.drift_max_slowdown, marks)
        if good is None:
            return bisect.Result(bisect.Finding.NO_DRIFT, [bad]), []
    else:
        if store.load(machine, good) is None:
            record(good, results=store.root, machine=machine, grid=grid, time_budget_s=cfg.timing.record_s,
                   echo=echo)
        good_medians = measured_medians(store, machine, "good", good)
        changes = {c: bad_medians[c] / good_medians[c] - 1 for c in bad_medians if c in good_medians}
        if not changes:
            raise GateError(f"{store.root / machine}: good {good[:10]} and bad {bad[:10]} share no TileLang case "
                            "measured on both: nothing to compare")
        cases = sorted((c for c, change in changes.items() if change >= cfg.gate.threshold), key=lambda c: c.key)
        if not cases:  # the recorded medians' largest change, for the record
            return bisect.Result(bisect.Finding.NO_DRIFT, [good, bad], total=max(changes.values(), default=None)), []
    commits = first_parent_commits(good, bad)
    echo(f"bisecting {len(commits) - 1} commit(s) after {good[:10]} on {len(cases)} case(s): "
         + ", ".join(c.label() for c in cases))
    # a binary search measures about log2(commits) of them; the bar's total is that estimate
    with progress.bar("bisect: commits measured", total=max(1, (len(commits) - 1).bit_length())) as measured:
        change_of = _measurer(cfg, store, machine, good, cases, grid, echo, measured.advance)
        return bisect.search(commits, change_of, cfg.gate.threshold), cases


def _measurer(cfg, store, machine, good, cases, grid, echo, advance=lambda _: None):
    from mlagate.measure import interleaved
    from mlagate.measure.environment import platform
    from mlagate.measure.harness import WrongResult
    from mlagate.store.record import gpu_available, record

    if not gpu_available():  # an error, not a commit to skip: nothing here can be measured
        raise ValueError("no GPU: mlagate bisect records and re-measures on a CUDA or ROCm GPU; nothing was stored")
    impls, dtypes = sorted({c.impl for c in cases}), sorted({c.dtype for c in cases})
    cases = [cfg.case(c.key, platform()) for c in cases]  # a workload's with its pages and lengths

    def change_of(commit: str):
        advance(f"measuring {commit[:10]}")
        try:
            if store.load(machine, commit) is None:
                record(commit, results=store.root, machine=machine, grid=grid, dtypes=dtypes, impls=impls,
                       bench_regex="Time(Decode|Workload)", time_budget_s=cfg.timing.record_s, echo=echo)
            entries = store.load(machine, commit).entries(BENCH_TIME)
            broken = [c.label() for c in cases if getattr(entries.get(c.key), "status", None) != "ok"]
            if broken:
                echo(f"skip {commit[:10]}: not measured in its record ({', '.join(broken)})")
                return None
            pairs = interleaved.interleaved(cases, gitops.repository(), good, commit, cfg.timing,
                                            cfg.gate.confirm.min_rounds)
        except (StoreError, GateError, interleaved.ConfirmError, WrongResult, ValueError) as e:
            echo(f"skip {commit[:10]}: {type(e).__name__}: {e}")
            return None
        change = max(median(head) / median(base) - 1 for base, head in pairs.values())
        echo(f"{commit[:10]}: {change:+.1%} against {good[:10]} (interleaved)")
        return change

    return change_of


def write_outputs(result: bisect.Result, cases, out: Path, machine: str) -> dict:
    """bisect.md (the table and the commands to reproduce) and bisect.json."""
    lines = [f"## mlagate bisect: {result.finding}", "", result.text(), ""]
    if cases:
        lines += ["Cases: " + ", ".join(f"`{c.label()}`" for c in cases), ""]
    if result.steps:
        lines += ["| commit | change against good (interleaved) | side |", "|---|---:|---|"]
        for s in result.steps:
            side = "skipped" if s.change is None else "bad" if s.bad else "good"
            change = "—" if s.change is None else f"{s.change:+.1%}"
            lines.append(f"| `{s.commit[:10]}` | {change} | {side} |")
    if len(result.commits) > 1:
        lines += ["", "Reproduce: `mlagate bisect --good " + result.commits[0] + " --bad " + result.commits[-1]
                  + f" --machine {machine}`"]
    with output_set(out) as fresh:  # the two files of one bisect, replaced as a set
        (fresh / "bisect.md").write_text("\n".join(lines) + "\n")
        (fresh / "bisect.json").write_text(json.dumps({**asdict(result), "cases": [c.key for c in cases],
                                                       "text": result.text()}, indent=1))
    return {"markdown": out / "bisect.md", "json": out / "bisect.json"}

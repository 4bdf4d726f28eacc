"""Accepted changes: perf-accept.yml, the reviewed record that lets named cases of one commit be slower.

An entry names the change's commit (the pull request's head), the pull request, the cases (labels as the
gate prints them, fnmatch patterns allowed), ``max_change`` (the largest slowdown it accepts, relative:
0.12 is +12%), why, and who accepted it. Only the BASE side's file counts: main is protected, so an entry
there was reviewed and merged by a maintainer; an entry the pull request adds itself is shown as proposed
and accepts nothing (docs/gate.md, "Accepting a change"). The gate reads both files from git; only
change_marks asks git anything (which recorded commit holds an accepted one).
"""

import fnmatch
import re
from dataclasses import dataclass

import yaml

from mlagate import gitops
from mlagate.decide.vocabulary import Kind, Note, Outcome, Status

FILE = "perf-accept.yml"
FIELDS = {"commit", "pr", "cases", "max_change", "why", "who"}
TRUSTED, PROPOSED = "base", "head"  # where an entry was read: only the base's file accepts


class AcceptanceError(ValueError):
    """perf-accept.yml is not a list of entries the gate can apply; the message names the entry and key."""


@dataclass(frozen=True)
class Entry:
    commit: str  # 7 to 40 hex digits: the change's commit
    pr: int
    cases: tuple  # case labels or fnmatch patterns over them
    max_change: float
    why: str
    who: str

    def covers(self, label: str) -> bool:
        return any(fnmatch.fnmatchcase(label, pattern) for pattern in self.cases)

    def applies_to(self, commits) -> bool:
        """Whether the entry names one of ``commits`` (the gated head and, for a merge, its other parents)."""
        return any(c.startswith(self.commit) for c in commits)

    def as_dict(self, source: str) -> dict:
        return {"commit": self.commit, "pr": self.pr, "cases": list(self.cases), "max_change": self.max_change,
                "why": self.why, "who": self.who, "source": source}


def parse(text: str | None, where: str) -> list:
    """The entries of one perf-accept.yml (None or empty: none). ``where`` names the file in errors."""
    if not text or not text.strip():
        return []
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise AcceptanceError(f"{where}: not YAML ({e})") from None
    if doc is None:
        return []
    if not isinstance(doc, dict) or set(doc) != {"accepted"} or not isinstance(doc["accepted"], list):
        raise AcceptanceError(f"{where}: must be one key, `accepted:`, holding a list of entries")
    return [_entry(item, f"{where}: accepted[{i}]") for i, item in enumerate(doc["accepted"])]


def _entry(item, where: str) -> Entry:
    if not isinstance(item, dict):
        raise AcceptanceError(f"{where}: an entry is a mapping of {', '.join(sorted(FIELDS))}")
    missing, unknown = FIELDS - set(item), set(item) - FIELDS
    if missing or unknown:
        raise AcceptanceError(f"{where}: " + "; ".join(
            ([f"missing {', '.join(sorted(missing))}"] if missing else [])
            + ([f"unknown key {', '.join(sorted(map(str, unknown)))}"] if unknown else [])))
    commit, pr, cases, limit = str(item["commit"]), item["pr"], item["cases"], item["max_change"]
    if not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        raise AcceptanceError(f"{where}.commit: {commit!r:.50} is not 7-40 hex digits of a commit")
    if not isinstance(pr, int) or isinstance(pr, bool) or pr <= 0:
        raise AcceptanceError(f"{where}.pr: {pr!r:.30} is not a pull request number")
    if not isinstance(cases, list) or not cases or not all(isinstance(c, str) and c.strip() for c in cases):
        raise AcceptanceError(f"{where}.cases: a non-empty list of case labels (as gate.md prints them)")
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not 0 < limit < 1:
        raise AcceptanceError(f"{where}.max_change: {limit!r:.30} must be a slowdown between 0 and 1 "
                              "(0.12 accepts up to +12%)")
    for key, says in (("why", "why the change is accepted"), ("who", "who accepted it (a GitHub login)")):
        if not isinstance(item[key], str) or not item[key].strip():
            raise AcceptanceError(f"{where}.{key}: must say {says}")
    return Entry(commit, pr, tuple(c.strip() for c in cases), float(limit), item["why"].strip(), item["who"].strip())


def slowdowns(cv) -> list:
    """Every slowdown the gate measured for a case, relative: latency, the re-measure and the vendor ratio."""
    found = [cv.change] if cv.change is not None else []
    if cv.confirmation:
        found.append(cv.confirmation["change"])
    if cv.ratio_dropped and cv.base_vendor_ratio:
        found.append(1 - cv.vendor_ratio / cv.base_vendor_ratio)
    return found


def match(cv, trusted, proposed, head_commits) -> tuple:
    """(entry, source) of the first entry that names this case of the gated commit: the base's entries
    first; a proposed entry is returned only when no base entry names the case."""
    for source, entries in ((TRUSTED, trusted), (PROPOSED, proposed)):
        for entry in entries:
            if entry.applies_to(head_commits) and entry.covers(cv.label):
                return entry, source
    return None, None


def change_marks(history: list, entries) -> list:
    """(entry, main commit) per accepted change on main's history (recorded results, oldest first): the first
    recorded commit that holds the entry's commit, where the distribution changed on purpose (since_mark)."""
    marks = []
    for entry in entries:
        first = next((r.commit for r in history if gitops.is_ancestor(entry.commit, r.commit)), None)
        if first is not None:
            marks.append((entry, first))
    return marks


def since_mark(history, label: str, marks=()) -> list:
    """``history`` from the latest accepted change (a (perf-accept.yml entry, main commit) mark) that names
    the case: the distribution changed there on purpose, so drift and bisect compare with what came after."""
    starts = [commit for entry, commit in marks if entry.covers(label)]
    commits = [r.commit for r in history]
    cut = max((commits.index(c) for c in starts if c in commits), default=0)
    return list(history)[cut:]


def apply(verdict, trusted, proposed, head_commits):
    """perf-accept.yml: a regression an entry of the base's file names, for this commit, passes as accepted
    when every slowdown measured for it is within the entry's max_change. An entry that is too narrow, or
    that only the head's file (the pull request) holds, accepts nothing and says so."""
    for cv in verdict.cases:
        if cv.status != Status.REGRESSION:
            continue
        entry, source = match(cv, trusted, proposed, head_commits)
        if entry is None:
            continue
        cv.acceptance = entry.as_dict(source)
        who = f"{FILE} entry of PR #{entry.pr} ({entry.who})"
        if source != TRUSTED:
            _refuse(cv, f"{who} is only in this change's {FILE}, not in the base's: a pull request cannot accept "
                        "its own slowdown; a maintainer lands the entry on main (docs/gate.md, \"Accepting a change\")")
        elif cv.below_floor:
            _refuse(cv, f"{who} cannot accept a vendor ratio under the floor: the floor is perf.yml's "
                        "(gate.vendor_ratio)")
        elif (worst := max(slowdowns(cv))) > entry.max_change:  # past the floor, a regression measured one
            _refuse(cv, f"{who} accepts at most +{entry.max_change:.1%}; measured +{worst:.1%}: the change is "
                        "larger than what was accepted")
        else:
            cv.status = Status.ACCEPTED
            cv.warnings.append(Note(Kind.ACCEPTED, f"accepted: +{worst:.1%} within +{entry.max_change:.1%} by "
                                                   f"{who}: {entry.why}"))
    statuses = {c.status for c in verdict.cases}
    if verdict.outcome == Outcome.REGRESSION and Status.REGRESSION not in statuses \
            and not any(f.failed for f in verdict.build_findings):
        verdict.outcome = Outcome.UNSURE if verdict.unsure_fails and Status.UNSURE in statuses else Outcome.PASS
    return verdict


def _refuse(cv, text: str):
    """The entry names the case and accepts nothing: the case stays a regression, and says why."""
    cv.reasons.append(Note(Kind.NOT_ACCEPTED, text))

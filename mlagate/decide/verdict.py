"""The gate's decision: head against base, case by case. Pure: no I/O, no printing.

Latency: the raw samples of base and head must show a slowdown of at least
``threshold`` in the medians *and* a one-sided Mann-Whitney U p-value below
``alpha``. Cases past the lower ``screen`` are re-measured interleaved when the
gate runs with confirmation, and that re-measure decides them. Vendor ratio
(TileLang TFLOPs over the vendor's, from the head's own run, so machine drift
cancels): at least ``floor`` on every case (a case already under it on base is
reported as a known gap) and no more than ``max_drop`` (relative) below the
base's ratio; no ratio where one should exist is an error. A flagged case fails
only if the interleaved re-measure agrees, when one was made: its change's 99% interval entirely at or over
the threshold (regression), entirely under it (pass), else unsure (decide/remeasure.py). Every compared
case carries the smallest slowdown its deciding samples could show (``detectable``); one above the
threshold is named under-powered. Drift against the
best of recent main-branch results is a warning. Anything missing or broken is
an error: the gate never passes by default.

Every reason and warning is a ``Note``: code acts on its ``Kind``, never on its text.
"""

from dataclasses import dataclass, field

from mlagate.case import case_label
from mlagate.config import Config
from mlagate.decide import acceptance, remeasure, stats
from mlagate.decide.vendor_ratio import judge_ratio, vendor_kernel
from mlagate.decide.vocabulary import EXIT_CODE, Kind, Note, Outcome, Status, fail, positive, warn
from mlagate.measure.summary import median
from mlagate.store.results import CommitResults
from mlagate.store.results_file import BENCH_RATIO, BENCH_TIME, ok_value


@dataclass
class CaseVerdict:
    case: tuple  # a case key (impl, batch, seqlen, dtype, heads, q_len, workload)
    status: Status
    reasons: list = field(default_factory=list)  # Note: why the case fails or is an error
    warnings: list = field(default_factory=list)  # Note
    base_median_s: float | None = None
    head_median_s: float | None = None
    change: float | None = None  # head/base - 1 of the medians
    p_value: float | None = None
    vendor_ratio: float | None = None
    base_vendor_ratio: float | None = None
    flagged: bool = False  # slower than base beyond the screen: re-measure interleaved to decide
    over_threshold: bool = False  # the stored results alone break a rule
    below_floor: bool = False  # vendor ratio under the floor in head's own run: fails outright
    ratio_dropped: bool = False  # vendor ratio fell more than max_drop below base's
    confirmation: dict | None = None  # {"change", "p_value", "agrees", "decision", "interval", "rounds", "samples"}
    detectable: float | None = None  # smallest slowdown the deciding samples show at alpha, 80% power
    detectable_from: str | None = None  # "record" or "re-measure": the samples it was read from
    acceptance: dict | None = None  # the perf-accept.yml entry that names this case, and its source

    def __post_init__(self):
        self.status = Status(self.status)

    @property
    def label(self) -> str:
        return case_label(self.case)

    @property
    def drift(self) -> Note | None:
        """The drift warning (head against the best recent main result), if any."""
        return next((w for w in self.warnings if w.kind is Kind.DRIFT), None)


@dataclass
class Verdict:
    outcome: Outcome
    cases: list  # CaseVerdict
    errors: list = field(default_factory=list)  # Note: problems not tied to one case
    warnings: list = field(default_factory=list)  # Note
    base: str = ""
    head: str = ""
    platform: str = ""
    build_findings: list = field(default_factory=list)  # build_rules.Finding, from the build reports
    unsure_fails: bool = True  # perf.yml gate.confirm.unsure: an unsure case makes the outcome unsure (exit 2)

    def __post_init__(self):
        self.outcome = Outcome(self.outcome)

    @property
    def exit_code(self) -> int:
        return EXIT_CODE[self.outcome]

    def flagged(self) -> list:
        return [c for c in self.cases if c.flagged]


def _past(change: float, p_value: float, threshold: float, alpha: float) -> bool:
    return change >= threshold and p_value < alpha


def is_slower(base, head, threshold: float, alpha: float) -> bool:
    """The latency rule on two sample sets: slower medians by >= threshold, and significant."""
    return _past(stats.median_ratio(base, head) - 1, stats.slower_p_value(base, head), threshold, alpha)


def _latency(cv: CaseVerdict, base, head, cfg: Config):
    g = cfg.gate
    if not base.samples or not head.samples:
        which = "base" if not base.samples else "head"
        fail(cv, Kind.NO_SAMPLES, f"no raw samples in the {which} results (record with asv run "
                                   "--record-samples; `mlagate record` does)", Status.ERROR)
        return
    bad = [which for which, e in (("base", base), ("head", head)) if not positive(e.samples)]
    if bad:
        fail(cv, Kind.BAD_SAMPLES, f"{bad[0]} samples are not all finite times > 0", Status.ERROR)
        return
    if min(len(base.samples), len(head.samples)) < g.min_samples:
        fail(cv, Kind.TOO_FEW_SAMPLES, f"too few samples: base {len(base.samples)}, head {len(head.samples)} "
                                        f"(gate.latency.min_samples = {g.min_samples})", Status.ERROR)
        return
    cv.base_median_s, cv.head_median_s = median(base.samples), median(head.samples)
    cv.change = cv.head_median_s / cv.base_median_s - 1
    cv.p_value = stats.slower_p_value(base.samples, head.samples)
    _detectable(cv, base.samples, head.samples, "record", cfg)
    if _past(cv.change, cv.p_value, g.screen, g.alpha):
        cv.flagged = True
        cv.over_threshold = _past(cv.change, cv.p_value, g.threshold, g.alpha)
        fail(cv, Kind.LATENCY, f"latency +{cv.change:.1%} (median {cv.base_median_s * 1e6:.1f} → "
                                f"{cv.head_median_s * 1e6:.1f} µs, p = {cv.p_value:.1e}; threshold "
                                f"+{g.threshold:.1%} at p < {g.alpha})")


def recent_medians(history, case: tuple) -> list:
    """(median, commit) of every result in ``history`` that measured ``case``: what drift compares with."""
    entries = ((r.entries(BENCH_TIME).get(case), r.commit) for r in history)
    return [(median(e.samples), commit) for e, commit in entries if e is not None and e.status == "ok" and e.samples]


def _drift(cv: CaseVerdict, history, cfg: Config, marks=()):
    """Warn when head is slower than the best recent main-branch median (since the last accepted change)."""
    g = cfg.gate
    history = acceptance.since_mark(history, cv.label, marks) if marks else history
    medians = recent_medians(history[-g.drift_lookback:], cv.case)
    if len(medians) < 2:
        return
    best = min(medians)[0]
    slower = cv.head_median_s / best - 1
    if slower >= g.drift_max_slowdown:
        warn(cv, Kind.DRIFT, f"drift: {slower:.1%} slower than the best of the last {len(medians)} main results "
                              f"({best * 1e6:.1f} µs)")


POWER = 0.8  # of the detectable change: the slowdown the rule would catch in 4 runs of 5


def confirm_threshold(cv: CaseVerdict, cfg: Config, rule) -> float:
    """The slowdown the re-measure must show: a ratio drop is confirmed by the one its own rule allows."""
    return min(cfg.gate.threshold, rule.max_drop) if cv.ratio_dropped else cfg.gate.threshold


def rounds_of(side) -> tuple:
    """A re-measure side as rounds (tuples of samples); flat samples are one round."""
    return tuple(side) if side and isinstance(side[0], (tuple, list)) else (tuple(side),)


def _detectable(cv: CaseVerdict, base, head, source: str, cfg: Config):
    cv.detectable, cv.detectable_from = stats.detectable_change(base, head, cfg.gate.alpha, POWER), source


def _apply_confirmation(cv: CaseVerdict, confirmation, cfg: Config, rule) -> remeasure.Step:
    """The interleaved A/B re-measure decides a flagged case: where its change's interval lies."""
    base_r, head_r = (rounds_of(side) for side in confirmation)
    base_s, head_s = remeasure.pooled(base_r), remeasure.pooled(head_r)
    change = stats.median_ratio(base_s, head_s) - 1
    p = stats.slower_p_value(base_s, head_s)
    threshold = confirm_threshold(cv, cfg, rule)
    step, interval = remeasure.classify(base_s, head_s, threshold)
    cv.confirmation = {"change": change, "p_value": p, "agrees": step is remeasure.Step.REGRESSION,
                       "decision": step.value, "interval": interval, "rounds": min(len(base_r), len(head_r)),
                       "samples": (len(base_s), len(head_s))}
    _detectable(cv, base_s, head_s, "re-measure", cfg)
    shown = "" if interval is None else f" [99% interval {interval[0]:+.2%}, {interval[1]:+.2%}]"
    if step is remeasure.Step.PASS:
        warn(cv, Kind.NOT_CONFIRMED, f"not confirmed: interleaved re-measure shows {change:+.1%} (p = {p:.2g})")
    elif step is remeasure.Step.UNSURE:
        cv.reasons.clear()
        how = "fails closed" if cfg.gate.confirm.unsure_fails else "passes (gate.confirm.unsure: pass)"
        fail(cv, Kind.UNSURE, f"unsure: the interleaved re-measure shows {change:+.2%}{shown} after "
                              f"{cv.confirmation['rounds']} rounds, the +{threshold:.1%} threshold inside it when "
                              f"gate.confirm's rounds or time ran out; {how}")
    return step


def evaluate(base: CommitResults, head: CommitResults, cfg: Config, platform: str, *, history=(),
             confirmations=None, envs=(None, None), marks=()) -> Verdict:
    """Compare head with base for every gated case.

    ``history``: earlier main-branch results, oldest first, for the drift warning; ``marks``: the accepted
    changes on it (acceptance.since_mark).
    ``confirmations``: {case: (base_samples, head_samples)} from an interleaved
    re-measure; a flagged case without one fails (the report says so).
    ``envs``: base's and head's env sidecars (store.env.RunEnv or None), for the vendor kernels each ran.
    """
    g = cfg.gate
    rule = g.ratio[platform]
    tilelang = cfg.platform(platform).tilelang
    base_t, head_t = base.entries(BENCH_TIME), head.entries(BENCH_TIME)
    history = list(history)
    keys = sorted({k for k in (*base_t, *head_t) if k[0] in g.gated}, key=str)
    verdict = Verdict(Outcome.PASS, [], base=base.commit, head=head.commit, platform=platform,
                      unsure_fails=g.confirm.unsure_fails)
    if not keys:
        verdict.errors.append(Note(Kind.NO_GATED_CASES, f"no gated cases ({', '.join(g.gated)}) in either result"))
    for name, side, entries in (("base", base, base_t), ("head", head, head_t)):
        if keys and not any(k[0] in g.gated and e.status == "ok" for k, e in entries.items()):
            # nothing measured on one side is nothing compared, not "no change"
            verdict.errors.append(Note(Kind.NO_GATED_CASES, f"no gated case ({', '.join(g.gated)}) measured in "
                                                            f"{name} {side.commit[:8]}: nothing to compare"))
    head_grid = envs[1].grid if envs[1] else None
    listed = cfg.listed_keys(platform, head_grid)  # the cases head's own grid measures
    unlisted = f"head's grid ({head_grid}) does not list it" if head_grid in cfg.grid.sizes \
        else "perf.yml no longer lists it"

    for key in keys:
        cv = CaseVerdict(key, Status.PASS)
        b, h = base_t.get(key), head_t.get(key)
        if h is None and key not in listed:
            cv.status = Status.REMOVED
            warn(cv, Kind.REMOVED, f"in base, not in head: {unlisted}")
        elif h is None:
            fail(cv, Kind.MISSING_IN_HEAD, "in base, not in head, and perf.yml still lists it: head was not "
                                            "measured there (record head with the grid base was recorded with)",
                  Status.ERROR)
        elif h.status == "failed":
            fail(cv, Kind.FAILED_IN_HEAD, "benchmark failed in head (see the asv log sidecar)", Status.ERROR)
        elif b is None or b.status != "ok":
            cv.status = Status.NO_BASELINE if h.status == "ok" else Status.SKIPPED
            warn(cv, Kind.NO_BASE, "new case: no base result" if b is None else f"base result is {b.status}")
        elif h.status == "skipped":
            fail(cv, Kind.SKIPPED_IN_HEAD, "measured in base but skipped in head", Status.ERROR)
        else:
            _latency(cv, b, h, cfg)
            if cv.status != Status.ERROR:
                _drift(cv, history, cfg, marks)
        if key[0] == tilelang and cv.status in (Status.PASS, Status.NO_BASELINE):
            vendor = cfg.platform(platform).vendor_impl(key[6])
            judge_ratio(cv, ok_value(base.entries(BENCH_RATIO).get(key)), ok_value(head.entries(BENCH_RATIO).get(key)),
                   rule, cfg.platform(platform), [vendor_kernel(env, vendor, key) for env in envs])
        if cv.flagged and cv.status == Status.PASS:
            confirmation = (confirmations or {}).get(key)
            pooled = [remeasure.pooled(rounds_of(s)) for s in confirmation] if confirmation is not None else ()
            if confirmation is not None and not all(s and positive(s) for s in pooled):
                fail(cv, Kind.BAD_REMEASURE, "the interleaved re-measure gave no samples or samples that are "
                                              "not finite times > 0", Status.ERROR)
            elif confirmation is not None:
                cv.status = DECIDED[_apply_confirmation(cv, confirmation, cfg, rule)]
                if cv.status == Status.UNSURE and not g.confirm.unsure_fails:
                    warn(cv, Kind.UNSURE_PASSED, "unsure, passed: perf.yml's gate.confirm.unsure is pass")
            elif cv.over_threshold:
                cv.status = Status.REGRESSION
                if confirmations is not None:
                    warn(cv, Kind.NO_REMEASURE, "no interleaved re-measure for this case")
            else:
                warn(cv, Kind.UNDER_THRESHOLD, f"{cv.change:+.1%}: past the {g.screen:.2%} screen, under the "
                                                f"{g.threshold:.1%} threshold; not re-measured")
                cv.reasons.clear()
        if cv.below_floor and cv.status in (Status.PASS, Status.NO_BASELINE, Status.UNSURE):
            cv.status = Status.REGRESSION
        if cv.detectable is not None and cv.detectable > g.threshold and cv.status != Status.REGRESSION:
            warn(cv, Kind.UNDER_POWERED, f"under-powered: the smallest slowdown its {cv.detectable_from} samples "
                                         f"could show is +{cv.detectable:.1%} (alpha {g.alpha}, power "
                                         f"{POWER:.0%}), above the +{g.threshold:.1%} threshold")
        verdict.cases.append(cv)

    statuses = {c.status for c in verdict.cases}
    if verdict.errors or Status.ERROR in statuses:
        verdict.outcome = Outcome.ERROR
    elif Status.REGRESSION in statuses:
        verdict.outcome = Outcome.REGRESSION
    elif Status.UNSURE in statuses and g.confirm.unsure_fails:
        verdict.outcome = Outcome.UNSURE
    return verdict


DECIDED = {remeasure.Step.REGRESSION: Status.REGRESSION, remeasure.Step.PASS: Status.PASS,
           remeasure.Step.UNSURE: Status.UNSURE}


def add_build_findings(verdict: Verdict, findings) -> Verdict:
    """Compiler-resource findings (build_rules.evaluate_build): a failing one turns a pass into a regression."""
    verdict.build_findings += list(findings)
    if verdict.outcome in (Outcome.PASS, Outcome.UNSURE) and any(f.failed for f in findings):
        verdict.outcome = Outcome.REGRESSION
    return verdict


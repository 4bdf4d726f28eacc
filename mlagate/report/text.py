"""Formatting: tables for the terminal, Markdown, JSON verdicts, annotations."""

from dataclasses import fields, is_dataclass

from mlagate.decide.vocabulary import Kind, Note, Outcome, Status
from mlagate.measure.clocks import locked_from_clocks
from mlagate.report import schedules
from mlagate.report.build_report import FINDING_ICON
from mlagate.report.review import FAILING  # shown under "Why" (unsure: with its interval)


def _fmt(value, spec):
    return "—" if value is None else format(value, spec)


def bench_table(results, *, vendor: str | None = None):
    """CaseResults (with add_metrics' metrics) as a rich table."""
    from rich.table import Table

    from mlagate.case import RunStatus

    table = Table(title="MLA decode", show_lines=False)
    for col in ("impl", "dtype", "heads", "s_q", "batch", "seqlen", "workload", "latency µs", "±IQR", "TFLOPs", "GB/s",
                "roofline", f"vs {vendor}" if vendor else "vs vendor", "status"):
        table.add_column(col, justify="right" if col not in ("impl", "dtype", "workload", "status") else "left")
    for r in results:
        c = r.case
        dtype = c.dtype if c.kv_dtype == c.dtype else f"{c.dtype}/{c.kv_dtype}"  # query/cache where they differ
        if r.status != RunStatus.OK:
            table.add_row(c.impl, dtype, str(c.heads), str(c.q_len), str(c.batch), str(c.seqlen), c.workload,
                          "", "", "", "", "", "", f"{r.status}: {r.reason or ''}"[:90])
            continue
        table.add_row(c.impl, dtype, str(c.heads), str(c.q_len), str(c.batch), str(c.seqlen), c.workload,
                      _fmt(r.median_ms and r.median_ms * 1e3, ".1f"),
                      _fmt(r.iqr_ms and r.iqr_ms * 1e3, ".1f"), _fmt(r.tflops, ".1f"), _fmt(r.gbps, ".0f"),
                      _fmt(r.roofline and r.roofline * 100, ".0f") + "%",
                      _fmt(r.vendor_ratio, ".2f"), "ok")
    return table


# -- the gate ------------------------------------------------------------------

ICON = {Status.PASS: "✅ pass", Status.REGRESSION: "❌ regression", Status.ERROR: "⛔ error",
        Status.NO_BASELINE: "🆕 no baseline", Status.REMOVED: "➖ removed", Status.SKIPPED: "⏭ skipped",
        Status.ACCEPTED: "☑️ accepted", Status.UNSURE: "❔ unsure"}
TITLE = {Outcome.PASS: "✅ MLA decode perf gate: pass", Outcome.REGRESSION: "❌ MLA decode perf gate: regression",
         Outcome.UNSURE: "❔ MLA decode perf gate: unsure (could not decide: fails closed)",
         Outcome.ERROR: "⛔ MLA decode perf gate: error (fails closed)"}


def remeasure_text(c: dict) -> str:
    """An interleaved re-measure in one line: change, 99% interval, rounds, what it decided."""
    interval = c.get("interval")
    shown = "" if not interval else f" [99% interval {interval[0]:+.2%}, {interval[1]:+.2%}]"
    rounds = f"{c['rounds']} rounds, " if c.get("rounds") is not None else ""
    return (f"{c['change']:+.2%}{shown} (p = {c['p_value']:.1e}, {rounds}{c['samples'][0]}+{c['samples'][1]} "
            f"samples): {c.get('decision', 'regression' if c['agrees'] else 'pass')}")


def detectable_text(cv) -> str:
    return "—" if cv.detectable is None else f"{cv.detectable:.2%}"


def _us(seconds):
    return "—" if seconds is None else f"{seconds * 1e6:.1f}"


def _ratio_cell(cv):
    if cv.vendor_ratio is None:
        return "—"
    if cv.base_vendor_ratio is None:
        return f"{cv.vendor_ratio:.2f}"
    return f"{cv.base_vendor_ratio:.2f} → {cv.vendor_ratio:.2f}"


def _texts(notes) -> str:
    return "; ".join(n.text for n in notes)


def gate_markdown(verdict, *, plot: str | None = None, vendor: str = "vendor", page: str | None = None,
                  review=None) -> str:
    """The job summary: the outcome, one summary line, why, what changed and how to reproduce it up front;
    every case, the compiler resources and the notes folded. ``review``: report.review.Review, or None."""
    from mlagate.report import review as reviewer

    lines = [f"## {TITLE[verdict.outcome]}", "", reviewer.summary(verdict), "",
             f"base `{verdict.base[:10]}` · head `{verdict.head[:10]}` · platform `{verdict.platform}`", ""]
    for e in verdict.errors:
        lines.append(f"- ⛔ {e.text}")
    bad = [c for c in verdict.cases if c.status in FAILING]
    if bad:
        lines += ["", "### Why", ""]
        for c in bad:
            lines.append(f"- **{c.label}**: " + _texts(c.reasons))
            if c.confirmation:
                lines.append(f"  - interleaved re-measure: {remeasure_text(c.confirmation)}")
    lines += reviewer.sections(verdict, review)
    accepted = [c for c in verdict.cases if c.status == Status.ACCEPTED]
    if accepted:
        lines += ["", "### Accepted changes (the base's perf-accept.yml)", ""]
        lines += [f"- **{c.label}**: {next(w.text for w in c.warnings if w.kind == Kind.ACCEPTED)}"
                  for c in accepted]
    lines += ["", f"<details><summary>All {len(verdict.cases)} cases</summary>", "",
              f"| case | base µs | head µs | change | p (slower) | detectable | TFLOPs ratio vs {vendor} | verdict |",
              "|---|---:|---:|---:|---:|---:|---:|---|"]
    for c in verdict.cases:
        change = "—" if c.change is None else f"{c.change:+.1%}"
        p = "—" if c.p_value is None else f"{c.p_value:.1e}"
        lines.append(f"| {c.label} | {_us(c.base_median_s)} | {_us(c.head_median_s)} | {change} | {p} | "
                     f"{detectable_text(c)} | {_ratio_cell(c)} | {ICON[c.status]} |")
    lines += ["", "Detectable: the smallest slowdown each case's deciding samples (the re-measure's where one was "
              "made) would show at the rule's alpha with 80% power, from their own spread; one above the "
              "threshold is under-powered (a note).", "", "</details>"]
    if review is not None:
        lines += schedules.markdown(review.schedules)
    if verdict.build_findings:
        failed = sum(f.failed for f in verdict.build_findings)
        lines += ["", "### Compiler resources", "",
                  f"<details{' open' if failed else ''}><summary>{len(verdict.build_findings)} findings, "
                  f"{failed} failing</summary>", ""]
        lines += [f"- {FINDING_ICON[f.status]} `{f.target}` [{f.rule}] {f.message}"
                  for f in sorted(verdict.build_findings, key=lambda f: not f.failed)]
        lines += ["", "</details>"]
    notes = [(c.label, w) for c in verdict.cases for w in c.warnings if w.kind != Kind.ACCEPTED] + \
        [("", w) for w in verdict.warnings]
    if notes:
        lines += ["", "### Notes", "", f"<details><summary>{len(notes)} notes</summary>", ""]
        lines += [f"- {label + ': ' if label else ''}{w.text}" for label, w in notes] + ["", "</details>"]
    beside = [f"`{name}`" for name in (page, plot) if name]
    if beside:
        # a job summary or PR comment shows no relative image: the files travel in the run's artifact
        lines += ["", f"Every sample, each change's interval and the compiler resources that moved "
                  f"({' and the TFLOPs-vs-seqlen plot '.join(beside)}): beside this file; in CI, the run's "
                  "`perf-gate` artifact (listed at the bottom of the run's summary page)."]
    return "\n".join(lines) + "\n"


def _plain(value):
    """A verdict as JSON-ready values: each Note as its text, so verdict.json keeps its shape."""
    if isinstance(value, Note):
        return value.text
    if is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def verdict_dict(verdict, review=None) -> dict:
    """verdict.json: the verdict, and the reviewer fields (report.review.fields) the PR comment shows."""
    from mlagate.report import review as reviewer

    d = {**_plain(verdict), **reviewer.fields(verdict, review)}
    for case, cv in zip(d["cases"], verdict.cases):
        case["drift"] = cv.drift.text if cv.drift else None
    d["exit_code"] = verdict.exit_code
    return d


def workflow_command(kind: str, title: str, message: str) -> str:
    """``::error title=T::M`` for GitHub: the runner reads one line per command and splits
    properties at ',' and ':', so those are percent-encoded as its toolkit does (%25 first)."""
    def data(text):
        return str(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")

    return f"::{kind} title={data(title).replace(':', '%3A').replace(',', '%2C')}::{data(message)}"


def annotations(verdict) -> list:
    """GitHub workflow commands: one ::error:: per failing case or error."""
    out = [workflow_command("error", "perf gate error", e.text) for e in verdict.errors]
    for c in verdict.cases:
        if c.status in FAILING:
            out.append(workflow_command("error", f"perf {c.status}: {c.label}", _texts(c.reasons)))
    out += [workflow_command("error", f"compiler resources ({f.target}, {f.rule})", f.message)
            for f in verdict.build_findings if f.failed]
    out += [workflow_command("warning", f"perf drift: {c.label}", c.drift.text) for c in verdict.cases if c.drift]
    return out


# -- calibration ---------------------------------------------------------------

def calibration_markdown(curves, gate) -> str:
    """curves: {case label: [(slowdown, screened share, failed share)]}."""
    slowdowns = [s for s, _, _ in next(iter(curves.values()))]
    lines = [f"Share of simulated gate runs that fail (screen {gate.screen:.2%}, threshold {gate.threshold:.1%}, "
             f"p < {gate.alpha}, then interleaved confirmation)", "",
             "| case | " + " | ".join(f"{s:.0%}" for s in slowdowns) + " |",
             "|---|" + "---:|" * len(slowdowns)]
    for label, curve in curves.items():
        lines.append(f"| {label} | " + " | ".join(f"{failed:.2f}" for _, _, failed in curve) + " |")
    return "\n".join(lines)


def clock_warning(facts, windows) -> str | None:
    """The line every report of a run carries when its GPU clocks were not locked (or not read):
    ``facts`` is the environment record's clock_control, ``windows`` the run's sampling windows."""
    if not isinstance(facts, dict) or facts.get("locked") is True:
        return None  # locked, or a record from before the clocks were read
    if facts.get("unavailable"):
        return (f"GPU clocks not read on this runner ({facts['unavailable']}): no window taken while the GPU "
                "throttled could be dropped (docs/clocks.md)")
    clocks = [w["sm_mhz"] for w in windows if isinstance(w.get("sm_mhz"), (int, float))]
    if locked_from_clocks(clocks):
        return None  # NVML cannot say whether clocks are locked; every window read one clock
    seen = f": the SM clock read {min(clocks):.0f}-{max(clocks):.0f} MHz over {len(clocks)} sampling windows" \
        if clocks else ""
    dropped = sum(1 for w in windows if w.get("kept") is False)
    state = "not locked" if facts.get("locked") is False else "not known to be locked"
    return (f"GPU clocks {state} on this runner{seen}, {dropped} window(s) dropped as throttled; changes "
            "near the screen may be clock noise (docs/clocks.md)")


"""The comparison page of one gate run (OUT/comparison.html): what a reviewer opens from the PR comment.

Per gated case, regressions first: both latency distributions (not only the medians), the change with an
interval, the interleaved re-measure, the vendor ratio before and after against the floor; then the
compiler resources that changed between the base and head build reports. Every number is recorded data:
the header says which GPU measured each side, and when. Static HTML and one PNG; no JavaScript.
"""

from dataclasses import dataclass, field
from pathlib import Path

from mlagate.decide.stats import change_interval
from mlagate.decide.vocabulary import Status
from mlagate.measure import environment
from mlagate.report.build_report import FINDING_ICON
from mlagate.report.page import STYLE, escape, table
from mlagate.report.plots import distributions_png
from mlagate.report.schedules import html as schedule_section
from mlagate.report.text import ICON, TITLE, detectable_text, remeasure_text
from mlagate.store.results_file import BENCH_TIME

ORDER = (Status.REGRESSION, Status.ERROR, Status.UNSURE, Status.ACCEPTED, Status.PASS, Status.NO_BASELINE,
         Status.SKIPPED, Status.REMOVED)
RESOURCES = (("registers", "registers"), ("spill_stores", "spill stores B"), ("spill_loads", "spill loads B"),
             ("smem", "shared memory B"), ("blocks_per_sm", "blocks/SM"))


@dataclass
class Sides:
    """What the page shows besides the verdict: both sides' results, run records and build reports."""

    machine: str
    base: object  # store CommitResults
    head: object
    base_env: object  # store.env.RunEnv or None
    head_env: object
    builds: dict = field(default_factory=dict)  # target -> (base report or None, head report or None)


def _order(cv) -> tuple:
    noted = bool(cv.warnings) or cv.flagged
    return ORDER.index(cv.status), not noted, -(cv.change or 0.0)


def _samples(results, key):
    entry = results.entries(BENCH_TIME).get(key)
    return entry.samples if entry is not None and entry.status == "ok" and entry.samples else None


def _us(seconds) -> str:
    return "—" if seconds is None else f"{seconds * 1e6:.1f}"


def _ratio(cv, floor) -> str:
    if cv.vendor_ratio is None:
        return '<span class="na">—</span>'
    before = "" if cv.base_vendor_ratio is None else f"{cv.base_vendor_ratio:.2f} → "
    cls = "bad" if cv.vendor_ratio < floor else ""
    return f'{before}<span class="{cls}">{cv.vendor_ratio:.2f}</span> <small>(floor {floor:.2f})</small>'


def _remeasure(cv) -> str:
    c = cv.confirmation
    if not c:
        return '<span class="na">—</span>'
    change, _, rest = remeasure_text(c).partition(" ")
    return f"{escape(change)} <small>{escape(rest)}</small>"


def case_rows(cases, samples: dict, floor: float) -> list:
    """One row per case, in the given order; ``samples``: case -> (base samples, head samples)."""
    rows = []
    for cv in cases:
        base, head = samples[cv.case]
        interval = change_interval(base, head) if base and head else None
        change = "—" if cv.change is None else f"{cv.change:+.1%}"
        if interval:
            change += f" <small>[{interval[0]:+.1%}, {interval[1]:+.1%}]</small>"
        p = "—" if cv.p_value is None else f"{cv.p_value:.1e}"
        notes = "<br>".join(escape(n.text) for n in (*cv.reasons, *cv.warnings))
        rows.append([escape(cv.label), ICON[cv.status], _us(cv.base_median_s), _us(cv.head_median_s), change, p,
                     _remeasure(cv), detectable_text(cv), _ratio(cv, floor), f'<span class="notes">{notes}</span>'])
    return rows


def resource_changes(builds: dict) -> list:
    """[target, kernel, 'name: base → head' ...] for every kernel whose compiler resources differ."""
    rows = []
    for target, (base, head) in sorted(builds.items()):
        if not base or not head:
            continue
        before = {k["kernel"]: k for k in base.get("kernels", [])}
        for kernel in head.get("kernels", []):
            old = before.get(kernel["kernel"])
            if old is None:
                continue
            diffs = [f"{label}: {old.get(name)} → {kernel.get(name)}" for name, label in RESOURCES
                     if old.get(name) != kernel.get(name)]
            if diffs:
                rows.append([escape(target), escape(kernel["kernel"]), escape("; ".join(diffs))])
    return rows


def _recorded(label, commit, env) -> str:
    where = " · ".join(map(escape, environment.headline(env))) or "hardware not recorded"
    when = (env and env.time) or "at a time not recorded"
    return f"<li>{label} <code>{escape(commit[:10])}</code>: measured {escape(when)} on {where}</li>"


def write_page(out: Path, verdict, sides: Sides, cfg, schedules: dict | None = None) -> Path:
    """OUT/comparison.html and OUT/distributions.png; returns the page's path. ``schedules``: the workload
    cases' schedule diagnoses (report.review.Review.schedules), None where head's arch is not known."""
    floor = cfg.gate.ratio[verdict.platform].floor
    cases = sorted(verdict.cases, key=_order)
    samples = {cv.case: (_samples(sides.base, cv.case), _samples(sides.head, cv.case)) for cv in cases}
    shown = [(cv.label, *samples[cv.case], cv.status == Status.REGRESSION) for cv in cases if all(samples[cv.case])]
    figure = ""
    if shown:
        distributions_png(out / "distributions.png", shown, threshold=cfg.gate.threshold)
        figure = ('<figure><img src="distributions.png" alt="base and head latency samples per case">'
                  "<figcaption>Every latency sample of base (grey) and head (red where the case regressed, "
                  "blue otherwise), relative to base's median; the dashed line is the gate's threshold.</figcaption>"
                  "</figure>")
    header = ["case", "verdict", "base µs", "head µs", "change [99% interval]", "p (slower)",
              "interleaved re-measure",
              "detectable (α, 80% power)", f"vendor ratio ({escape(cfg.platform(verdict.platform).vendor)})",
              "reasons and notes"]
    changes = resource_changes(sides.builds)
    if changes:
        resources = table(["target", "kernel", "changed"], changes, "left")
    elif any(b and h for b, h in sides.builds.values()):
        resources = "<p>No kernel's registers, spills, shared memory or occupancy changed.</p>"
    else:
        resources = '<p class="na">No build report on both sides (`mlagate build --record` writes them).</p>'
    findings = "".join(f"<li>{FINDING_ICON[f.status]} <code>{escape(f.target)}</code> [{escape(f.rule)}] "
                       f"{escape(f.message)}</li>" for f in verdict.build_findings)
    errors = "".join(f"<li>⛔ {escape(e.text)}</li>" for e in verdict.errors)
    notes = "".join(f"<li>{escape(w.text)}</li>" for w in verdict.warnings)
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,"><title>{escape(TITLE[verdict.outcome])}</title><style>{STYLE}</style></head>
<body>
<h1>{escape(TITLE[verdict.outcome])}</h1>
<p>Recorded data, machine <code>{escape(sides.machine)}</code>, platform <code>{escape(verdict.platform)}</code>:</p>
<ul>{_recorded("base", verdict.base, sides.base_env)}{_recorded("head", verdict.head, sides.head_env)}</ul>
{f"<ul>{errors}</ul>" if errors else ""}
<h2>Cases, regressions first</h2>
{table(header, case_rows(cases, samples, floor), "cases")}
{figure}
{schedule_section(schedules)}
<h2>Compiler resources, base → head</h2>
{f"<ul>{findings}</ul>" if findings else ""}
{resources}
{f"<h2>Notes</h2><ul>{notes}</ul>" if notes else ""}
</body></html>
"""
    path = out / "comparison.html"
    path.write_text(page)  # into the gate's fresh output set (atomic.output_set), swapped in whole
    return path

"""The history in the report, without JavaScript: the trend table of the summary page (each case's median
per recorded commit, the change from the commit before, regressions coloured, the gate's failures and the
accepted changes marked) and one page per case (cases/<case>.html) with the same, drawn as an inline SVG.
Every page is static HTML: it works offline, whatever is installed."""

import re
from dataclasses import dataclass, field

from mlagate import gitops
from mlagate.case import PARAM_NAMES, WORKLOAD_TAG_MARK, Case
from mlagate.decide import acceptance, verdict
from mlagate.decide.vocabulary import Outcome, Status
from mlagate.report.page import STYLE, escape, table
from mlagate.store.results_file import BENCH_TIME, ok_value

CASES_DIR = "cases"
HISTORY_STYLE = """
.up { color: #b00020; font-weight: 600; } .down { color: #1a7f37; } .acc { color: #0550ae; font-weight: 600; }
td.failed { background: #fde7ea; } td.accepted { background: #e6f0ff; }
"""


@dataclass
class Mark:
    """The gate's rules on one commit against the commit recorded before it."""
    outcome: Outcome
    drifts: int = 0
    failing: set = field(default_factory=set)  # case keys that regressed or erred
    accepted: set = field(default_factory=set)  # case keys an accepted change (perf-accept.yml) covers here


def gate_marks(cfg, history: list, envs: dict, changes=None) -> dict:
    """commit -> Mark: the gate's rules on each commit against the one recorded before it, from the stored
    samples alone (no interleaved re-measure), with the commits before it as drift history (from the accepted
    ``changes`` on, default: accepted_changes(history))."""
    changes = accepted_changes(history) if changes is None else changes
    marks = {}
    for i in range(1, len(history)):
        env = envs.get(history[i].commit)  # store.env.RunEnv or None
        platform = env.platform if env else None
        if platform in cfg.platforms:
            v = verdict.evaluate(history[i - 1], history[i], cfg, platform, history=history[:i], marks=changes)
            marks[history[i].commit] = Mark(v.outcome, sum(1 for c in v.cases if c.drift),
                                            {c.case for c in v.cases if c.status in (Status.REGRESSION, Status.ERROR)})
    mark_accepted(marks, changes, {Case(*k) for r in history for k in r.entries(BENCH_TIME)})
    return marks


def accepted_changes(history: list) -> list:
    """(entry, commit) of each accepted change in the newest recorded commit's perf-accept.yml that lies on
    ``history``; none where that file is missing, unreadable or not in this clone (the page says nothing)."""
    if not history:
        return []
    try:
        entries = acceptance.parse(gitops.file_at(history[-1].commit, acceptance.FILE), acceptance.FILE)
    except (gitops.GitError, acceptance.AcceptanceError):
        return []
    return acceptance.change_marks(history, entries)


def mark_accepted(marks: dict, changes, series) -> None:
    for entry, commit in changes:
        mark = marks.setdefault(commit, Mark(Outcome.PASS))
        mark.accepted |= {c.key for c in series if entry.covers(c.label())}


def header_mark(mark: Mark | None) -> str:
    if mark is None:
        return ""
    text = {Outcome.REGRESSION: ' <span class="bad">✗ gate</span>', Outcome.ERROR: ' <span class="bad">⛔ gate</span>'}
    return (text.get(mark.outcome, "") + (f" <small>drift ×{mark.drifts}</small>" if mark.drifts else "")
            + (' <span class="acc">☑ accepted</span>' if mark.accepted else ""))


def cells(case: Case, values: list, commits: list, marks: dict, threshold: float) -> list:
    """One cell per commit: the median in µs and its change from the previous recorded value, red when
    slower by the gate's threshold or more, green when as much faster; ✗ where the gate failed the case
    there, ☑ where an accepted change covers it."""
    out, before = [], None
    for value, commit in zip(values, commits):
        mark = marks.get(commit) or Mark(Outcome.PASS)
        flags = (" ✗" if case.key in mark.failing else "") + (" ☑" if case.key in mark.accepted else "")
        cls = "failed" if case.key in mark.failing else "accepted" if case.key in mark.accepted else ""
        if value is None:
            out.append((cls, '<span class="na">—</span>' + flags))
            continue
        change = "" if before is None else _change(value / before - 1, threshold)
        out.append((cls, f"{value * 1e6:.1f}{change}{flags}"))
        before = value
    return out


def _change(change: float, threshold: float) -> str:
    cls = "up" if change >= threshold else "down" if change <= -threshold else ""
    return f' <small class="{cls}">{change:+.1%}</small>' if cls else f" <small>{change:+.1%}</small>"


def series_of(recent: list) -> dict:
    series = {}
    for i, r in enumerate(recent):
        for key, entry in r.entries(BENCH_TIME).items():
            series.setdefault(Case(*key), [None] * len(recent))[i] = ok_value(entry)
    return series


def workload_name(case: Case) -> str:
    """A workload by its name (the digest of its definition stays in the key, and in the cell's title)."""
    return case.workload.partition(WORKLOAD_TAG_MARK)[0]


def page_name(case: Case) -> str:
    """The case's page: its key, with s_q past one query token and the cache's dtype where it is not the query's
    only (a link from before the q_len and kv_dtype axes holds)."""
    key = case.key[:5] + ((f"sq{case.q_len}",) if case.q_len != 1 else ()) \
        + ((f"kv{case.kv_dtype}",) if case.kv_dtype != case.dtype else ()) + (case.workload,)
    return f"{CASES_DIR}/" + re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(map(str, key))) + ".html"


def _cell_html(cls_text) -> str:
    cls, text = cls_text
    return f'<td class="{cls}">{text}</td>' if cls else f"<td>{text}</td>"


def svg_line(values: list, labels: list) -> str:
    """The medians as an inline SVG polyline (no script); a gap where a commit has none."""
    points = [(i, v * 1e6) for i, v in enumerate(values) if v is not None]
    if len(points) < 2:
        return ""
    w, h, pad = 640, 220, 40
    top = max(v for _, v in points) * 1.1
    x = [pad + i * (w - 2 * pad) / max(len(values) - 1, 1) for i in range(len(values))]

    def y(v):
        return h - pad - v / top * (h - 2 * pad)

    line = " ".join(f"{x[i]:.1f},{y(v):.1f}" for i, v in points)
    dots = "".join(f'<circle cx="{x[i]:.1f}" cy="{y(v):.1f}" r="3"><title>{escape(labels[i])}: {v:.1f} µs</title>'
                   "</circle>" for i, v in points)
    ticks = "".join(f'<text x="{x[i]:.1f}" y="{h - pad + 16}" font-size="10" text-anchor="middle">'
                    f"{escape(labels[i])}</text>" for i in range(len(values)))
    return (f'<svg class="trend" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" '
            f'aria-label="median latency per commit"><polyline fill="none" stroke="#0550ae" stroke-width="2" '
            f'points="{line}"/>{dots}{ticks}<text x="{pad}" y="14" font-size="11">median µs (0 at the axis, top '
            f"{top:.0f})</text></svg>")


CASE_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,">
<title>{title}</title><style>{style}</style></head>
<body><p><a href="../index.html">← the summary</a></p><h1>{title}</h1>
<p>Median latency per recorded commit on {machine}, oldest first; the change is from the commit recorded
before. <span class="up">red</span>: slower by the gate's threshold ({threshold:.1%}) or more;
<span class="down">green</span>: as much faster; ✗ the gate's rules fail the case there (stored samples, against
the commit before); ☑ an accepted change (perf-accept.yml) covers it there: drift compares with what follows.</p>
{svg}
{table}
</body></html>
"""


def write_case_page(out, cfg, case: Case, values: list, recent: list, marks: dict, machine: str) -> str:
    commits = [r.commit for r in recent]
    rows = []
    for (cls, text), commit in zip(cells(case, values, commits, marks, cfg.gate.threshold), commits):
        mark = marks.get(commit)
        why = []
        if mark and case.key in mark.failing:
            why.append('<span class="bad">✗ gate</span>')
        if mark and case.key in mark.accepted:
            why.append('<span class="acc">☑ accepted change</span>')
        rows.append([f"<code>{commit[:8]}</code>", text, " ".join(why)])
    body = table(["commit", "median µs (change)", "marks"], rows, "left")
    path = out / page_name(case)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(CASE_PAGE.format(title=escape(case.label()), style=STYLE + HISTORY_STYLE, machine=escape(machine),
                                     threshold=cfg.gate.threshold, svg=svg_line(values, [c[:8] for c in commits]),
                                     table=body))
    return page_name(case)


def trend_section(cfg, out, recent: list, machine: str, marks: dict, impl_order, asv_link=None, figure="") -> str:
    """The summary page's trend table (oldest commit first) and a page per case. ``asv_link(case)``: its
    asv graph, where asv's pages work here; None: the case pages stand alone."""
    series = series_of(recent)
    commits = [r.commit for r in recent]
    order = {impl: n for n, impl in enumerate(impl_order([c.impl for c in series]))}
    rows = []
    for case, values in sorted(series.items(), key=lambda kv: (order[kv[0].impl], kv[0].key[1:])):
        page = write_case_page(out, cfg, case, values, recent, marks, machine)
        impl = (f'<a href="{escape(asv_link(case))}">{escape(case.impl)}</a>' if asv_link else escape(case.impl))
        rows.append("<tr>" + f"<td>{impl}</td>" + "".join(f"<td>{escape(v)}</td>" for v in case.key[1:5])
                    + f'<td title="{escape(case.workload)}">{escape(workload_name(case))}</td>'
                    + f'<td><a href="{escape(page)}">trend</a></td>'
                    + "".join(_cell_html(c) for c in cells(case, values, commits, marks, cfg.gate.threshold))
                    + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in [*PARAM_NAMES, "case"]
                   + [f"<code>{c[:8]}</code>{header_mark(marks.get(c))}" for c in commits])
    return (f"<h2>Trend: the last {len(recent)} commits recorded on {escape(machine)}</h2>{figure}"
            "<p>Median latency (µs) per commit, oldest first, and its change from the commit recorded before: "
            f'<span class="up">red</span> slower by the gate\'s threshold ({cfg.gate.threshold:.1%}) or more, '
            '<span class="down">green</span> as much faster. Under each commit: <span class="bad">✗ gate</span> '
            "where the gate's rules fail it against the commit recorded before it (stored samples, no re-measure; "
            '✗ beside the cases that failed), how many cases drifted from the best recent result, and '
            '<span class="acc">☑ accepted</span> where an accepted change (perf-accept.yml) starts. "trend" opens '
            "the case's own page.</p>"
            f'<style>{HISTORY_STYLE}</style><div class="scroll"><table class="trend"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table></div>")

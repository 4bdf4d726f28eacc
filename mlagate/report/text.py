"""Formatting: tables for the terminal, Markdown, JSON verdicts, annotations."""


def _fmt(value, spec):
    return "—" if value is None else format(value, spec)


def bench_table(rows, *, vendor: str | None = None):
    from rich.table import Table

    table = Table(title="MLA decode", show_lines=False)
    for col in ("impl", "dtype", "heads", "batch", "seqlen", "latency µs", "±IQR", "TFLOPs", "GB/s", "roofline",
                f"vs {vendor}" if vendor else "vs vendor", "status"):
        table.add_column(col, justify="right" if col not in ("impl", "dtype", "status") else "left")
    for r in rows:
        if r["status"] != "ok":
            table.add_row(r["impl"], r["dtype"], str(r["heads"]), str(r["batch"]), str(r["seqlen"]), "", "", "", "", "", "",
                          f"{r['status']}: {r.get('reason') or ''}"[:90])
            continue
        table.add_row(r["impl"], r["dtype"], str(r["heads"]), str(r["batch"]), str(r["seqlen"]),
                      _fmt(r["median_ms"] * 1e3, ".1f"),
                      _fmt(r["iqr_ms"] * 1e3, ".1f"), _fmt(r["tflops"], ".1f"), _fmt(r["gbps"], ".0f"),
                      _fmt(r.get("roofline") and r["roofline"] * 100, ".0f") + "%",
                      _fmt(r.get("vendor_ratio"), ".2f"), "ok")
    return table


# -- the gate ------------------------------------------------------------------

ICON = {"pass": "✅ pass", "regression": "❌ regression", "error": "⛔ error", "no_baseline": "🆕 no baseline",
        "removed": "➖ removed", "skipped": "⏭ skipped"}


def _us(seconds):
    return "—" if seconds is None else f"{seconds * 1e6:.1f}"


def _ratio_cell(cv):
    if cv.vendor_ratio is None:
        return "—"
    if cv.base_vendor_ratio is None:
        return f"{cv.vendor_ratio:.2f}"
    return f"{cv.base_vendor_ratio:.2f} → {cv.vendor_ratio:.2f}"


def gate_markdown(verdict, *, plot: str | None = None, vendor: str = "vendor") -> str:
    title = {"pass": "✅ MLA decode perf gate: pass", "regression": "❌ MLA decode perf gate: regression",
             "error": "⛔ MLA decode perf gate: error (fails closed)"}[verdict.outcome]
    lines = [f"## {title}", "",
             f"base `{verdict.base[:10]}` · head `{verdict.head[:10]}` · platform `{verdict.platform}`", ""]
    for e in verdict.errors:
        lines.append(f"- ⛔ {e}")
    bad = [c for c in verdict.cases if c.status in ("regression", "error")]
    if bad:
        lines += ["", "### Why", ""]
        for c in bad:
            lines.append(f"- **{c.label}**: " + "; ".join(c.reasons))
            if c.confirmation:
                lines.append(f"  - confirmed by interleaved re-measure: {c.confirmation['change']:+.1%} "
                             f"(p = {c.confirmation['p_value']:.1e}, {c.confirmation['samples'][0]}+"
                             f"{c.confirmation['samples'][1]} samples)")
    lines += ["", f"| case | base µs | head µs | change | p (slower) | TFLOPs ratio vs {vendor} | verdict |",
              "|---|---:|---:|---:|---:|---:|---|"]
    for c in verdict.cases:
        change = "—" if c.change is None else f"{c.change:+.1%}"
        p = "—" if c.p_value is None else f"{c.p_value:.1e}"
        lines.append(f"| {c.label} | {_us(c.base_median_s)} | {_us(c.head_median_s)} | {change} | {p} | "
                     f"{_ratio_cell(c)} | {ICON.get(c.status, c.status)} |")
    if verdict.build_findings:
        lines += ["", "### Compiler resources", ""]
        lines += [f"- {'❌' if f.failed else '⚠️'} `{f.target}` [{f.rule}] {f.message}"
                  for f in sorted(verdict.build_findings, key=lambda f: not f.failed)]
    notes = [(c.label, w) for c in verdict.cases for w in c.warnings] + [("", w) for w in verdict.warnings]
    if notes:
        lines += ["", "### Notes", ""] + [f"- {label + ': ' if label else ''}{w}" for label, w in notes]
    if plot:
        lines += ["", f"![TFLOPs vs seqlen]({plot})"]
    return "\n".join(lines) + "\n"


def verdict_dict(verdict) -> dict:
    from dataclasses import asdict

    d = asdict(verdict)
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
    out = [workflow_command("error", "perf gate error", e) for e in verdict.errors]
    for c in verdict.cases:
        if c.status in ("regression", "error"):
            out.append(workflow_command("error", f"perf {c.status}: {c.label}", "; ".join(c.reasons)))
    out += [workflow_command("error", f"compiler resources ({f.target}, {f.rule})", f.message)
            for f in verdict.build_findings if f.failed]
    out += [workflow_command("warning", f"perf drift: {c.label}", c.drift) for c in verdict.cases if c.drift]
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

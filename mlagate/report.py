"""Formatting: tables for the terminal, Markdown, JSON verdicts, annotations."""

from rich.table import Table


def _fmt(value, spec):
    return "—" if value is None else format(value, spec)


def bench_table(rows, *, vendor: str | None = None) -> Table:
    table = Table(title="MLA decode", show_lines=False)
    for col in ("impl", "dtype", "batch", "seqlen", "latency µs", "±IQR", "TFLOPs", "GB/s", "roofline",
                f"vs {vendor}" if vendor else "vs vendor", "status"):
        table.add_column(col, justify="right" if col not in ("impl", "dtype", "status") else "left")
    for r in rows:
        if r["status"] != "ok":
            table.add_row(r["impl"], r["dtype"], str(r["batch"]), str(r["seqlen"]), "", "", "", "", "", "",
                          f"{r['status']}: {r.get('reason') or ''}"[:90])
            continue
        table.add_row(r["impl"], r["dtype"], str(r["batch"]), str(r["seqlen"]), _fmt(r["median_ms"] * 1e3, ".1f"),
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


def annotations(verdict) -> list:
    """GitHub workflow commands: one ::error:: per failing case or error."""
    out = [f"::error title=perf gate error::{e}" for e in verdict.errors]
    for c in verdict.cases:
        if c.status in ("regression", "error"):
            out.append(f"::error title=perf {c.status}: {c.label}::" + "; ".join(c.reasons))
    for c in verdict.cases:
        for w in c.warnings:
            if w.startswith("drift"):
                out.append(f"::warning title=perf drift: {c.label}::{w}")
    return out


def tflops_plot(points, path, *, title="MLA decode TFLOPs") -> str:
    """points: [(impl, batch, seqlen, dtype, tflops)]; one panel per (batch, dtype)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(p[1], p[3]) for p in points})
    fig, axes = plt.subplots(1, max(len(panels), 1), figsize=(5.5 * max(len(panels), 1), 4), squeeze=False)
    for ax, (batch, dtype) in zip(axes[0], panels):
        for impl in dict.fromkeys(p[0] for p in points):
            xs = sorted((p[2], p[4]) for p in points if p[0] == impl and p[1] == batch and p[3] == dtype)
            if xs:
                ax.plot([x for x, _ in xs], [y for _, y in xs], marker="o", label=impl)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("seqlen")
        ax.set_ylabel("TFLOPs")
        ax.set_title(f"batch {batch}, {dtype}")
        ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


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


def calibration_plot(curves, path, *, threshold) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for label, curve in curves.items():
        ax.plot([s * 100 for s, _, _ in curve], [f for _, _, f in curve], marker="o", label=label)
    ax.axhline(0.95, color="grey", ls=":", lw=1)
    ax.axhline(0.01, color="grey", ls=":", lw=1)
    ax.axvline(threshold * 100, color="red", ls="--", lw=1, label=f"threshold {threshold:.1%}")
    ax.set_xlabel("injected slowdown (%)")
    ax.set_ylabel("share of gate runs that fail")
    ax.set_title("Gate calibration on recorded H200 noise")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)

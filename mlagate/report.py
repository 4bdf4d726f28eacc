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


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend (CI and GPU hosts have no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


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
    plt = pyplot()

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


# -- build reports (mlagate build) ---------------------------------------------

def _kernel_status(findings) -> dict:
    """kernel -> 'FAIL' | 'warn' (the worst of its findings)."""
    out = {}
    for f in findings:
        if f.kernel and out.get(f.kernel) != "FAIL":
            out[f.kernel] = "FAIL" if f.failed else "warn"
    return out


def _blocks(r) -> str:
    return "—" if r.get("blocks_per_sm") is None else f"{r['blocks_per_sm']} ({r['limited_by']})"


def _matrix(r) -> str:
    m = r.get("matrix") or {}
    shown = {k: v for k, v in m.items() if v or k == r.get("expected_matrix")}
    text = " ".join(f"{k} {v}" for k, v in shown.items()) or "—"
    return text + (" serialized" if r.get("wgmma_serialized") else "")


def _build_cells(r, cuda: bool) -> list:
    smem = f"{r.get('smem')} ({r.get('static_smem')} + {r.get('dynamic_smem')})"
    split = f"{r.get('num_split')}{' forced' if r.get('forced_split') else ''}"
    if not cuda:
        return [split, str(r.get("threads")), smem, _blocks(r), _matrix(r)]
    spill = "—" if r.get("spill_stores") is None else f"{r['spill_stores']} / {r['spill_loads']}"
    return [split, str(r.get("threads")), _fmt(r.get("registers"), "d"), spill, _fmt(r.get("stack_frame"), "d"),
            smem, _blocks(r), _matrix(r)]


def _build_header(rep) -> str:
    tc = rep["toolchain"]
    tools = (f"nvcc {tc['nvcc']}" if tc.get("nvcc") else f"hipcc {tc['hipcc']}" if tc.get("hipcc")
             else "no compiler: source level")
    check = {"sass": "cuobjdump -sass", "ptx": "PTX (cuobjdump not found)", "source": "lowered source"}
    check = check.get(tc["matrix_check"], tc["matrix_check"])
    return (f"{rep['target']}: {len(rep['kernels'])} kernels from {rep['sources']} sources, "
            f"tilelang {rep['tilelang']}, {tools}, matrix instructions from {check}, {rep['wall_s']} s")


def build_lines(rep, findings) -> list:
    """Terminal output of `mlagate build`: one line per kernel, then the findings."""
    status = _kernel_status(findings)
    cuda = rep["target"].startswith("cuda")
    names = (["splits", "thr", "regs", "spill st/ld B", "stack B", "smem B", "blocks/SM", "matrix"] if cuda else
             ["splits", "thr", "LDS B", "blocks/CU", "matrix"])
    lines = [_build_header(rep)]
    for r in rep["kernels"]:
        head = f"{status.get(r['kernel'], 'ok'):4} {rep['target']} {r['kernel']}"
        if r.get("error"):
            lines.append(f"{head}  error: {r['error']}")
        else:
            lines.append(head + "  " + "  ".join(f"{n} {c}" for n, c in zip(names, _build_cells(r, cuda))))
    lines += [f"{'FAIL' if f.failed else 'warn'}: [{f.rule}] {f.message}" for f in findings]
    return lines


def build_markdown(rep, findings) -> str:
    """One target's build report as a Markdown table, with its findings."""
    status = _kernel_status(findings)
    cuda = rep["target"].startswith("cuda")
    cols = (["splits", "threads", "registers", "spill st / ld B", "stack B", "smem B (static + dyn)",
             "blocks/SM (limit)", "matrix instr."] if cuda else
            ["splits", "threads", "LDS B (static + dyn)", "blocks/CU (limit)", "matrix instr."])
    lines = [f"### Build report: `{rep['target']}`", "", _build_header(rep), ""]
    if rep.get("source_level_only"):
        lines += ["Source level only: " + "; ".join(rep["source_level_only"]) + ".", ""]
    lines += ["| kernel | " + " | ".join(cols) + " | status |", "|---|" + "---:|" * len(cols) + "---|"]
    for r in rep["kernels"]:
        cells = [f"error: {r['error']}"] + [""] * (len(cols) - 1) if r.get("error") else _build_cells(r, cuda)
        lines.append(f"| {r['kernel']} | " + " | ".join(cells) + f" | {status.get(r['kernel'], 'ok')} |")
    if findings:
        lines += ["", *[f"- {'❌' if f.failed else '⚠️'} [{f.rule}] {f.message}" for f in findings]]
    return "\n".join(lines) + "\n"

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

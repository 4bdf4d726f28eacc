"""The report's figures: matplotlib PNGs (file-only Agg backend), no HTML."""

import itertools
import math

from mlagate.case import DENSE, WORKLOAD_TAG_MARK, Case
from mlagate.measure import metrics


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend (CI and GPU hosts have no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def roofline(peak, batch: int, seqlen: int, dtype: str, heads: int, q_len: int = 1,
             kv_dtype: str | None = None) -> float:
    """min(peak TFLOPs, arithmetic intensity x peak bandwidth) of a GPU's peaks (``Config.peaks``)."""
    traffic = metrics.bytes_moved(batch, heads, seqlen, dtype, q_len, kv_dtype=kv_dtype)
    intensity = metrics.flops(batch, heads, seqlen, q_len) / traffic
    return min(peak.tflops, intensity * peak.tbps)


def impl_order(cfg, impls):
    """The implementations present, in perf.yml's order, then any others by name."""
    present = set(impls)
    return [i for i in cfg.implementations if i in present] + sorted(present - set(cfg.implementations))


def _colors(cfg):
    return {impl: f"C{i}" for i, impl in enumerate(cfg.implementations)}


def tflops_png(path, cfg, results, peak) -> None:
    """One panel per (batch, dtype) in a row per head count and query length: TFLOPs vs seqlen per
    implementation, of the dense grid (a workload is one point, in the tables and the vendor ratio plot), against
    the roofline of ``peak`` (``Config.peaks`` of the run's GPU; None: no roofline)."""
    plt = pyplot()
    results = [r for r in results if not r.case.paged]
    cases = [r.case for r in results]
    shapes = sorted({(c.heads, c.q_len) for c in cases})
    columns = sorted({(c.batch, c.dtype, c.kv_dtype) for c in cases})
    fig, axes = plt.subplots(len(shapes), len(columns), figsize=(5.4 * len(columns) + 2.2, 3.8 * len(shapes)),
                             squeeze=False, layout="constrained")
    for ax, ((h, q), (batch, dtype, kv)) in zip(axes.flat, itertools.product(shapes, columns)):
        panel = [r for r in results
                 if (r.case.heads, r.case.q_len, r.case.batch, r.case.dtype, r.case.kv_dtype)
                 == (h, q, batch, dtype, kv)]
        title = f"{h} heads" + (f", s_q={q}" if q != 1 else "") + f", batch {batch}, {dtype}" + \
            (f", {kv} cache" if kv != dtype else "")
        if len({r.case.seqlen for r in panel}) == 1:  # one point per line says nothing a table does not
            seqlen = panel[0].case.seqlen
            rows = [[impl, f"{r.tflops:.1f}"] for impl in impl_order(cfg, [c.impl for c in cases])
                    for r in panel if r.case.impl == impl and r.tflops is not None]
            if peak:
                rows.append(["roofline", f"{roofline(peak, batch, seqlen, dtype, h, q, kv):.1f}"])
            one_point_table(ax, rows, ["implementation", f"TFLOPs at seqlen {seqlen}"], title)
            continue
        for impl in impl_order(cfg, [c.impl for c in cases]):
            pts = sorted((r.case.seqlen, r.tflops) for r in panel if r.case.impl == impl and r.tflops is not None)
            if pts:
                ax.plot(*zip(*pts), marker="o", color=_colors(cfg).get(impl), label=impl)
        seqlens = sorted({r.case.seqlen for r in panel}) or [1]
        if peak:
            ax.plot(seqlens, [roofline(peak, batch, s, dtype, h, q, kv) for s in seqlens], "k--", marker="_",
                    ms=14,
                    label=f"roofline: min({peak.tflops:g} TFLOPs, intensity × {peak.tbps:g} TB/s)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(seqlens, [str(s) for s in seqlens])
        ax.set_ylim(bottom=0)
        ax.set(xlabel="seqlen", ylabel="TFLOPs", title=title)
        ax.grid(True, alpha=0.3)
    handles, labels = next((ax.get_legend_handles_labels() for ax in axes.flat if ax.lines), ([], []))
    if handles:
        fig.legend(handles, labels, loc="outside right upper", fontsize=8)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def one_point_table(ax, rows, header, title) -> None:
    """A panel whose every series has one point: its values as a table, under the panel's title."""
    ax.axis("off")
    ax.set_title(title, fontsize=9)
    if rows:
        t = ax.table(cellText=rows, colLabels=header, loc="upper center", cellLoc="left")
        t.auto_set_font_size(False)
        t.set_fontsize(8)
        t.scale(1, 1.3)


def ratio_png(path, cfg, results, platform) -> None:
    plt = pyplot()
    p, floor = cfg.platform(platform), cfg.gate.ratio[platform].floor
    impl, vendor = p.tilelang, " | ".join(p.vendor_impls())  # an fp8 cache's ratio may be another vendor's
    cases = sorted((r.case.heads, r.case.q_len, r.case.batch, r.case.seqlen, r.case.dtype, r.case.kv_dtype,
                    r.case.workload, r.vendor_ratio)
                   for r in results if r.case.impl == impl and r.vendor_ratio is not None)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.75 * len(cases) + 4.0), 3.4), layout="constrained")
    x = range(len(cases))
    values = [c[-1] for c in cases]
    bars = ax.bar(x, values, color=["C2" if v >= floor else "C3" for v in values], width=0.6)
    ax.bar_label(bars, [f"{v:.2f}" for v in values], fontsize=8)
    ax.axhline(floor, color="C3", ls="--", label=f"gate floor {floor:.2f} (gate.vendor_ratio.{platform}.floor)")
    ax.axhline(1.0, color="grey", lw=1, label=f"= {vendor}")
    ticks = [f"h{h}" + (f" s_q={q}" if q != 1 else "") + f" b{b} s{s}\n{d}" + (f" kv={kv}" if kv != d else "")
             + ("" if w == DENSE else f"\n{_name(w)}") for h, q, b, s, d, kv, w, _ in cases]
    ax.set_xticks(list(x), ticks, fontsize=8, rotation=30 if len(cases) > 4 else 0)
    ax.set_ylim(0, max([1.1, *values]) * 1.12)
    ax.set(ylabel=f"TFLOPs {impl} / {vendor}", title=f"{impl} vs {vendor} per case")
    fig.legend(loc="outside lower center", ncols=2, fontsize=8)  # below the axes: never over the title
    ax.grid(True, axis="y", alpha=0.3)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def trend_png(path, cfg, commits, series) -> None:
    """series: {Case: [latency s or None per commit]}; one panel per point (batch ... kv_dtype, workload)."""
    plt = pyplot()
    panels = sorted({c.key[1:] for c in series})
    ncols = min(len(panels), 5)
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.3 * ncols + 1.8, 2.7 * nrows), squeeze=False,
                             layout="constrained")
    labels = [c.commit[:8] for c in commits]
    for ax, (batch, seqlen, dtype, heads, q_len, kv, workload) in zip(axes.flat, panels):
        title = f"h{heads}" + (f" s_q={q_len}" if q_len != 1 else "") + f" b{batch} s{seqlen} {dtype}" + \
            (f" kv={kv}" if kv != dtype else "") + ("" if workload == DENSE else f" {_name(workload)}")
        if len(commits) == 1:  # one commit: each line would be one point
            rows = [[impl, f"{values[0] * 1e6:.1f}"] for impl in impl_order(cfg, [c.impl for c in series])
                    if (values := series.get(Case(impl, batch, seqlen, dtype, heads, q_len, kv, workload)))
                    and values[0]]
            one_point_table(ax, rows, ["implementation", f"median µs, {labels[0]}"], title)
            continue
        for impl in impl_order(cfg, [c.impl for c in series]):
            values = series.get(Case(impl, batch, seqlen, dtype, heads, q_len, kv, workload))
            if values:
                ax.plot(range(len(labels)), [v * 1e6 if v is not None else math.nan for v in values], marker="o",
                        ms=4, color=_colors(cfg).get(impl), label=impl)
        ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=7)
        ax.set_ylim(bottom=0)
        ax.set_title(title, fontsize=9)
        ax.set_ylabel("median µs", fontsize=8)
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    handles, names = next((ax.get_legend_handles_labels() for ax in axes.flat if ax.lines), ([], []))
    if handles:
        fig.legend(handles, names, loc="outside right upper", fontsize=8)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _name(workload: str) -> str:
    return workload.partition(WORKLOAD_TAG_MARK)[0]  # the digest of its definition is in the data


def calibration_plot(curves, path, *, threshold, measured=()) -> str:
    """The simulated detection curves; ``measured``: [(label, injected, share failed, runs)] of a
    real ladder (`mlagate ladder`), drawn as points on them."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for label, curve in curves.items():
        ax.plot([s * 100 for s, _, _ in curve], [f for _, _, f in curve], marker="o", ms=3, lw=1,
                label=f"simulated: {label}")
    for label in dict.fromkeys(m[0] for m in measured):
        points = [(x, y) for name, x, y, _ in measured if name == label]
        ax.scatter([x * 100 for x, _ in points], [y for _, y in points], marker="X", s=60, zorder=3,
                   label=f"H200 ladder: {label}")
    ax.axhline(0.95, color="grey", ls=":", lw=1)
    ax.axhline(0.01, color="grey", ls=":", lw=1)
    ax.axvline(threshold * 100, color="red", ls="--", lw=1, label=f"threshold {threshold:.1%}")
    ax.set_xlabel("injected slowdown (%)")
    ax.set_ylabel("share of gate runs that fail")
    ax.set_title("Gate calibration: recorded H200 noise" + (" and a real ladder" if measured else ""))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


def distributions_png(path, cases, *, threshold: float) -> None:
    """cases: [(label, base samples, head samples, regressed)], top row first. Every sample of both
    sides relative to base's median, one row per case, so every case shares one axis."""
    import numpy as np

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9.5, 0.42 * len(cases) + 1.3), layout="constrained")
    rng = np.random.default_rng(0)  # the jitter only spreads the dots; it never moves a value
    for row, (label, base, head, regressed) in enumerate(cases):
        base, head = np.asarray(base, dtype=float), np.asarray(head, dtype=float)
        reference = np.median(base)
        for side, values, offset, color in (("base", base, 0.17, "0.55"), ("head", head, -0.17,
                                                                           "C3" if regressed else "C0")):
            rel = (values / reference - 1) * 100
            y = -row + offset + rng.uniform(-0.09, 0.09, len(rel))
            ax.scatter(rel, y, s=5, color=color, alpha=0.45, linewidths=0, label=side if row == 0 else None)
            ax.plot([np.median(rel)] * 2, [-row + offset - 0.14, -row + offset + 0.14], color=color, lw=2.2)
    ax.axvline(threshold * 100, color="C3", ls="--", lw=1, label=f"threshold +{threshold:.1%}")
    ax.axvline(0, color="0.3", lw=0.8)
    ax.set_yticks([-i for i in range(len(cases))], [c[0] for c in cases], fontsize=8)
    ax.set_ylim(-len(cases) + 0.5, 0.5)
    ax.set_xlabel("latency relative to base's median (%); bars: medians")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.savefig(path, dpi=100)
    plt.close(fig)

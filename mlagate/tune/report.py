"""`mlagate tune`'s report (tune.md, also the scheduled workflow's job summary): per shape the fastest
candidates beside the family default and the committed config, what was skipped or failed and why, and
where the committed table is beaten."""

import time

from mlagate.case import RunStatus
from mlagate.tune.rules import DriftKind, gain

TOP = 5  # fastest candidates listed per shape


def _label(shape: tuple) -> str:
    batch, seqlen, heads, dtype, s_q = shape
    return f"h={heads}" + (f" s_q={s_q}" if s_q != 1 else "") + f" b={batch} s={seqlen} {dtype}"


def _speedup(result, default) -> str:
    change = gain(result, default)
    return "–" if change is None else f"{change:+.1%}"


def _drift_line(d) -> str:
    if d.kind == DriftKind.BROKEN:
        return f"- **{_label(d.shape)}**: the committed `{d.committed}` did not measure: {d.reason}"
    return (f"- **{_label(d.shape)}**: `{d.best}` is {d.change:+.1%} faster than the committed `{d.committed}`")


def _shape_lines(s) -> list:
    default, committed = s.results.get(s.default), s.duplicates.get(s.committed, s.committed)
    ok = sorted((r for r in s.results.values() if r.status == RunStatus.OK), key=lambda r: -r.tflops)
    shown = [r.case.impl for r in ok[:TOP]]
    shown = list(dict.fromkeys(shown + [impl for impl in (s.default, committed) if impl in s.results]))
    lines = [f"### {_label(s.shape)}", ""]
    if s.winner:
        lines.append(f"Winner `{s.winner.impl}`: {s.winner.result.tflops:.1f} TFLOPs, "
                     + (f"{s.winner.gain:+.1%} against the default." if s.winner.gain is not None else
                        "the default did not measure."))
    else:
        lines.append("No candidate measured.")
    lines += ["", "| candidate | median µs | TFLOPs | vs default | |", "|---|---:|---:|---:|---|"]
    for impl in shown:
        r = s.results[impl]
        tags = [t for t, on in (("winner", s.winner and impl == s.winner.impl), ("default", impl == s.default),
                                ("committed", impl == committed)) if on]
        median = f"{r.median_ms * 1000:.1f}" if r.status == RunStatus.OK else r.status.value
        tflops = f"{r.tflops:.1f}" if r.status == RunStatus.OK else "–"
        lines.append(f"| `{impl}` | {median} | {tflops} | {_speedup(r, default)} | {', '.join(tags)} |")
    not_run = [r for r in s.results.values() if r.status != RunStatus.OK]
    counts = {status: sum(r.status == status for r in not_run) for status in (RunStatus.SKIPPED, RunStatus.FAILED)}
    lines += ["", f"{len(ok)} measured, {len(s.duplicates)} the same launch as another (measured once), "
                  f"{counts[RunStatus.SKIPPED]} skipped, {counts[RunStatus.FAILED]} failed."]
    if not_run:
        lines += ["", "<details><summary>skipped and failed, with the reason</summary>", ""]
        by_reason = {}  # one line per reason: a lowering error is often the same for many candidates
        for r in not_run:
            reason = (r.reason or "")[:300].replace("<", "&lt;")  # compiler text, not HTML
            by_reason.setdefault(f"{r.status.value}: {reason}", []).append(f"`{r.case.impl}`")
        lines += [f"- {len(impls)} {reason}<br>{', '.join(impls)}" for reason, impls in by_reason.items()]
        lines += ["", "</details>"]
    return lines + [""]


def markdown(shapes, identity: dict, command: str, threshold: float) -> str:
    gpus = sorted({r.samples.device for s in shapes for r in s.results.values() if r.samples})
    drifts = [s.drift for s in shapes if s.drift]
    lines = [f"## mlagate tune: {identity['family']} on {identity['arch']}, {identity['grid']} grid", "",
             f"Measured on {', '.join(gpus) or 'no GPU'} with tilelang {identity['tilelang']}, kernel sha256 "
             f"{identity['kernel_sha256'][:12]}; report written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
             f"by `{command}`. A candidate is the family default with the perf.yml tune space's values; "
             "\"committed\" is the table's config (kernels/tuned/), or the default where the table has none.", ""]
    if drifts:
        lines += [f"**The committed table is beaten** (by more than the gate's latency threshold, "
                  f"{threshold:+.1%}) or broken at {len(drifts)} shape(s):", "", *map(_drift_line, drifts), ""]
    else:
        lines += [f"No candidate beats the committed config of any shape by more than {threshold:+.1%}.", ""]
    for s in shapes:
        lines += _shape_lines(s)
    return "\n".join(lines)

"""The schedule diagnosis of workload cases, as gate.md and the comparison page show it: per case, how evenly
TileLang's plan and the vendor's (FlashMLA's, replayed) deal the batch over the GPU's partitions
(mlagate/decide/schedule.py computes it; this only formats)."""

from mlagate.case import case_label
from mlagate.report.page import escape, table

INTRO = ("The longest partition's planned work (tiles plus each piece's fixed cost) over the mean, per scheduler "
         "on the case's own lengths: 1.00x is an even deal (docs/kernels.md, the paged kernel).")
UNKNOWN = "Schedule balance: not shown, the measuring GPU's architecture is not recorded."


def _shown(schedules: dict) -> list:
    return sorted(schedules.items(), key=lambda kv: case_label(kv[0]))


def lines(schedules: dict) -> list:
    """'<case>: TileLang: longest partition 1.04x the mean; FlashMLA: 1.02x', one per workload case."""
    return [f"{case_label(key)}: {d.text()}" for key, d in _shown(schedules)]


def markdown(schedules: dict | None) -> list:
    """gate.md's folded section, one line per workload case; nothing where the verdict has none."""
    if schedules is None:
        return ["", UNKNOWN]
    if not schedules:
        return []
    out = ["", "### Schedule balance (workload cases)", "",
           f"<details><summary>{len(schedules)} workload cases</summary>", "", INTRO, ""]
    return out + [f"- {line}" for line in lines(schedules)] + ["", "</details>"]


def _cells(b) -> list:
    if b is None:
        return ['<span class="na">—</span>'] * 3
    return [str(b.parts) + (f" <small>({b.idle} idle)</small>" if b.idle else ""), f"{b.makespan_ratio:.2f}x",
            f"{b.tile_ratio:.2f}x"]


def html(schedules: dict | None) -> str:
    """The comparison page's section: a table of both plans' balance per workload case."""
    if schedules is None:
        return f"<h2>Schedule balance</h2><p class=\"na\">{escape(UNKNOWN)}</p>"
    if not schedules:
        return ""
    header = ["case", "TileLang partitions", "makespan / mean", "max / mean tiles", "FlashMLA partitions (replay)",
              "makespan / mean", "max / mean tiles"]
    rows = [[escape(case_label(key)), *_cells(d.tilelang), *_cells(d.vendor)] for key, d in _shown(schedules)]
    why = "".join(f"<li>{escape(case_label(key))}: {escape(d.why)}</li>" for key, d in _shown(schedules) if d.why)
    return (f"<h2>Schedule balance of the workload cases</h2><p>{escape(INTRO)}</p>{table(header, rows)}"
            + (f"<ul>{why}</ul>" if why else ""))

"""The report's figures are readable: no legend over a title, and a series of one point drawn as a table."""

import pytest

from mlagate import config
from mlagate.cli import demo
from mlagate.report import plots, site
from mlagate.report.history import series_of
from mlagate.store.results import Store


@pytest.fixture
def figures(monkeypatch):
    """Every figure the plot functions make, kept open instead of closed."""
    real, kept = plots.pyplot(), []

    class Keep:
        def __getattr__(self, name):
            return getattr(real, name)

        @staticmethod
        def close(fig):
            kept.append(fig)

    monkeypatch.setattr(plots, "pyplot", lambda: Keep())
    yield kept
    for fig in kept:
        real.close(fig)


def overlaps(fig) -> list:
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    return [(ax.get_title(), i) for ax in fig.axes if ax.get_title() for i, legend in enumerate(legends)
            if legend.get_window_extent(renderer).overlaps(ax.title.get_window_extent(renderer))]


def demo_rows():
    store = Store(demo.HISTORY)
    return [store.load(demo.MACHINE, c) for c in (demo.BASE, demo.HEAD)]


def test_no_legend_covers_a_title_and_one_point_series_are_tables(figures, tmp_path):
    cfg = config.load()
    base, head = demo_rows()
    rows = site.commit_rows(head)
    plots.tflops_png(tmp_path / "t.png", cfg, rows, cfg.peaks("sm_90"))
    plots.ratio_png(tmp_path / "r.png", cfg, rows, "cuda")
    plots.trend_png(tmp_path / "trend.png", cfg, [base, head], series_of([base, head]))
    tflops, ratio, trend = figures
    assert [overlaps(f) for f in figures] == [[], [], []]
    # the demo's quick grid has one seqlen: every TFLOPs panel is a table, with no line
    assert all(not ax.lines and ax.tables for ax in tflops.axes)
    assert {ax.get_title() for ax in tflops.axes} == {"16 heads, batch 64, float16", "16 heads, batch 128, float16"}
    cells = {c.get_text().get_text() for ax in tflops.axes for c in ax.tables[0].get_celld().values()}
    assert {"tilelang-seesaw", "flash_mla", "roofline", "TFLOPs at seqlen 4096"} <= cells
    assert trend.axes[0].lines  # two commits: lines


def test_a_trend_of_one_commit_is_a_table(figures, tmp_path):
    cfg = config.load()
    _, head = demo_rows()
    plots.trend_png(tmp_path / "trend.png", cfg, [head], series_of([head]))
    (fig,) = figures
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert shown and all(not ax.lines and ax.tables for ax in shown)
    assert any(ax.get_title().endswith(" ragged-4k") for ax in shown)  # the workload's name, not its digest
    assert overlaps(fig) == []

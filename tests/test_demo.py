"""First contact without a GPU: `mlagate demo` (what `make bench` runs on a CPU machine) gates and reports
recorded H200 results, and the comparison page a reviewer opens from the PR comment."""

import hashlib
import json
import re
from pathlib import Path

import pytest

from mlagate import cli
from mlagate.cli import demo
from mlagate.measure import environment
from mlagate.report import comparison

ROOT = Path(__file__).resolve().parent.parent


def tree_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(folder)).encode() + p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def demo_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    before = tree_digest(demo.HISTORY)
    assert cli.main(["demo", "--out", str(out)]) == 0
    assert tree_digest(demo.HISTORY) == before  # the kept history is read, never written
    return out


def test_the_demo_gates_the_recorded_pair_and_writes_both_pages(demo_out, capsys):
    verdict = json.loads((demo_out / "gate" / "verdict.json").read_text())
    assert (verdict["outcome"], verdict["exit_code"]) == ("regression", 1)
    assert (verdict["base"], verdict["head"]) == (demo.BASE, demo.HEAD)
    for page in ("gate/comparison.html", "gate/distributions.png", "gate/gate.md", "report/index.html"):
        assert (demo_out / page).stat().st_size > 500, page
    assert "comparison.html" in (demo_out / "gate" / "gate.md").read_text()


def test_the_demo_gate_md_reads_in_ten_seconds(demo_out):
    """One summary line, the file the failing cases depend on, a reproduce command per failing case, every
    case folded, and no image a job summary cannot load."""
    md = (demo_out / "gate" / "gate.md").read_text()
    assert md.splitlines()[2] == ("**2 of 18 gated cases regressed (+7.2% to +11.2%); worst "
                                  "`tilelang-seesaw h=16 b=128 s=4096 float16` +11.2%.**")
    changed = md.split("### Changed files the failing cases depend on")[1].split("###")[0]
    assert changed.strip() == "- `kernels/mla_decode.py`: 2 of the 2 failing cases"
    reproduce = md.split("### Reproduce on a GPU host")[1].split("<details>")[0]
    for b in (64, 128):
        assert f"tilelang-seesaw h=16 b={b} s=4096 float16" in reproduce
    assert (f"git checkout {demo.HEAD[:12]} && mlagate bench --grid quick --impl tilelang-seesaw --impl flash_mla "
            "--dtype float16") in reproduce
    assert f"mlagate gate --base {demo.BASE} --head {demo.HEAD} --machine h200 --confirm" in reproduce
    assert "<details><summary>All 18 cases</summary>" in md
    assert "![" not in md and "tflops.png" in md  # named as a file of the artifact, never a relative image


def test_the_demo_verdict_fails_the_injected_change_and_its_numbers_agree(demo_out):
    """The head forces 4 KV splits in the seesaw (demo/README.md): exactly its dense cases fail, each on a
    latency rise and a vendor-ratio drop that the recorded TFLOPs bear out (ratio = TFLOPs over FlashMLA's)."""
    from mlagate.store.results import Store
    from mlagate.store.results_file import BENCH_RATIO, BENCH_TFLOPS

    verdict = json.loads((demo_out / "gate" / "verdict.json").read_text())
    failing = sorted(tuple(c["case"]) for c in verdict["cases"] if c["status"] == "regression")
    assert failing == [("tilelang-seesaw", b, 4096, "float16", 16, 1, "float16", "dense") for b in (64, 128)]
    store = Store(demo.HISTORY)
    for commit, side in ((demo.BASE, "base_vendor_ratio"), (demo.HEAD, "vendor_ratio")):
        results = store.load(demo.MACHINE, commit)
        tflops, ratios = results.entries(BENCH_TFLOPS), results.entries(BENCH_RATIO)
        for case in failing:
            vendor = ("flash_mla", *case[1:])
            assert ratios[case].value == pytest.approx(tflops[case].value / tflops[vendor].value, rel=1e-3)
            cv = next(c for c in verdict["cases"] if tuple(c["case"]) == case)
            assert cv[side] == pytest.approx(ratios[case].value)
    for cv in (c for c in verdict["cases"] if c["status"] == "regression"):
        assert cv["change"] > 0.025 and cv["vendor_ratio"] < cv["base_vendor_ratio"]


def test_every_page_says_it_is_recorded_data_with_date_and_hardware(demo_out):
    page = (demo_out / "gate" / "comparison.html").read_text()
    assert "Recorded data" in page
    for side, when in (("base", "2026-12-01T22:27:02Z"), ("head", "2026-12-01T22:28:25Z")):
        line = re.search(rf"<li>{side} <code>[0-9a-f]+</code>: measured ([^<]*) on ([^<]*)</li>", page)
        assert line and line[1] == when and "NVIDIA H200" in line[2], side
    index = (demo_out / "report" / "index.html").read_text()
    assert "NVIDIA H200" in index and "2026-12-01" in index


def test_regressions_come_first_with_an_interval_around_the_change(demo_out):
    page = (demo_out / "gate" / "comparison.html").read_text()
    rows = re.findall(r"<tr><td>([^<]*)</td><td>([^<]*)</td><td>[^<]*</td><td>[^<]*</td><td>([+-][\d.]+)% "
                      r"<small>\[([+-][\d.]+)%, ([+-][\d.]+)%\]</small>", page)
    assert rows, "no case row with an interval"
    statuses = [status for _, status, *_ in rows]
    assert statuses == sorted(statuses, key=lambda s: "regression" not in s)
    for label, _, change, low, high in rows:
        assert float(low) <= float(change) <= float(high), label


def test_the_history_marks_the_commit_the_gate_fails(demo_out):
    index = (demo_out / "report" / "index.html").read_text()
    header = index[index.index('<table class="trend">'):].split("</thead>")[0]
    marked = re.findall(r"<code>([0-9a-f]{8})</code>(.*?)</th>", header)
    assert [c for c, mark in marked if "✗ gate" in mark] == [demo.HEAD[:8]]


def test_the_trend_shows_each_change_coloured_and_the_failed_cases_marked(demo_out):
    index = (demo_out / "report" / "index.html").read_text()
    trend = index[index.index('<table class="trend">'):].split("</table>")[0]
    row = next(r for r in trend.split("<tr>") if "tilelang-seesaw" in r and "<td>128</td>" in r
               and "<td title=\"dense\">dense</td>" in r)
    assert '<td class="failed">175.0 <small class="up">+11.2%</small> ✗</td>' in row
    ragged = next(r for r in trend.split("<tr>") if "tilelang-seesaw" in r and ">ragged-4k</td>" in r)
    assert "0139e575" in ragged and "✗" not in ragged  # the digest only in the cell's title
    assert "ragged-4k@" not in index.replace('title="ragged-4k@', "")  # no digest a reader sees
    page = re.search(r'href="(cases/tilelang-seesaw-128-4096-float16-16-dense\.html)"', row)[1]
    html = (demo_out / "report" / page).read_text()
    assert "<svg" in html and "<script" not in html and "+11.2%" in html and "✗ gate" in html


def test_change_interval_brackets_the_medians_ratio():
    base = [100.0 + i % 7 for i in range(200)]
    head = [110.0 + i % 7 for i in range(200)]
    low, high = comparison.change_interval(base, head)
    assert low < 110 / 100 - 1 < high and high - low < 0.2
    assert comparison.change_interval([1.0] * 5, [1.0] * 5) is None  # too few samples for a 99% interval


def test_resource_changes_name_only_kernels_that_moved():
    kernel = {"kernel": "k", "registers": 128, "spill_stores": 0, "spill_loads": 0, "smem": 1024, "blocks_per_sm": 2}
    same = {**kernel, "kernel": "same"}
    base = {"kernels": [kernel, same]}
    head = {"kernels": [{**kernel, "registers": 168, "blocks_per_sm": 1}, same]}
    rows = comparison.resource_changes({"cuda:sm_90a": (base, head), "hip:gfx942": (None, head)})
    assert rows == [["cuda:sm_90a", "k", "registers: 128 → 168; blocks/SM: 2 → 1"]]


def test_a_gpu_host_is_told_by_its_device_nodes(monkeypatch):
    seen = []
    monkeypatch.setattr(Path, "exists", lambda self: seen.append(str(self)) or str(self) == "/dev/kfd")
    assert environment.gpu_host() and "/dev/kfd" in seen
    monkeypatch.setattr(Path, "exists", lambda self: False)
    assert not environment.gpu_host()


# -- in a browser ------------------------------------------------------------------

@pytest.fixture(scope="module")
def pages(demo_out):
    return demo_out  # conftest's browser serves it


@pytest.mark.slow  # opens every page the demo links (a page per case): ~40 s of Chromium
@pytest.mark.parametrize("page", ["gate/comparison.html", "report/index.html"])
def test_pages_load_cleanly_link_nowhere_dead_and_read_at_a_narrow_width(browser, page):
    from test_report_browser import ARTIFACTS, _assert_clean

    base, chromium = browser
    seen = chromium.open(base + page, ready="document.readyState == 'complete'")
    _assert_clean(seen, base)
    images = chromium.evaluate("[...document.images].map(i => [i.getAttribute('src'), i.naturalWidth])")
    assert images and all(width > 300 for _, width in images), images
    links = chromium.evaluate("[...document.links].map(a => a.href)")
    for link in {link.split("#")[0] for link in links}:
        seen = chromium.open(link, ready="document.readyState == 'complete'")
        assert seen["errors"] == [], link
    chromium.open(base + page, ready="document.readyState == 'complete'")
    name = Path(page).stem
    chromium.screenshot(ARTIFACTS / f"demo-{name}.png")
    chromium.call("Emulation.setDeviceMetricsOverride", width=420, height=900, deviceScaleFactor=1, mobile=False)
    try:
        chromium.open(base + page, ready="document.readyState == 'complete'")
        overflow = chromium.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{page} is {overflow} px wider than a 420 px screen"
    finally:
        chromium.call("Emulation.clearDeviceMetricsOverride")

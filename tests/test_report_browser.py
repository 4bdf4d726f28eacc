"""The published report (`mlagate report`), built from the checked-in H200 results.

The summary page's content is checked without a browser. Then headless Chromium
(Debian's `chromium`) opens the summary page, asv's pages and a link from one to
the other over http://127.0.0.1, driven through the DevTools protocol: every
uncaught exception, console error or failed load is a JavaScript error, and
every request must stay on the local server. Screenshots go to out/ (CI
artifacts). `python tests/test_report_browser.py PNG` writes the summary page's
screenshot from the full-grid asv record (docs/report-summary-h200.png).
"""

import re
import sys
import tempfile
from pathlib import Path

import pytest

from chromium import no_browser, serving, skip_reason
from mlagate import cli, config
from mlagate.case import Case
from mlagate.measure import environment
from mlagate.report import site
from mlagate.store.env import RunEnv

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "h200"
BENCH_JSON = FIXTURES / "bench_full_fp16_2026-11-29.json"
ARTIFACTS = ROOT / "out"


def build_report(out: Path, *extra, results=FIXTURES / "results") -> Path:
    code = cli.main(["report", "--results", str(results), "--out", str(out), *extra])
    if code != 0:
        raise RuntimeError(f"mlagate report exited {code}")
    return out


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return build_report(tmp_path_factory.mktemp("report"))


# -- without a browser ------------------------------------------------------------

def test_summary_page_content(report, tmp_path):
    page = (report / "index.html").read_text()
    assert "<script" not in page.lower()
    for png in ("tflops.png", "vendor_ratio.png", "trend.png"):
        assert f'src="{png}"' in page and (report / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for version in ("NVIDIA H200", "sm_90", "580.159.04", "CUDA 13.0", "2.11.0+cu130", "3.6.0", "0.1.15"):
        assert version in page, version
    floor = config.load().gate.ratio["cuda"].floor
    assert f"gate floor {floor:.2f}" in page and "roofline of sm_90" in page
    assert page.count("<table") == 3  # versions, newest run, trend
    for commit in ("b292e892", "22e8a671", "fbc171ef"):  # the trend has every recorded commit
        assert f"<code>{commit}</code>" in page
    assert "asv/index.html#mla_decode.TimeDecode.time_decode?machine=h200&amp;p-impl=&#x27;tilelang-hopper&#x27;" \
           "&amp;p-batch=64&amp;p-seqlen=4096&amp;p-dtype=&#x27;float16&#x27;" in page
    assert (report / "asv" / "index.html").is_file() and (report / "asv" / "graphs").is_dir()

    full = (build_report(tmp_path / "full", "--bench-json", str(BENCH_JSON)) / "index.html").read_text()
    assert "full-grid bench" in full and "<td>16384</td>" in full and "tilelang-cdna3" in full
    assert "skipped" in full  # aiter: not installed on that host
    # both runs recorded everything shown but the clock control, read since 2026-11-30
    assert full.count('class="na">not recorded') == 2


def test_missing_versions_read_not_recorded():
    html = site.env_table([("a run", None), ("another", RunEnv(start={"gpu": "NVIDIA H200"}))])
    assert html.count("not recorded") == 2 * len(environment.FIELDS) - 1 and "NVIDIA H200" in html


def test_asv_urls_follow_asv_hash_scheme():
    url = site.asv_url("b.x", "m 1", Case("tilelang-hopper", 64, 4096, "float16", 16))
    assert url == "asv/index.html#b.x?machine=m%201&p-impl='tilelang-hopper'&p-batch=64&p-seqlen=4096" \
                  "&p-dtype='float16'&p-heads=16&p-q_len=1&p-kv_dtype='float16'"


# -- in headless Chromium ---------------------------------------------------------

@pytest.fixture(scope="module")
def pages(report):  # what the `browser` fixture (conftest.py) serves
    return report


def _assert_clean(seen, base):
    assert seen["errors"] == []
    outside = [u for u in seen["requests"] if not u.startswith((base, "data:"))]
    assert outside == [], "requests left the local server"


def test_summary_page_in_chromium(browser):
    base, chromium = browser
    seen = chromium.open(base + "index.html", ready="document.readyState == 'complete'")
    _assert_clean(seen, base)
    images = chromium.evaluate("[...document.images].map(i => [i.getAttribute('src'), i.naturalWidth])")
    assert sorted(src for src, _ in images) == ["tflops.png", "trend.png", "vendor_ratio.png"]
    assert all(width > 300 for _, width in images), images  # loaded, not a broken icon
    assert chromium.evaluate("document.scripts.length") == 0
    assert chromium.evaluate("document.querySelectorAll('table').length") == 3
    assert "NVIDIA H200" in chromium.evaluate("document.querySelector('table.env').innerText")
    chromium.screenshot(ARTIFACTS / "report-screenshot.png")


def test_asv_pages_in_chromium(browser):
    base, chromium = browser
    seen = chromium.open(base + "asv/index.html", ready="document.querySelectorAll('.benchmark-container').length")
    _assert_clean(seen, base)
    names = chromium.evaluate("[...document.querySelectorAll('.benchmark-text')].map(e => e.textContent)")
    assert names == ["Throughput.track_tflops", "Throughput.track_vendor_ratio", "TimeDecode.time_decode"]
    chromium.screenshot(ARTIFACTS / "report-asv-screenshot.png")

    # A case link of the summary page opens that case's graph in asv.
    chromium.open(base + "index.html", ready="document.readyState == 'complete'")
    link = chromium.evaluate("document.querySelector('table.trend a').href")
    seen = chromium.open(link, ready="document.querySelectorAll('#main-graph canvas.flot-base').length")
    _assert_clean(seen, base)
    assert chromium.evaluate("document.querySelector('.nav .active, .navbar .active').innerText.trim()") \
        == "mla_decode.TimeDecode.time_decode"
    selected = chromium.evaluate("[...document.querySelectorAll('.btn.active')].map(b => b.innerText.trim())")
    assert {"tilelang-hopper", "64", "4096", "float16", "h200"} <= set(selected), selected
    chromium.screenshot(ARTIFACTS / "report-asv-graph-screenshot.png")


def test_full_grid_asv_record_renders(tmp_path):
    """The full fp16 grid as asv recorded it on the H200 (two commits, 7 implementations x 10 points)."""
    if skip_reason():  # before the report is built
        pytest.skip(skip_reason())
    report = build_report(tmp_path / "report", results=FIXTURES / "results-full")
    with serving(report, tmp_path / "chromium-profile") as (base, chromium):
        seen = chromium.open(base + "asv/index.html", ready="document.querySelectorAll('.benchmark-container').length")
        _assert_clean(seen, base)
        graph = base + site.asv_url("mla_decode.TimeDecode.time_decode", "h200",
                                    Case("flashinfer", 128, 16384, "float16", 128))
        seen = chromium.open(graph, ready="document.querySelectorAll('#main-graph canvas.flot-base').length")
        _assert_clean(seen, base)
        selected = chromium.evaluate("[...document.querySelectorAll('.btn.active')].map(b => b.innerText.trim())")
        assert {"flashinfer", "128", "16384", "float16"} <= set(selected), selected
        chromium.screenshot(ARTIFACTS / "report-full-grid-asv-graph.png")


def without_debian_js(tmp_path, monkeypatch) -> Path:
    """The report as a machine without Debian's libjs-* packages builds it."""
    monkeypatch.setattr(site, "DEBIAN_JS", tmp_path / "no-libjs")
    return build_report(tmp_path / "report")


def local_links(page: str) -> list:
    return sorted({h for h in re.findall(r'href="([^"#]+)', page) if not h.startswith(("http", "data:"))})


def test_without_the_debian_packages_no_page_links_a_blank_asv_page(tmp_path, monkeypatch):
    report = without_debian_js(tmp_path, monkeypatch)
    page = (report / "index.html").read_text()
    assert "asv/" not in " ".join(local_links(page)) and "not linked: they load their scripts from CDNs" in page
    cases = [h for h in local_links(page) if h.startswith("cases/")]
    assert cases and all((report / h).is_file() for h in cases)
    assert all("<script" not in (report / h).read_text() for h in cases)


def test_every_history_page_loads_without_a_javascript_error_and_without_the_debian_packages(tmp_path, monkeypatch):
    if no_browser():
        pytest.skip(no_browser())
    report = without_debian_js(tmp_path, monkeypatch)
    with serving(report, tmp_path / "chromium-profile", asv=False) as (base, chromium):
        pages, seen_pages = ["index.html"], set()
        while pages:
            page = pages.pop()
            if page in seen_pages:
                continue
            seen_pages.add(page)
            seen = chromium.open(base + page, ready="document.readyState == 'complete'")
            _assert_clean(seen, base)
            assert chromium.evaluate("document.scripts.length") == 0, page
            here = page.rpartition("/")[0]
            pages += [str(Path(here, h)).replace("cases/../", "") for h in local_links((report / page).read_text())]
        assert seen_pages == {"index.html"} | {f"cases/{p.name}" for p in (report / "cases").iterdir()}
        chromium.open(base + sorted(p for p in seen_pages if "seesaw" in p or "hopper" in p)[0],
                      ready="document.readyState == 'complete'")
        chromium.screenshot(ARTIFACTS / "report-case-screenshot.png")


if __name__ == "__main__":  # the README's screenshot: the full H200 grid as asv recorded it
    if len(sys.argv) != 2 or skip_reason():
        sys.exit(f"usage: python {sys.argv[0]} OUT.png (needs chromium: {skip_reason()})")
    with tempfile.TemporaryDirectory() as tmp:
        out = build_report(Path(tmp) / "report", results=FIXTURES / "results-full")
        with serving(out, Path(tmp) / "profile", width=1200) as (base, chromium):
            seen = chromium.open(base + "index.html", ready="document.readyState == 'complete'")
            _assert_clean(seen, base)
            chromium.screenshot(Path(sys.argv[1]))

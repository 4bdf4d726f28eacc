"""The published report (`mlagate report`), built from the checked-in H200 results.

The summary page's content is checked without a browser. Then headless Chromium
(Debian's `chromium`) opens the summary page, asv's pages and a link from one to
the other over http://127.0.0.1, driven through the DevTools protocol: every
uncaught exception, console error or failed load is a JavaScript error, and
every request must stay on the local server. Screenshots go to out/ (CI
artifacts). `python tests/test_report_browser.py PNG` writes the summary page's
screenshot from the full-grid asv record (docs/report-summary-h200.png).
"""

import base64
import contextlib
import functools
import http.server
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from mlagate import cli, config
from mlagate.case import Case
from mlagate.measure import environment
from mlagate.report import site

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "h200"
BENCH_JSON = FIXTURES / "bench_full_fp16_2026-11-29.json"
ARTIFACTS = ROOT / "out"
CHROMIUM = shutil.which("chromium")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")


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
    html = site.env_table([("a run", None), ("another", {"start": {"gpu": "NVIDIA H200"}})])
    assert html.count("not recorded") == 2 * len(environment.FIELDS) - 1 and "NVIDIA H200" in html


def test_asv_urls_follow_asv_hash_scheme():
    url = site.asv_url("b.x", "m 1", Case("tilelang-hopper", 64, 4096, "float16", 16))
    assert url == "asv/index.html#b.x?machine=m%201&p-impl='tilelang-hopper'&p-batch=64&p-seqlen=4096" \
                  "&p-dtype='float16'&p-heads=16"


# -- in headless Chromium ---------------------------------------------------------

class Chromium:
    """One headless Chromium, driven over the DevTools protocol (a websocket)."""

    def __init__(self, profile: Path, width=1280, height=900):
        import websocket  # websocket-client, from the `test` extra

        self.proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
                                      f"--window-size={width},{height}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.is_file() and port_file.read_text().strip()):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"chromium did not start (exit code {self.proc.poll()})")
            time.sleep(0.05)
        port = port_file.read_text().split()[0]
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10))
        url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
        self.ws = websocket.create_connection(url, suppress_origin=True, timeout=30)
        self.next_id, self.events = 0, []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]
            self.events.append(msg)

    def _wait_for(self, method, timeout=30):
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == method for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {method} within {timeout} s")
            self.events.append(json.loads(self.ws.recv()))

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url, ready: str, timeout=20) -> dict:
        """Load url (a fresh document), wait until the JS expression `ready` is true;
        returns {"errors": [...], "requests": [...]} seen meanwhile."""
        self.call("Page.navigate", url="about:blank")
        self._wait_for("Page.loadEventFired")
        self.events.clear()
        self.call("Page.navigate", url=url)
        self._wait_for("Page.loadEventFired")
        deadline = time.monotonic() + timeout
        while not self.evaluate(f"!!({ready})"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url}: `{ready}` not true within {timeout} s")
            time.sleep(0.2)
        time.sleep(0.5)  # late errors (timers, XHR callbacks)
        self.call("Runtime.evaluate", expression="0")  # drain events that arrived meanwhile
        return {"errors": [_describe(e) for e in self.events if _is_error(e)],
                "requests": [e["params"]["request"]["url"] for e in self.events
                             if e.get("method") == "Network.requestWillBeSent"]}

    def screenshot(self, path: Path):
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    def close(self):
        self.ws.close()
        self.proc.terminate()
        self.proc.wait(timeout=10)


def _is_error(event) -> bool:
    method, params = event.get("method"), event.get("params", {})
    return (method == "Runtime.exceptionThrown"
            or (method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"))
            or (method == "Log.entryAdded" and params["entry"]["level"] == "error"))


def _describe(event) -> str:
    params = event["params"]
    if event["method"] == "Runtime.exceptionThrown":
        d = params["exceptionDetails"]
        return f"uncaught: {d.get('exception', {}).get('description') or d['text']} ({d.get('url')})"
    if event["method"] == "Runtime.consoleAPICalled":
        return "console.error: " + " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
    return f"{params['entry']['text']} ({params['entry'].get('url')})"


class Server:
    """http.server on 127.0.0.1 in a thread: asv's pages fetch their JSON by XHR, which file:// refuses."""

    def __init__(self, root: Path):
        handler = functools.partial(Quiet, directory=str(root))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_port}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _skip_reason():
    if CHROMIUM is None:
        return "Debian's `chromium` is not installed (apt-get install chromium; .ci/run installs it)"
    try:
        import websocket  # noqa: F401
    except ImportError:
        return "websocket-client is not installed (pip install -e '.[test]')"
    missing = [name for name in site.ASSETS.values() if name and not (site.DEBIAN_JS / name).is_file()]
    if missing:
        return (f"asv's pages need {site.DEBIAN_PACKAGES} offline (missing "
                f"{site.DEBIAN_JS / missing[0]}; .ci/run installs them)")
    return None


@contextlib.contextmanager
def serving(root: Path, profile: Path):
    """(base URL, Chromium) for the pages under root, served over HTTP; skips with the reason without a browser."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    server, chromium = Server(root), Chromium(profile)
    try:
        yield server.base, chromium
    finally:
        chromium.close()
        server.close()


@pytest.fixture(scope="module")
def browser(report, tmp_path_factory):
    with serving(report, tmp_path_factory.mktemp("chromium-profile")) as served:
        yield served


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
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    report = build_report(tmp_path / "report", results=FIXTURES / "results-full")
    server, chromium = Server(report), Chromium(tmp_path / "chromium-profile")
    try:
        seen = chromium.open(server.base + "asv/index.html",
                             ready="document.querySelectorAll('.benchmark-container').length")
        _assert_clean(seen, server.base)
        graph = server.base + site.asv_url("mla_decode.TimeDecode.time_decode", "h200",
                                           Case("flashinfer", 128, 16384, "float16", 128))
        seen = chromium.open(graph, ready="document.querySelectorAll('#main-graph canvas.flot-base').length")
        _assert_clean(seen, server.base)
        selected = chromium.evaluate("[...document.querySelectorAll('.btn.active')].map(b => b.innerText.trim())")
        assert {"flashinfer", "128", "16384", "float16"} <= set(selected), selected
        chromium.screenshot(ARTIFACTS / "report-full-grid-asv-graph.png")
    finally:
        chromium.close()
        server.close()


if __name__ == "__main__":  # the README's screenshot: the full H200 grid as asv recorded it
    if len(sys.argv) != 2 or _skip_reason():
        sys.exit(f"usage: python {sys.argv[0]} OUT.png (needs chromium: {_skip_reason()})")
    with tempfile.TemporaryDirectory() as tmp:
        out = build_report(Path(tmp) / "report", results=FIXTURES / "results-full")
        server, chromium = Server(out), Chromium(Path(tmp) / "profile", width=1200)
        try:
            seen = chromium.open(server.base + "index.html", ready="document.readyState == 'complete'")
            _assert_clean(seen, server.base)
            chromium.screenshot(Path(sys.argv[1]))
        finally:
            chromium.close()
            server.close()

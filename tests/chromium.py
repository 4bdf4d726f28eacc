"""Headless Chromium (Debian's `chromium`), driven over the DevTools protocol, and the HTTP server it reads
pages from: what the page tests open (the `browser` fixture in conftest.py) and the README's screenshot uses."""

import base64
import contextlib
import functools
import http.server
import json
import shutil
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from mlagate.report import site

CHROMIUM = shutil.which("chromium")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")


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


def no_browser():
    """Why headless Chromium cannot be driven here, or None."""
    if CHROMIUM is None:
        return "Debian's `chromium` is not installed (apt-get install chromium; .ci/run installs it)"
    try:
        import websocket  # noqa: F401
    except ImportError:
        return "websocket-client is not installed (pip install -e '.[test]')"
    return None


def skip_reason():
    """Why asv's pages cannot be opened here offline (no browser, or no Debian copies of their scripts)."""
    if no_browser():
        return no_browser()
    missing = [name for name in site.ASSETS.values() if name and not (site.DEBIAN_JS / name).is_file()]
    if missing:
        return (f"asv's pages need {site.DEBIAN_PACKAGES} offline (missing "
                f"{site.DEBIAN_JS / missing[0]}; .ci/run installs them)")
    return None


@contextlib.contextmanager
def serving(root: Path, profile: Path, width=1280, asv=True):
    """(base URL, Chromium) for the pages under root, served over HTTP; skips with the reason without a browser
    (``asv``: or without what asv's pages load)."""
    reason = skip_reason() if asv else no_browser()
    if reason:
        pytest.skip(reason)
    server, chromium = Server(root), Chromium(profile, width=width)
    try:
        yield server.base, chromium
    finally:
        chromium.close()
        server.close()

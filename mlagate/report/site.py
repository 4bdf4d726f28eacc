"""`mlagate report`: asv's pages for the stored history, and a summary page beside them.

``asv publish`` turns the results store into asv's site (OUT/asv). Beside it,
OUT/index.html is a static, JavaScript-free page with matplotlib PNGs: for the
newest commit (or a full-grid `mlagate bench --out` file), TFLOPs against the
device's roofline and the ratio to the vendor kernel against the gate's floor;
for the last N commits, each case's median latency; links into asv's graphs;
and the hardware and software of the runs. It reads the store; it measures nothing.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

from mlagate import gitops
from mlagate.atomic import output_set
from mlagate.case import PARAM_NAMES, Case, CaseResult, RunStatus
from mlagate.measure import environment
from mlagate.report import history
from mlagate.report.page import STYLE, escape, table
from mlagate.report.plots import impl_order, ratio_png, tflops_png, trend_png
from mlagate.store import record as recorder
from mlagate.store.env import parse_env
from mlagate.store.errors import StoreError
from mlagate.store.results import Store, pick_machine
from mlagate.store.results_file import BENCH_RATIO, BENCH_TFLOPS, BENCH_TIME, WORKLOAD_BENCH, ok_value

PORT = 8080  # documented in docs/report.md: `python -m http.server 8080 --directory OUT`

# asv 0.6's pages load their libraries from CDNs and stay blank offline (CI, air-gapped
# GPU hosts). Debian's libjs packages hold the same libraries: where they are installed,
# the published pages use copies of them. CDN file name -> Debian file (None: not needed).
DEBIAN_JS = Path("/usr/share/javascript")
DEBIAN_PACKAGES = "libjs-jquery libjs-jquery-flot libjs-bootstrap libjs-jquery-stupidtable node-blueimp-md5"
ASSETS = {
    "jquery-3.3.1.min.js": "jquery/jquery.min.js",
    "jquery.flot.min.js": "jquery-flot/jquery.flot.min.js",  # flot 4: time, selection, categories built in
    "jquery.flot.time.min.js": None,
    "jquery.flot.selection.min.js": None,
    "jquery.flot.categories.min.js": None,
    "jquery.flot.orderBars.js": None,  # not packaged: bars of one commit overlap in asv's bar view
    "stupidtable.min.js": "jquery-stupidtable/stupidtable.min.js",
    "md5.min.js": "blueimp-md5/md5.min.js",
    "bootstrap.min.js": "bootstrap/js/bootstrap.min.js",
    "bootstrap.min.css": "bootstrap/css/bootstrap.min.css",
}
# flot 4 draws axis labels itself (asv's own plugin would draw them twice) and gives the
# legend an SVG box that is black unless styled.
FLOT4_FIXES = "<style>.legendLayer .background { fill: #fff; fill-opacity: 0.85; stroke: #ccc; }</style>"
CDN_TAG = re.compile(r'<(?:script|link)\b[^>]*?(?:src|href)="https://[^"]*/([^/"]+)"[^>]*>(?:</script>)?')
URI_SAFE = "!*'()"  # what JavaScript's encodeURIComponent leaves alone, besides quote()'s own


# -- asv's pages -----------------------------------------------------------------

def publish_asv(results: Path, html_dir: Path, repo: Path) -> bool:
    """``asv publish`` of the store into html_dir, its commits ordered by ``repo``'s history; True if its
    pages work offline."""
    with tempfile.TemporaryDirectory(prefix="mlagate-report-") as tmp:
        conf = Path(tmp) / "asv.conf.json"
        settings = recorder.asv_config(gitops.repository(), results.resolve(), html_dir.resolve())
        conf.write_text(json.dumps({**settings, "repo": str(repo)}))
        # asv runs git in the checkout, which in a container may belong to another user.
        env = {**os.environ, "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"}
        done = subprocess.run([sys.executable, "-m", "asv", "publish", "--no-pull", "--config", str(conf)],
                              capture_output=True, text=True, cwd=repo, env=env)
    if done.returncode != 0:
        raise StoreError(f"{results}: asv publish failed (exit {done.returncode}): "
                         f"{(done.stdout + done.stderr).strip()[-1500:]}")
    return localize_assets(html_dir)


def localize_assets(html_dir: Path) -> bool:
    """Point asv's index.html at Debian's copies of its CDN libraries, all or none."""
    index = html_dir / "index.html"
    page = index.read_text()
    names = CDN_TAG.findall(page)
    if any(name not in ASSETS or (ASSETS[name] and not (DEBIAN_JS / ASSETS[name]).is_file()) for name in names):
        return False
    (html_dir / "vendor").mkdir(exist_ok=True)

    def local(match):
        name = ASSETS[match.group(1)]
        if name is None:
            return ""
        target = html_dir / "vendor" / Path(name).name
        target.write_bytes((DEBIAN_JS / name).read_bytes())
        if name.endswith(".css"):
            return f'<link rel="stylesheet" href="vendor/{target.name}">'
        return f'<script src="vendor/{target.name}"></script>'

    page = CDN_TAG.sub(local, page)
    page = re.sub(r'<script[^>]*src="jquery\.flot\.axislabels\.js"[^>]*>\s*</script>', "", page)
    index.write_text(page.replace("</head>", FLOT4_FIXES + "\n</head>", 1))
    return True


def asv_url(bench: str, machine: str, case: Case | None = None) -> str:
    """asv's graph of one benchmark, narrowed to one case (asv's hash: p-<param>=<repr of the value>); a
    workload's case is in the workload benchmark, the only one with the workload parameter."""
    if case is not None and case.paged:
        bench = next(name for name, logical in WORKLOAD_BENCH.items() if logical == bench)
    key = () if case is None else case.key if case.paged else case.key[:-1]
    params = [("machine", machine)] + [(f"p-{n}", repr(v)) for n, v in zip(PARAM_NAMES, key)]
    return f"asv/index.html#{bench}?" + "&".join(f"{quote(k, safe=URI_SAFE)}={quote(v, safe=URI_SAFE)}"
                                                  for k, v in params)


# -- what is shown -----------------------------------------------------------------

def commit_rows(results) -> list:
    """A CaseResult per case of a commit's asv results: median latency, TFLOPs and vendor ratio, or its status."""
    time, tflops, ratio = (results.entries(b) for b in (BENCH_TIME, BENCH_TFLOPS, BENCH_RATIO))
    rows = []
    for key in set(time) | set(tflops):
        statuses = [e.status for e in (time.get(key), tflops.get(key)) if e is not None]
        latency_s = ok_value(time.get(key))
        rows.append(CaseResult(Case(*key), RunStatus("ok" if "ok" in statuses else statuses[0]),
                               median_ms=None if latency_s is None else latency_s * 1e3,
                               tflops=ok_value(tflops.get(key)), vendor_ratio=ok_value(ratio.get(key))))
    return rows


def bench_rows(path) -> tuple:
    """(CaseResults, its environment as a store.env.RunEnv) of an `mlagate bench --out` file."""
    from mlagate.measure.grid import read_outputs

    try:
        rows, env = read_outputs(path)
        return rows, parse_env(env, "environment.")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"--bench-json {path}: not an `mlagate bench --out` file ({type(e).__name__}: {e})") from None


def platform_of(cfg, env, rows) -> str | None:
    """The run's platform (``env``: a store.env.RunEnv or None; a bench file records it in its start only);
    without a record of it, the one whose vendor kernel ran."""
    recorded = env and (env.platform or env.start.get("platform"))
    if recorded in cfg.platforms:
        return recorded
    ran = {r.case.impl for r in rows if r.status == RunStatus.OK}
    return next((name for name, p in cfg.platforms.items() if p.vendor in ran), None)


# -- the page --------------------------------------------------------------------

def env_table(runs) -> str:
    """runs: [(title, store.env.RunEnv or None)]; a missing record or field reads 'not recorded'."""
    body = []
    for label, read in environment.FIELDS:
        cells = []
        for _, env in runs:
            value = read(env.start, env.end) if env else None
            cells.append(escape(value) if value not in (None, "") else '<span class="na">not recorded</span>')
        body.append([escape(label), *cells])
    return table(["", *(escape(title) for title, _ in runs)], body, "env")


def run_line(env) -> str:
    """GPU, driver and library versions of a run, on one line."""
    parts = environment.headline(env)
    return " · ".join(map(escape, parts)) or '<span class="na">hardware and versions not recorded</span>'


def _cell(row, link) -> str:
    if row is None:
        return ""
    if row.status != RunStatus.OK or row.tflops is None:
        return f'<span class="na" title="{escape(row.reason or "")}">{escape(row.status)}</span>'
    text = f"{row.tflops:.0f}" + (f" <small>{row.vendor_ratio:.2f}×</small>" if row.vendor_ratio is not None else "")
    return f'<a href="{escape(link)}">{text}</a>' if link else text


def newest_section(cfg, out: Path, rows, env, source: str, machine: str, in_asv: set) -> str:
    """Plots and a table of one run (``env``: its store.env.RunEnv or None): TFLOPs vs the roofline, the vendor
    ratio vs the gate's floor."""
    arch, gpu = (env.arch, env.gpu) if env else (None, None)
    platform = platform_of(cfg, env, rows)
    key = cfg.roofline_key(arch, gpu)
    tflops_png(out / "tflops.png", cfg, rows, cfg.peaks(arch, gpu))
    roof = (f"dashed: the roofline of {escape(key)} from perf.yml" if key
            else f"no roofline: perf.yml has none for {escape(gpu or 'a GPU not recorded')} or arch "
                 f"{escape(arch or 'not recorded')}")
    html_ = [f"<h2>Newest run: {source}</h2>",
             f'<figure><img src="tflops.png" alt="TFLOPs vs seqlen per implementation and batch">'
             f"<figcaption>TFLOPs vs seqlen; {roof}.</figcaption></figure>"]
    if platform:
        p, floor = cfg.platform(platform), cfg.gate.ratio[platform].floor
        ratio_png(out / "vendor_ratio.png", cfg, rows, platform)
        html_.append(f'<figure><img src="vendor_ratio.png" alt="vendor ratio per case, gate floor {floor:.2f}">'
                     f"<figcaption>TFLOPs of {escape(p.tilelang)} over {escape(p.vendor)} (platform {platform}); "
                     f"red dashed: the gate's floor {floor:.2f}.</figcaption></figure>")
    else:
        html_.append('<p class="na">No vendor ratio: the platform is not recorded and no vendor kernel ran.</p>')
    impls = impl_order(cfg, [r.case.impl for r in rows])
    by_case = {r.case: r for r in rows}

    def cell(case):
        return _cell(by_case.get(case), asv_url(BENCH_TFLOPS, machine, case) if case in in_asv else None)

    body = [[*(escape(str(v)) for v in point[:-1]), escape(history.workload_name(Case("", *point)))]
            + [cell(Case(i, *point)) for i in impls]
            for point in sorted({c.key[1:] for c in by_case}, key=lambda p: (p[3], p[0], p[1], p[2]))]
    html_.append("<p>TFLOPs per case, <small>× vendor</small> beside it; a link opens the case's history in asv."
                 "</p>" + table([*PARAM_NAMES[1:], *map(escape, impls)], body, "cases"))
    return "".join(html_)


def trend_section(cfg, out: Path, recent: list, machine: str, marks: dict, offline: bool) -> str:
    """The trend figure, then the trend table and a page per case (report.history)."""
    trend_png(out / "trend.png", cfg, recent, history.series_of(recent))
    branches = ", ".join(json.loads((gitops.repository() / "asv.conf.json").read_text()).get("branches", []))
    figure = ('<figure><img src="trend.png" alt="median latency per commit for each case"><figcaption>Median '
              "latency (µs) per commit, ordered by commit date. asv's graphs show only the commits on "
              f"{escape(branches)}.</figcaption></figure>")
    return history.trend_section(cfg, out, recent, machine, marks, lambda impls: impl_order(cfg, impls),
                                 (lambda case: asv_url(BENCH_TIME, machine, case)) if offline else None, figure)


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>MLA decode performance: {machine}</title>
<style>{style}</style></head>
<body>
<h1>MLA decode performance: {machine}</h1>
<p>{run_line}<br>Newest commit <code>{commit}</code> of {count} recorded. asv's pages: {links}</p>
{sections}
<h2>Hardware and software</h2>
{env}
</body></html>
"""


def build(cfg, *, results: Path, out: Path, machine: str | None = None, bench_json=None, last: int = 10,
          repo: Path | None = None) -> list:
    """Write OUT/asv (asv publish; ``repo``, default :func:`gitops.repository`, holds the recorded commits) and
    OUT/index.html with its PNGs; returns the store's skipped files."""
    repo = repo or gitops.repository()

    store = Store(results)
    machine = pick_machine(store, machine)
    recorded = list(store.load_all(machine).values())
    if not recorded:
        raise StoreError(f"{results / machine}: no readable results to report")
    envs = {r.commit: store.read_env(machine, r.commit) for r in recorded}
    recorded.sort(key=lambda r: (r.date, (envs[r.commit] and envs[r.commit].time) or "", r.commit))
    newest = recorded[-1]
    with output_set(out) as fresh:  # the pages and their PNGs replaced as one set
        _write_site(cfg, fresh, results, store, machine, recorded, envs, newest, bench_json, last, repo)
    return [str(p) for p in store.problems]


def _write_site(cfg, out: Path, results: Path, store, machine: str, recorded: list, envs: dict, newest, bench_json,
                last: int, repo: Path) -> None:
    offline = publish_asv(results, out / "asv", repo)

    runs = [(f"asv run of {newest.commit[:8]}", envs[newest.commit])]
    if bench_json:
        rows, env = bench_rows(bench_json)
        runs.insert(0, (f"full-grid bench {Path(bench_json).name}", env))
        source = f"full-grid bench <code>{escape(Path(bench_json).name)}</code>"
    else:
        rows, source = commit_rows(newest), f"asv results of <code>{newest.commit[:8]}</code>"
    in_asv = {Case(*key) for r in recorded for key in r.entries(BENCH_TIME)}
    links = " · ".join(['<a href="asv/index.html">all benchmarks</a>']
                       + [f'<a href="{escape(asv_url(b, machine))}">{escape(b)}</a>' for b in (BENCH_TIME, BENCH_TFLOPS,
                                                                                      BENCH_RATIO)])
    if not offline:  # link no page that stays blank here: the trend table and the case pages stand alone
        in_asv = set()
        links = (f'<span class="na">not linked: they load their scripts from CDNs (install {DEBIAN_PACKAGES} '
                 "before `mlagate report` to serve them offline); the trend below and its case pages need none"
                 "</span>")
    marks = history.gate_marks(cfg, recorded[-(last + cfg.gate.drift_lookback):], envs)  # + drift's lookback
    page = PAGE.format(style=STYLE, machine=escape(machine), run_line=run_line(runs[0][1]), commit=newest.commit[:8],
                       count=len(recorded), links=links, env=env_table(runs),
                       sections=newest_section(cfg, out, rows, runs[0][1], source, machine, in_asv)
                       + trend_section(cfg, out, recorded[-last:], machine, marks, offline))
    (out / "index.html").write_text(page)

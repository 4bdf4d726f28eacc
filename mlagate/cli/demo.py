"""`mlagate demo`: the gate and the report on a recorded H200 pair, on any machine (no GPU needed).

Replays the pair kept in demo/ (demo/README.md says how it was recorded: the quick grid on an NVIDIA
H200, a base and a head that forces 4 KV splits in the seesaw, the config CUDA holds to the vendor
ratio) through the same gate and report code a GPU host runs, with perf.yml as committed. Nothing
is measured here; every page says which GPU measured what, and when. The two commits travel as a git
bundle (demo/pair.bundle, on top of main's 9940045): asv orders a history by its repository, so the
report is built from a throw-away clone that holds them; the checkout is never written.
"""

import shutil
import tempfile
from pathlib import Path

from mlagate import exits, gitops
from mlagate.atomic import check_output_folder
from mlagate.config import ROOT
from mlagate.gitops import git
from mlagate.report.text import FAILING

HISTORY = ROOT / "demo" / "results"
BUNDLE = ROOT / "demo" / "pair.bundle"  # its one branch, demo-pair, is HEAD
MACHINE = "h200"
BASE = "0843a879609642c5cc634e324db4365a62bb7319"  # the tree as it was recorded
HEAD = "91da13fe9c3b6d5f043022da5d182a62ff8989ff"  # the same, the seesaw forced to 4 KV splits


def add_parser(sub):
    p = sub.add_parser("demo", help="gate and report a recorded H200 pair (no GPU needed)")
    p.add_argument("--out", default="out/demo", help="folder for gate/ (the verdict, comparison.html) and report/")
    p.set_defaults(func=run)


def clone_with_the_pair(path: Path) -> Path:
    """A clone of this checkout whose main is the demo's head (asv publishes main's first parents)."""
    git("clone", "--quiet", "--shared", "--no-checkout", str(ROOT), str(path))
    git("fetch", "--quiet", "--update-head-ok", str(BUNDLE), "+refs/heads/demo-pair:refs/heads/main", repo=path)
    if git("rev-parse", "main", repo=path) != HEAD or git("rev-parse", "main~1", repo=path) != BASE:
        raise ValueError(f"{BUNDLE}: does not hold base {BASE[:8]} and head {HEAD[:8]} on its branch demo-pair")
    return path


def run(args, cfg) -> int:
    from mlagate import gate
    from mlagate.report import site

    out = Path(args.out)
    for folder in (out / "gate", out / "report"):  # each replaced whole at the end: refused before anything runs
        check_output_folder(folder)
    with tempfile.TemporaryDirectory(prefix="mlagate-demo-") as tmp:
        results = Path(tmp) / "results"
        shutil.copytree(HISTORY, results)  # the gate and asv publish read a copy: the history stays as kept
        repo = clone_with_the_pair(Path(tmp) / "repo")
        checkout, gitops.REPO = gitops.REPO, repo  # the gate reads the pair's files and diff from the clone
        try:
            verdict = gate.run_gate(cfg, base_rev=BASE, head_rev=HEAD, results=results, out_dir=out / "gate",
                                    machine=MACHINE).verdict
        finally:
            gitops.REPO = checkout
        site.build(cfg, results=results, out=out / "report", machine=MACHINE, last=cfg.gate.drift_lookback,
                   repo=repo)
    failing = [c.label for c in verdict.cases if c.status in FAILING]
    print(f"a recorded H200 pair ({HISTORY.relative_to(ROOT)}, demo/README.md): base {BASE[:8]}, "
          f"head {HEAD[:8]} (the seesaw forced to 4 KV splits)")
    print(f"verdict: {verdict.outcome} (a gate run would exit {verdict.exit_code})"
          + (f"; {', '.join(failing)}" if failing else ""))
    print(f"open {out / 'gate' / 'comparison.html'} (this pair) and {out / 'report' / 'index.html'} (the history); "
          f"serve with `python -m http.server {site.PORT} --directory {out}`")
    return exits.OK

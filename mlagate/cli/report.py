"""`mlagate report`: asv's pages and a static summary page for the stored results."""

import sys
from pathlib import Path

from mlagate import exits
from mlagate.cli import flags
from mlagate.report import site
from mlagate.store.results import results_root


def add_parser(sub):
    p = sub.add_parser("report", help="asv's pages and a static summary page for the stored results")
    flags.results(p)
    p.add_argument("--out", default="out/report", help="folder for index.html, its PNGs and asv/")
    flags.machine(p, "reads")
    p.add_argument("--bench-json", default=None,
                   help="an `mlagate bench --out` file: the newest-run plots show its (full) grid")
    p.add_argument("--last", type=int, default=None, help="commits in the trend (default: gate.drift.lookback)")
    p.set_defaults(func=run)


def run(args, cfg) -> int:
    last = cfg.gate.drift_lookback if args.last is None else args.last
    if last < 1:
        raise ValueError(f"--last must be >= 1, got {last}")
    out = Path(args.out)
    refuse_corrupt_results(results_root(args.results), args.machine)
    problems = site.build(cfg, results=results_root(args.results), out=out, machine=args.machine,
                          bench_json=args.bench_json, last=last)
    for problem in problems:
        print(f"warning: skipped {problem}", file=sys.stderr)
    print(f"wrote {out / 'index.html'} and {out / 'asv'}/; serve them with "
          f"`python -m http.server {site.PORT} --directory {out}`")
    return exits.OK


def refuse_corrupt_results(root, machine):
    """A results file the store refuses is an error before anything is written: the report would leave
    its commit out and look complete."""
    from mlagate.store.errors import StoreError
    from mlagate.store.results import Store, pick_machine

    store = Store(root)
    store.load_all(pick_machine(store, machine))
    if store.problems:
        raise StoreError(f"{store.problems[0]} (restore it from the results branch, or remove it by hand)")

"""`mlagate bisect`: which commit between good and bad made the kernels slower. Exit 1: a culprit was named."""

from pathlib import Path

from mlagate import exits, progress
from mlagate.cli import flags


def add_parser(sub):
    p = sub.add_parser("bisect", help="find the first slow commit between good and bad (records, re-measures)")
    p.add_argument("--bad", default="HEAD", help="the slow commit (default HEAD)")
    p.add_argument("--good", default=None,
                   help="a fast commit before it (default: the recorded main commit the drift warning compares with)")
    flags.machine(p, "records")
    flags.results(p)
    flags.grid(p, flags.LOOK_GRID, "the shapes of the records it makes (only the cases it needs)")
    p.add_argument("--out", default="out/bisect", help="folder for bisect.md and bisect.json")
    p.set_defaults(func=run)


def run(args, cfg) -> int:
    from mlagate.atomic import check_output_folder
    from mlagate.bisect import run as bisect
    from mlagate.bisect.rules import Finding
    from mlagate.store.results import results_root

    check_output_folder(args.out)  # before anything is recorded: --out is replaced whole at the end
    out = Path(args.out)  # replaced whole at the end: TileLang's log goes beside it, <out>-tilelang.log
    with progress.tilelang_log(out.parent, name=f"{out.name}-{progress.LOG_NAME}"):
        result, cases = bisect.run_bisect(cfg, bad_rev=args.bad, good_rev=args.good,
                                          results=results_root(args.results), machine=args.machine, grid=args.grid)
    files = bisect.write_outputs(result, cases, Path(args.out), args.machine)
    print(files["markdown"].read_text())
    print(f"wrote {', '.join(str(p) for p in files.values())}")
    return exits.CULPRIT if result.finding is Finding.CULPRIT else exits.OK

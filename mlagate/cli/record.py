"""`mlagate record`: run asv on a commit and append its results to the store."""

from mlagate import config as config_mod
from mlagate import exits


def add_parser(sub):
    p = sub.add_parser("record", help="run asv on a commit and append its results to the store")
    p.add_argument("--rev", default="HEAD", help="commit to record (a worktree is used if it is not checked out)")
    p.add_argument("--machine", required=True, help="asv machine name (one per GPU model and host setup)")
    p.add_argument("--results", default=None, help="results directory (default .asv/results or $MLAGATE_RESULTS)")
    p.add_argument("--grid", default="full", choices=("quick", "full"))
    p.add_argument("--impl", action="append", help="implementation (repeatable; default: all)")
    p.add_argument("--dtype", action="append", choices=config_mod.DTYPES, help="dtype (repeatable)")
    p.add_argument("--bench", default=None, help="asv --bench regex (e.g. TimeDecode)")
    p.add_argument("--gpus", default=None, help="measure on several GPUs of this host: all, a count or a list "
                                                "(each grid point on one GPU); default: the one visible")
    p.add_argument("--shard", default=None, help="I/N: record only this runner's share of the grid points "
                                                 "(a stable hash), for `mlagate results merge`")
    p.set_defaults(func=run)


def run(args, cfg) -> int:
    from mlagate.gpu_check import check_gpus
    from mlagate.store.record import gpu_available, record
    from mlagate.store.results import results_root

    # several GPUs: compare them first (a GPU check refuses without one, before anything is measured)
    gpu_check = check_gpus(cfg, args.gpus) if args.gpus and gpu_available() else None
    path = record(args.rev, results=results_root(args.results), machine=args.machine,
                  grid=args.grid, dtypes=args.dtype, impls=args.impl, bench_regex=args.bench,
                  time_budget_s=cfg.timing.record_s, gpus=args.gpus, shard=args.shard, gpu_check=gpu_check)
    print(f"recorded {args.rev} -> {path}")
    return exits.OK

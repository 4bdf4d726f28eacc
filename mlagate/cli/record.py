"""`mlagate record`: run asv on a commit and append its results to the store."""

from mlagate import exits, progress
from mlagate.cli import flags


def add_parser(sub):
    p = sub.add_parser("record", help="run asv on a commit and append its results to the store")
    p.add_argument("--rev", default="HEAD", help="commit to record (a worktree is used if it is not checked out)")
    flags.machine(p, "records")
    flags.results(p)
    flags.grid(p, flags.STORE_GRID, "the shapes recorded")
    flags.impl(p, "all")
    flags.dtype(p, "the platform's dtypes in perf.yml")
    p.add_argument("--bench", default=None, help="asv --bench regex (e.g. TimeDecode)")
    flags.gpus(p)
    p.add_argument("--shard", default=None, help="I/N: record only this runner's share of the grid points "
                                                 "(a stable hash), for `mlagate results merge`")
    p.set_defaults(func=run)


def run(args, cfg) -> int:
    from mlagate.gpu_check import check_gpus
    from mlagate.store.record import gpu_available, record
    from mlagate.store.results import results_root

    # several GPUs: compare them first (a GPU check refuses without one, before anything is measured)
    gpu_check = check_gpus(cfg, args.gpus) if args.gpus and gpu_available() else None
    # this process's TileLang log in .asv/ (beside the store); asv's own output is streamed as it is
    with progress.tilelang_log(results_root(args.results).parent, children=False):
        path = record(args.rev, results=results_root(args.results), machine=args.machine,
                      grid=args.grid, dtypes=args.dtype, impls=args.impl, bench_regex=args.bench,
                      time_budget_s=cfg.timing.record_s, gpus=args.gpus, shard=args.shard, gpu_check=gpu_check)
    print(f"recorded {args.rev} -> {path}")
    return exits.OK

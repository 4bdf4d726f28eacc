"""`mlagate tune`: measure a TileLang config family's search space (perf.yml `tune:`) on the GPU and pick the
fastest config per shape; write it to the committed table (--write-table) or check that table (--check).
Exit 0 done (or stopped at --max-minutes, to resume), 1 with --check: the committed table is beaten by more
than the gate's latency threshold (or its config no longer runs), 2 any error, --check stopped unfinished too."""


from mlagate import exits, progress
from mlagate.cli import flags


def add_parser(sub):
    p = sub.add_parser("tune", help="measure a config family's search space on the GPU; write or check the table "
                                    "of tuned configs (kernels/tuned/<arch>.yaml)")
    flags.grid(p, flags.LOOK_GRID, "the shapes tuned")
    p.add_argument("--config-family", default=None,
                   help="config family of perf.yml's tune: (default: the platform's gated TileLang config)")
    p.add_argument("--out", default="out/tune",
                   help="folder for the candidates and tune.md; run again with the same --out to resume")
    flags.jobs(p, "parallel lowering and compiling processes; also candidates measured per round and GPU")
    flags.gpus(p)
    what = p.add_mutually_exclusive_group()
    what.add_argument("--write-table", action="store_true", help="write each shape's winner to the table")
    what.add_argument("--check", action="store_true",
                      help="exit 1 when a candidate beats the table's config by more than gate.latency.threshold; "
                           "writes nothing to kernels/")
    p.add_argument("--table", default=None, help="the table to read (and write) instead of kernels/tuned/<arch>.yaml")
    p.add_argument("--max-minutes", type=float, default=None,
                   help="start no new round of candidates after this long; progress is kept in --out")
    p.set_defaults(func=run)


def run(args, cfg) -> int:
    from mlagate.tune import run as tune

    mode = tune.Mode.WRITE if args.write_table else tune.Mode.CHECK if args.check else tune.Mode.REPORT
    plan = tune.plan(cfg, grid_name=args.grid, family=args.config_family, out=args.out, jobs=args.jobs,
                     gpus=args.gpus, mode=mode, table=args.table, max_minutes=args.max_minutes)
    with progress.tilelang_log(args.out):
        summary = tune.run_tune(cfg, plan)
    if summary.outcome == tune.Outcome.INCOMPLETE:
        message = (f"stopped after --max-minutes {args.max_minutes:g} with {summary.left} candidate(s) left; "
                   f"resume: run the same command again (progress is kept in {plan.folder})")
        if mode == tune.Mode.CHECK:  # a check that did not finish has not passed
            raise ValueError(message)
        print(message)
        return exits.OK
    print(summary.report.read_text())
    print(f"wrote {summary.report}" + (f" and {summary.table}" if summary.table else ""))
    return exits.TABLE_BEATEN if summary.outcome == tune.Outcome.DRIFT else exits.OK

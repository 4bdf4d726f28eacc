"""`mlagate ladder`: qualify a runner. Throw-away commits on base add a spin of x% of each case's own time
inside its TileLang kernel (calibrated on the GPU); each is recorded and gated against base, repeatedly, and a
table says what the gate measured against what was injected. Exit 0 once the table is written: it reports, it
does not judge."""

from mlagate import exits, progress
from mlagate.cli import flags
from mlagate.ladder.rules import DEFAULT_STEPS, step_name


def add_parser(sub):
    p = sub.add_parser("ladder", help="qualify a runner: gate calibrated slowdowns against base, tabulate what "
                                      "it measured (records, re-measures; not for pull requests)")
    p.add_argument("--base", required=True, help="the commit the steps are made on and gated against")
    p.add_argument("--steps", default=",".join(map(step_name, DEFAULT_STEPS)),
                   help="slowdowns to inject, in %% of each case's own time (default %(default)s)")
    p.add_argument("--reps", default="3", help="repetitions, each with a results store of its own (default 3)")
    flags.grid(p, flags.LOOK_GRID, "the shapes of its own stores' records")
    flags.impl(p, "the platform's TileLang config and its vendor kernels (an fp8 cache's too), whose ratios "
                  "the gate needs", "; the gated TileLang ones get the delay")
    flags.machine(p, "records")
    p.add_argument("--out", default="out/ladder",
                   help="folder for everything; run again with the same arguments and --out to resume")
    p.set_defaults(func=run)


def run(args, cfg) -> int:
    from mlagate.ladder import report
    from mlagate.ladder import run as ladder

    plan = ladder.plan(cfg, base_rev=args.base, steps=args.steps, reps=args.reps, grid=args.grid,
                       impls=args.impl, machine=args.machine, out=args.out)
    with progress.tilelang_log(plan.out):
        files = report.write_outputs(ladder.run_ladder(cfg, plan), plan.out)
    print(files["markdown"].read_text())
    print(f"wrote {', '.join(str(p) for p in files.values())}")
    return exits.OK

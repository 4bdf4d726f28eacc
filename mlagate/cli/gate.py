"""`mlagate gate`: decide head against base from the results store; exit 1 means regression."""

import sys
from pathlib import Path

from mlagate import config as config_mod
from mlagate.cli import flags


def add_parser(sub):
    p = sub.add_parser("gate", help="decide head against base from the results store")
    p.add_argument("--base", required=True, help="base revision (e.g. origin/main)")
    p.add_argument("--head", required=True, help="head revision (e.g. HEAD)")
    flags.machine(p, "reads")
    flags.results(p)
    p.add_argument("--platform", default=None, choices=config_mod.PLATFORMS,
                   help="the platform head must have been measured on (checked against its env sidecar)")
    p.add_argument("--confirm", action="store_true", help="re-measure flagged cases interleaved (needs the GPU)")
    p.add_argument("--record-missing", action="store_true", help="record base/head first if the store lacks them")
    flags.grid(p, flags.STORE_GRID, "the shapes --record-missing records")
    p.add_argument("--out", default="out/gate", help="folder for gate.md, verdict.json and tflops.png")
    p.set_defaults(func=run)


def run(args, cfg) -> int:
    from mlagate import gate
    from mlagate.report import text
    from mlagate.store import results

    out = gate.run_gate(cfg, base_rev=args.base, head_rev=args.head, results=results.results_root(args.results),
                        out_dir=Path(args.out), machine=args.machine, platform=args.platform, confirm=args.confirm,
                        record_missing=args.record_missing, grid=args.grid)
    print(out.markdown)
    for line in text.annotations(out.verdict):
        print(line)
    print(f"wrote {', '.join(str(p) for p in out.files.values())}")
    for line in verdict_errors(out.verdict):  # exit 2 always says why on stderr, as every other error does
        print(f"error: {line}", file=sys.stderr)
    return out.verdict.exit_code


def verdict_errors(verdict) -> list:
    from mlagate.decide.vocabulary import Status

    return [*(e.text for e in verdict.errors),
            *(f"{c.label}: {'; '.join(r.text for r in c.reasons)}" for c in verdict.cases if c.status == Status.ERROR)]

"""`mlagate build`: compile every kernel on a CPU, record its resources, check the rules."""

import json
import sys
from pathlib import Path

from mlagate import exits, progress
from mlagate.build import plan, report
from mlagate.build.plan import BuildError
from mlagate.cli import flags
from mlagate.decide import build_rules


def add_parser(sub):
    p = sub.add_parser("build", help="compile every kernel on a CPU, record its resources, check the rules")
    p.add_argument("--target", action="append", help="cuda:sm_90a or hip:gfx942 (repeatable; default: both)")
    p.add_argument("--codegen-only", action="store_true", help="lower only: no nvcc (source-level numbers)")
    flags.grid(p, flags.LOOK_GRID, "the shapes compiled")
    flags.dtype(p, "both")
    p.add_argument("--config-name", action="append",
                   help="tile config (repeatable; default per target: cuda all, hip cdna3)")
    flags.jobs(p, "parallel lowering processes / nvcc runs")
    p.add_argument("--out", default="out/build", help="folder for build-<target>.json and .md")
    p.add_argument("--record", action="store_true", help="also store each report as a sidecar of HEAD's results")
    flags.machine(p, "sidecars")
    flags.results(p)
    p.set_defaults(func=run)


def run(args, cfg) -> int:
    from mlagate.kernels import mla_decode
    from mlagate.report import build_report

    if args.jobs < 1:
        raise BuildError(f"--jobs must be >= 1, got {args.jobs}")
    if args.record and not args.machine:
        raise BuildError("--record needs --machine (the asv machine whose results the report goes with)")
    targets = args.target or list(build_rules.DEFAULT_TARGETS)
    configs = {}
    for t in targets:
        kind, _ = plan.parse_target(t)
        names = args.config_name or plan.DEFAULT_CONFIGS[kind]
        unknown = [n for n in names if n not in mla_decode.CONFIGS]
        if unknown:
            raise BuildError(f"--config-name {unknown[0]}: not in kernels/mla_decode.py CONFIGS "
                             f"({', '.join(mla_decode.CONFIGS)})")
        configs[t] = [mla_decode.CONFIGS[n] for n in names]
        elsewhere = [c for c in configs[t] if not c.runs_on(plan.parse_target(t)[1])]
        if elsewhere:
            raise BuildError(f"--config-name {elsewhere[0].name}: the {elsewhere[0].schedule} schedule does not build "
                             f"for {t}")
    shapes = plan.build_shapes(cfg.grid.sizes, args.grid, args.dtype or mla_decode.DTYPES)
    commit = None
    if args.record:
        from mlagate.gitops import resolve

        commit = resolve("HEAD")
    out = Path(args.out)
    with progress.tilelang_log(out):
        reports = report.build_reports(targets, configs, shapes, jobs=args.jobs, codegen_only=args.codegen_only,
                                       smem_limits=cfg.gate.shared_memory_limit, commit=commit)
    out.mkdir(parents=True, exist_ok=True)
    failed = False
    for target, rep in reports.items():
        findings = build_rules.evaluate_build(None, rep, cfg)
        for line in build_report.build_lines(rep, findings):
            print(line)
        stem = out / build_rules.sidecar_kind(target)
        stem.with_suffix(".json").write_text(json.dumps(rep, indent=1))
        stem.with_suffix(".md").write_text(build_report.build_markdown(rep, findings))
        print(f"wrote {stem}.json and {stem}.md")
        if args.record:
            from mlagate.store.results import Store, results_root

            path = Store(results_root(args.results)).write_sidecar(
                args.machine, commit, build_rules.sidecar_kind(target), rep)
            print(f"recorded {path}")
        failed |= any(f.failed for f in findings)
    sys.stdout.flush()
    return exits.REGRESSION if failed else exits.OK

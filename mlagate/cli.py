"""mlagate: the command line. Each subcommand parses its arguments, calls the
library and maps failures to exit codes (mlagate/exits.py: 0 ok, 1 the command's
check did not pass, 2 error: bad input, missing or corrupt results, config errors,
any unexpected exception)."""

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

from mlagate import config as config_mod
from mlagate import exits

SUBCOMMAND_MODULES = ("mlagate.build", "mlagate.publish", "mlagate.containers")


def _console():
    from rich.console import Console

    return Console(stderr=False, highlight=False)


def cmd_bench(args, cfg) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from mlagate import bench, measure, report

    import torch

    if not torch.cuda.is_available():
        raise ValueError("mlagate bench needs a CUDA or ROCm GPU; torch sees none "
                         "(on a CPU machine, `mlagate build --codegen-only` checks the kernels)")
    impls = args.impl or list(cfg.implementations)
    for name in impls:
        if name not in cfg.implementations:
            raise config_mod.ConfigError(f"--impl {name}: not in implementations ({', '.join(cfg.implementations)})")
    platform = measure.platform()
    cases = cfg.cases(args.grid, impls, platform, args.dtype)
    gpus = parse_gpus(args.gpus)
    env_start = measure.environment()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=_console(), transient=False) as progress:
        task = progress.add_task("benchmark", total=len(cases))

        def on_result(outcome):
            progress.update(task, advance=1, description=f"{outcome['impl']} b={outcome['batch']} "
                                                          f"s={outcome['seqlen']}: {outcome['status']}")

        rows = bench.run_cases(cases, cfg.timing, gpus=gpus, on_result=on_result)
    env = {"start": env_start, "end": measure.environment(), "config_digest": cfg.digest}
    rows = bench.add_metrics(rows, peaks=cfg.peaks(env_start.get("arch")),
                             vendor=cfg.platform(platform).vendor)
    _console().print(report.bench_table(rows, vendor=cfg.platform(platform).vendor))
    if args.out:
        bench.write_outputs(args.out, rows, env)
        print(f"wrote {args.out} and {Path(args.out).with_suffix('.csv')}")
    return exits.FAILED_CASES if any(r["status"] == "failed" for r in rows) else exits.OK


def cmd_record(args, cfg) -> int:
    from mlagate import recorder, store

    path = recorder.record(args.rev, results=store.results_root(args.results), machine=args.machine,
                           grid=args.grid, dtypes=args.dtype, impls=args.impl, bench_regex=args.bench)
    print(f"recorded {args.rev} -> {path}")
    return exits.OK


def cmd_gate(args, cfg) -> int:
    from mlagate import gate, report, store

    out = gate.run_gate(cfg, base_rev=args.base, head_rev=args.head, results=store.results_root(args.results),
                        out_dir=Path(args.out), machine=args.machine, platform=args.platform, confirm=args.confirm,
                        record_missing=args.record_missing, grid=args.grid)
    print(out.markdown)
    for line in report.annotations(out.verdict):
        print(line)
    print(f"wrote {', '.join(str(p) for p in out.files.values())}")
    for line in verdict_errors(out.verdict):  # exit 2 always says why on stderr, as every other error does
        print(f"error: {line}", file=sys.stderr)
    return out.verdict.exit_code


def verdict_errors(verdict) -> list:
    return [*verdict.errors, *(f"{c.label}: {'; '.join(c.reasons)}" for c in verdict.cases if c.status == "error")]


def cmd_results(args, cfg) -> int:
    from mlagate import store

    if args.action == "checkout":
        path = store.checkout_branch(Path.cwd(), args.branch, args.path, remote=args.remote)
        print(f"results branch '{args.branch}' at {path}; use --results {Path(path) / 'results'}")
    else:
        changed = store.commit_branch(args.path, args.message, remote=args.remote, branch=args.branch,
                                      push=not args.no_push)
        print("pushed new results" if changed else "nothing new to push")
    return exits.OK


def cmd_calibrate(args, cfg) -> int:
    from mlagate import calibration, report

    data = json.loads(Path(args.noise).read_text())
    g = cfg.gate
    slowdowns = [i / 100 for i in range(0, 11)]
    curves = {}
    for label, recorded in data.items():
        rounds = recorded["samples"]
        per_side = min(g.confirm_rounds, (len(rounds) - 2) // 2)
        curves[label] = calibration.detection_curve(rounds, slowdowns, screen=g.screen, threshold=g.threshold,
                                                    alpha=g.alpha, confirm_rounds=per_side, trials=args.trials)
    print(report.calibration_markdown(curves, g))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "calibration.json").write_text(json.dumps(curves, indent=1))
        report.calibration_plot(curves, out / "calibration.png", threshold=g.threshold)
        print(f"wrote {out / 'calibration.json'} and {out / 'calibration.png'}")
    at = {label: dict((round(s, 2), failed) for s, _, failed in c) for label, c in curves.items()}
    ok = all(a[0.05] >= 0.95 and a[0.0] <= 0.01 for a in at.values())
    return exits.OK if ok else exits.OFF_TARGET


def parse_gpus(text):
    """'all', a count ('4') or a list ('0,2,3') -> GPU indices as torch numbers them (within the
    parent's CUDA_/HIP_/ROCR_VISIBLE_DEVICES); None for one GPU as visible."""
    from mlagate.bench import worker_visible_env

    if not text:
        return None
    if text == "all" or text.isdigit():
        import torch

        available = torch.cuda.device_count()
        wanted = available if text == "all" else int(text)
        if wanted < 1 or wanted > available:
            raise ValueError(f"--gpus {text}: {available} GPU(s) visible")
        gpus = list(range(wanted))
    else:
        try:
            gpus = [int(x) for x in text.split(",")]
        except ValueError:
            raise ValueError(f"--gpus must be 'all', a count or a comma-separated list, got {text!r}") from None
    for gpu in gpus:  # an index past a visible-devices list: error now, not one failed case per worker
        worker_visible_env(os.environ, gpu)
    return gpus


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="mlagate", description=__doc__)
    parser.add_argument("--config", default=None, help="perf.yml (default: the repository's)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("bench", help="measure the grid and print a table")
    p.add_argument("--grid", default="quick", choices=("quick", "full"))
    p.add_argument("--impl", action="append", help="implementation (repeatable; default: all in perf.yml)")
    p.add_argument("--dtype", action="append", choices=config_mod.DTYPES,
                   help="dtype (repeatable; default: the platform's dtypes in perf.yml)")
    p.add_argument("--gpus", default=None, help="'all', N, or a list like 0,2: one worker per GPU")
    p.add_argument("--out", default=None, help="write JSON (raw samples) here and CSV beside it")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("record", help="run asv on a commit and append its results to the store")
    p.add_argument("--rev", default="HEAD", help="commit to record (a worktree is used if it is not checked out)")
    p.add_argument("--machine", required=True, help="asv machine name (one per GPU model and host setup)")
    p.add_argument("--results", default=None, help="results directory (default .asv/results or $MLAGATE_RESULTS)")
    p.add_argument("--grid", default="full", choices=("quick", "full"))
    p.add_argument("--impl", action="append", help="implementation (repeatable; default: all)")
    p.add_argument("--dtype", action="append", choices=config_mod.DTYPES, help="dtype (repeatable)")
    p.add_argument("--bench", default=None, help="asv --bench regex (e.g. TimeDecode)")
    p.set_defaults(func=cmd_record)

    p = sub.add_parser("gate", help="decide head against base from the results store")
    p.add_argument("--base", required=True, help="base revision (e.g. origin/main)")
    p.add_argument("--head", required=True, help="head revision (e.g. HEAD)")
    p.add_argument("--machine", default=None, help="asv machine name (default: the store's only machine)")
    p.add_argument("--results", default=None, help="results directory (default .asv/results or $MLAGATE_RESULTS)")
    p.add_argument("--platform", default=None, choices=config_mod.PLATFORMS,
                   help="the platform head must have been measured on (checked against its env sidecar)")
    p.add_argument("--confirm", action="store_true", help="re-measure flagged cases interleaved (needs the GPU)")
    p.add_argument("--record-missing", action="store_true", help="record base/head first if the store lacks them")
    p.add_argument("--grid", default="full", choices=("quick", "full"), help="grid for --record-missing")
    p.add_argument("--out", default="out/gate", help="folder for gate.md, verdict.json and tflops.png")
    p.set_defaults(func=cmd_gate)

    p = sub.add_parser("results", help="use a git branch as the results store (CI pushes results to it)")
    p.add_argument("action", choices=("checkout", "push"))
    p.add_argument("--branch", default="perf-results")
    p.add_argument("--path", default=".asv/branch", help="worktree of the results branch")
    p.add_argument("--remote", default="origin")
    p.add_argument("--message", default="results", help="commit message for push")
    p.add_argument("--no-push", action="store_true", help="commit in the worktree but do not push")
    p.set_defaults(func=cmd_results)

    p = sub.add_parser("calibrate", help="detection rate vs injected slowdown on recorded GPU noise")
    p.add_argument("--noise", default="tests/fixtures/h200/noise_study_2026-11-29.json",
                   help="rounds of samples per case (notes/noise_study.py output)")
    p.add_argument("--trials", type=int, default=400)
    p.add_argument("--out", default=None, help="folder for calibration.json and calibration.png")
    p.set_defaults(func=cmd_calibrate)

    import importlib

    for name in SUBCOMMAND_MODULES:  # each adds its parser and sets func(args, cfg) -> exit code
        importlib.import_module(name).add_parser(sub)

    args = parser.parse_args(argv)
    from mlagate.store import GateError, StoreError

    try:
        cfg = config_mod.load(args.config)
        return args.func(args, cfg)
    except (config_mod.ConfigError, GateError, StoreError, ValueError, OSError) as e:
        return _error(args.command, str(e))
    except Exception as e:  # a bug is still no verdict: exit 2, never 1 (which means "regression")
        traceback.print_exc()
        return _error(args.command, f"{type(e).__name__}: {e}")


def _error(command: str, message: str) -> int:
    from mlagate.report import workflow_command

    print(f"error: {message}", file=sys.stderr)
    if os.environ.get("GITHUB_ACTIONS"):
        print(workflow_command("error", f"mlagate {command}", message))
    return exits.ERROR


if __name__ == "__main__":
    sys.exit(main())

"""`mlagate bench`: measure the grid on this host's GPU(s) and print a table (JSON and CSV with --out)."""

import time
from pathlib import Path

from mlagate import config as config_mod
from mlagate import exits, progress
from mlagate.cli import flags
from mlagate.names import unknown


def add_parser(sub):
    p = sub.add_parser("bench", help="measure the grid and print a table")
    flags.grid(p, flags.LOOK_GRID, "the shapes measured")
    flags.impl(p, "all", ", or a tune candidate such as tilelang-hopper@N64.H64.split0.t256.stages2.FullCol")
    flags.dtype(p, "the platform's dtypes in perf.yml")
    flags.gpus(p)
    p.add_argument("--out", default=None, help="write JSON (raw samples) here and CSV beside it")
    p.set_defaults(func=run)


def run(args, cfg) -> int:
    import torch

    from mlagate.case import RunStatus
    from mlagate.decide import schedule
    from mlagate.measure import environment, grid, kernels_run, metrics, precompile
    from mlagate.report import schedules, text

    impls = args.impl or list(cfg.implementations)  # bad input first, on any machine
    for name in impls:
        if name not in cfg.implementations and not _candidate(name):
            raise config_mod.ConfigError(f"--impl: {unknown('implementation', name, cfg.implementations)}; "
                                         "or a tune candidate (tilelang-<family>@..., as `mlagate tune` names them)")
    if not torch.cuda.is_available():
        raise ValueError("mlagate bench needs a CUDA or ROCm GPU; torch sees none "
                         "(on a CPU machine, `mlagate build --codegen-only` checks the kernels)")
    platform = environment.platform()
    cases = cfg.cases(args.grid, impls, platform, args.dtype)
    gpus = grid.parse_gpus(args.gpus)
    env_start = environment.environment()
    # TileLang's log beside --out (out/bench without it)
    with progress.tilelang_log(Path(args.out).parent if args.out else Path("out/bench")), \
            precompile.ahead(cases, precompile.default_jobs(len(gpus or [0]))) as compiled, \
            progress.bar("benchmark", total=len(cases)) as cases_done:

        def on_result(result):
            case = result.case
            cases_done.advance(f"{case.impl} b={case.batch} s={case.seqlen}: {result.status}")

        spent, start = {}, time.monotonic()
        results = grid.run_cases(cases, cfg.timing, budgets=[cfg.budget_for(c.impl, platform) for c in cases],
                                 gpus=gpus, on_result=on_result, compiled=compiled, spent=spent)
    print(progress.time_spent(spent, time.monotonic() - start))
    env_start["vendors"] = kernels_run.by_row([r.to_dict() for r in results], env_start["vendors"])
    env = {"start": env_start, "end": environment.environment(), "config_digest": cfg.digest}
    results = metrics.add_metrics(results, peaks=cfg.peaks(env_start.get("arch"), env_start.get("gpu")),
                               vendor=cfg.platform(platform).vendor_impl)
    _console().print(text.bench_table(results, vendor=" | ".join(cfg.platform(platform).vendor_impls())))
    planned = schedule.diagnose_cases([r.case for r in results], env_start.get("arch"))
    # how evenly each workload case's batch is dealt over the SMs, by TileLang's plan and the vendor's
    for line in [schedules.UNKNOWN] if planned is None else schedules.lines(planned):
        print(f"schedule balance: {line}")
    warning = text.clock_warning(env_start.get("clock_control"),
                                 [w for r in results if r.samples for w in r.samples.windows])
    if warning:
        print(f"warning: {warning}")
    if args.out:
        grid.write_outputs(args.out, results, env)
        print(f"wrote {args.out} and {Path(args.out).with_suffix('.csv')}")
    return exits.FAILED_CASES if any(r.status == RunStatus.FAILED for r in results) else exits.OK


def _candidate(name: str) -> bool:
    """A tune candidate's name (one config of a TileLang family); a malformed one raises, naming it."""
    from mlagate.kernels import tuned

    return tuned.parse_candidate(name) is not None


def _console():
    from rich.console import Console

    return Console(stderr=False, highlight=False)

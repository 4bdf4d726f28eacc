"""The lab: probes and studies that ask the gate and its kernels questions the product does not answer by
itself (lab/README.md lists each with its command). Not installed, not imported by mlagate; run a script from the
repository root as ``python -m lab.<name>``; tests/test_lab.py imports each and runs what a CPU can."""

import argparse
import json


def case_parser(doc: str) -> argparse.ArgumentParser:
    """The arguments of a study of one case: OUT.json, --summary OUT.json, and the case (a quick-grid point)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", nargs="?")
    p.add_argument("--summary", metavar="OUT.json")
    p.add_argument("--impl", default="tilelang-seesaw")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seqlen", type=int, default=4096)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--dtype", default="float16")
    return p


def case_name(args) -> str:
    return f"{args.impl} h={args.heads} b={args.batch} s={args.seqlen} {args.dtype}"


def summary_or_run(parser, args, measure, table) -> None:
    """--summary: print a recorded run's table; otherwise measure, write OUT.json and print the table."""
    if args.summary:
        with open(args.summary) as f:
            print(table(json.load(f)))
        return
    if not args.out:
        parser.error("give OUT.json (or --summary OUT.json)")
    run = measure(args)
    with open(args.out, "w") as f:
        json.dump(run, f)
    print(table(run))


def warm_launch(args):
    """(launch, timing, device) of the case, checked against the reference, after the process's first warm-up
    (as a record's first case has it)."""
    from mlagate import config
    from mlagate.case import Case
    from mlagate.measure import timer
    from mlagate.measure.environment import device
    from mlagate.measure.harness import Inputs, checked_launch

    timing, gpu = config.load().timing, device()
    launch = checked_launch(args.impl, Inputs(Case(args.impl, args.batch, args.seqlen, args.dtype, args.heads), gpu),
                            gpu)[0]
    timer.time_gpu(launch, timing, "record", device=gpu)
    return launch, timing, gpu

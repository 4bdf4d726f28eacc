"""The flags several subcommands share, spelled, checked, explained and defaulted here only (asv's
commands/common_args.py). A subcommand adds one with ``flags.grid(p)`` and never with its own add_argument, so
``--grid`` means the same wherever it is typed (tests/test_cli.py walks every parser for that)."""

import argparse
import os
import re

from mlagate import config as config_mod

# --grid's default by what the command does with it: what it records into a shared store must be the grid main
# records (a gate compares like with like), what it only measures or compiles for a look is the quick one.
STORE_GRID = "full"
LOOK_GRID = "quick"
RESULTS_HELP = "results directory (default .asv/results or $MLAGATE_RESULTS)"
MACHINE_HELP = {
    "records": "asv machine name the records go under (one per GPU model and host setup)",
    "reads": "asv machine name (default: the store's only machine; an unknown one is refused naming those there)",
    "sidecars": "asv machine name the reports go under as sidecars (needed with --record)",
}


def grid(p, default: str, what: str):
    """``what``: what the grid's shapes are for in this command."""
    if default not in (STORE_GRID, LOOK_GRID):
        raise ValueError(f"--grid default {default!r}: STORE_GRID or LOOK_GRID")
    p.add_argument("--grid", default=default, choices=config_mod.GRIDS,
                   help=f"perf.yml grid, {what} (default {default})")


def impl(p, default: str, extra: str = ""):
    p.add_argument("--impl", action="append",
                   help=f"implementation of perf.yml (repeatable; default: {default}){extra}")


def dtype(p, default: str):
    p.add_argument("--dtype", action="append", choices=config_mod.DTYPES,
                   help=f"dtype (repeatable; default: {default})")


def machine_name(text: str) -> str:
    """A machine name is one folder of the results store (asv's results/<machine>/): letters, digits, '.', '_', '-',
    not starting with '.'; a '/' would nest folders the store never lists, '..' leave the store."""
    if not re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]*", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a machine name (letters, digits, '.', '_', '-'; not "
                                         "starting with '.')")
    return text


def machine(p, role: str):
    """``role``: "records" (required: the records go under it), "reads" (the store's only machine by default) or
    "sidecars" (build --record's)."""
    p.add_argument("--machine", required=role == "records", default=None, type=machine_name, help=MACHINE_HELP[role])


def results(p):
    p.add_argument("--results", default=None, help=RESULTS_HELP)


def gpus(p):
    p.add_argument("--gpus", default=None, help="measure on several GPUs of this host, one worker per GPU: 'all', "
                                                "a count or a list like 0,2 (default: the one visible)")


def jobs(p, what: str):
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help=f"{what} (default: the CPU count)")

"""mlagate: the command line. One module per subcommand, each a thin shell over the library:
``add_parser(sub)`` adds its arguments and sets ``func(args, cfg) -> exit code``. Failures map to
the exit codes of mlagate/exits.py: 0 ok, 1 the command's check did not pass, 2 error (bad input,
missing or corrupt results, config errors, any unexpected exception)."""

import argparse
import os
import re
import sys
import traceback

from mlagate import config as config_mod
from mlagate import exits, gitops
from mlagate.cli import (
    bench,
    bisect,
    build,
    calibrate,
    demo,
    gate,
    gpus,
    ladder,
    record,
    report,
    results,
    runner_check,
    tune,
)
from mlagate.cli import parser as cli_parser

# The options that name a commit, across the subcommands.
REVISIONS = ("base", "head", "bad", "good", "commit", "rev")
COMMANDS = (bench, record, gate, results, report, build, calibrate, gpus, runner_check, bisect, ladder, tune, demo)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mlagate", description=__doc__)
    parser.add_argument("--config", default=None, help="perf.yml (default: the repository's)")
    parser.add_argument("--version", action=cli_parser.Version, help="the version (and commit) of mlagate")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS:  # each adds its parser, which sets func(args, cfg) -> exit code
        module.add_parser(sub)
    cli_parser.finish(parser)  # exit codes in every --help, "did you mean" for every choice
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    cli_parser.check_command(parser, argv)
    args = parser.parse_args(argv)
    from mlagate.store.errors import GateError, StoreError

    empty = [f"--{name}" for name in REVISIONS if getattr(args, name, None) is not None
             and not str(getattr(args, name)).strip()]
    if empty:  # git's "rev-parse --verify ^{commit} failed" would name nothing
        return _error(args.command, f"{empty[0]}: an empty revision; give a commit or a branch")
    given = [f"--{name} {value}" for name in REVISIONS if (value := getattr(args, name, None))
             and not re.fullmatch(r"[0-9a-f]{40}", value)]  # a full hash is taken as given where a clone lacks it
    if given and gitops.REPO is None:  # revisions resolve where mlagate runs, never in its own checkout
        try:
            gitops.repository()
        except gitops.GitError as e:
            return _error(args.command, f"{given[0]}: {e}")
    try:
        cfg = config_mod.load(args.config)
        return args.func(args, cfg)
    except (config_mod.ConfigError, GateError, StoreError, ValueError, OSError) as e:
        return _error(args.command, str(e))
    except Exception as e:  # a bug is still no verdict: exit 2, never 1 (which means "regression")
        traceback.print_exc()
        return _error(args.command, f"{type(e).__name__}: {e}")


def _error(command: str, message: str) -> int:
    from mlagate.report.text import workflow_command

    print(f"error: {message}", file=sys.stderr)
    if os.environ.get("GITHUB_ACTIONS"):
        print(workflow_command("error", f"mlagate {command}", message))
    return exits.ERROR


if __name__ == "__main__":
    sys.exit(main())

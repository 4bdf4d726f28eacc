"""What every subcommand's parser gets from one place: the exit codes in its --help (from mlagate/exits.py),
"did you mean" for an unknown subcommand or choice, and ``--version``."""

import argparse

from mlagate import exits
from mlagate.names import unknown


def subparsers(parser: argparse.ArgumentParser) -> dict:
    """{name: parser} of ``parser``'s subcommands (empty where it has none)."""
    return next((dict(a.choices) for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})


def finish(parser: argparse.ArgumentParser, path: str = "") -> None:
    """Give ``parser`` and every subcommand below it the exit-code epilog and checked choices; ``path`` is the
    subcommand's name ("" for the top, "results merge" for a nested one)."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter  # keeps the epilog's lines
    parser.epilog = exits.epilog(path.split()[0] if path else None)
    for action in parser._actions:
        if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
            action.type = _checked(action)
    for name, child in subparsers(parser).items():
        finish(child, f"{path} {name}".strip())


def _checked(action: argparse.Action):
    """``action``'s type, then a check against its choices that names the closest ones (argparse's own check
    lists them all and suggests nothing)."""
    convert, choices = action.type or str, action.choices

    def check(text):
        value = convert(text)
        if value not in choices:
            raise argparse.ArgumentTypeError(unknown("", text, choices))  # argparse puts the option first
        return value

    check.__name__ = getattr(convert, "__name__", "value")  # argparse names the type in its own errors
    return check


def check_command(parser: argparse.ArgumentParser, argv: list) -> None:
    """An unknown subcommand (at any depth: ``results merj``) exits 2 naming the closest ones, where argparse
    would list every one and suggest none."""
    commands = subparsers(parser)
    if not commands:
        return
    takes_value = {o for a in parser._actions if a.nargs != 0 for o in a.option_strings}
    words = iter(argv)
    for word in words:
        if word in takes_value:
            next(words, None)
        elif not word.startswith("-"):
            if word not in commands:
                parser.error(unknown("command", word, commands))
            return check_command(commands[word], list(words))


class Version(argparse.Action):
    """``--version``: the package's version, and the commit where mlagate runs from a git checkout."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version())
        parser.exit()


def version() -> str:
    from importlib import metadata

    from mlagate import gitops
    from mlagate.config import ROOT

    try:
        number = metadata.version("mlagate")
    except metadata.PackageNotFoundError:  # a source tree on PYTHONPATH, never installed
        number = "unknown (not installed)"
    commit = gitops.head_or_none(ROOT) if (ROOT / ".git").exists() else None  # the package's own checkout
    where = f" (commit {commit[:12]}, checkout {ROOT})" if commit else ""
    return f"mlagate {number}{where}"

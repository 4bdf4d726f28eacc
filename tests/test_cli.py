"""The command line helps: --version, the exit codes in every --help (from mlagate/exits.py), and "did you mean"
for an unknown subcommand, choice or implementation."""

from importlib import metadata

import pytest

from mlagate import cli, exits, gitops
from mlagate.cli import parser as cli_parser
from mlagate.config import ROOT


def commands(parser=None, path=()):
    """Every subcommand's path (("gate",), ("results", "merge"), ...) and its parser."""
    parser = parser or cli.build_parser()
    for name, child in cli_parser.subparsers(parser).items():
        yield (*path, name), child
        yield from commands(child, (*path, name))


PATHS = [path for path, _ in commands()]


def run(capsys, *argv):
    """(exit code, stdout, stderr) of `mlagate argv`, whether it returns or exits."""
    try:
        code = cli.main(list(argv))
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def test_version_names_the_package_version_and_this_checkouts_commit(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0
    assert out.startswith(f"mlagate {metadata.version('mlagate')} ")
    assert f"commit {gitops.head_or_none(ROOT)[:12]}" in out


@pytest.mark.parametrize("path", PATHS, ids=" ".join)
def test_every_subcommands_help_lists_its_exit_codes(capsys, path):
    code, out, _ = run(capsys, *path, "--help")
    assert code == 0
    listed = out[out.index("exit codes:"):]
    for number, meaning in exits.codes(path[0]):
        assert f"{number}  {meaning}" in listed, (path, number)
    assert ("  1  " in listed) == (path[0] in exits.ONE)  # a command that never exits 1 does not list it


def test_the_top_help_lists_what_1_means_for_each_command(capsys):
    _, out, _ = run(capsys, "--help")
    for name, (number, meaning) in exits.ONE.items():
        assert f"{number}  {name}: {meaning}" in out


def test_the_exit_table_names_only_subcommands_there_are():
    assert set(exits.ONE) <= {path[0] for path in PATHS}


@pytest.mark.parametrize("argv, hint", [
    (("gat", "--base", "a", "--head", "b"), "command 'gat' is unknown; did you mean gate?"),
    (("runner_check",), "did you mean runner-check?"),
    (("results", "merj"), "did you mean merge?"),
], ids=["gate", "runner-check", "results merge"])
def test_an_unknown_subcommand_exits_2_naming_the_closest(capsys, argv, hint):
    code, _, err = run(capsys, *argv)
    assert code == exits.ERROR and hint in err, err


@pytest.mark.parametrize("argv, hint", [
    (("gate", "--base", "a", "--head", "b", "--grid", "ful"), "argument --grid: 'ful' is unknown; did you mean full?"),
    (("bench", "--dtype", "float61"), "argument --dtype: 'float61' is unknown; did you mean float16"),
    (("gate", "--base", "a", "--head", "b", "--platform", "cuad"), "did you mean cuda?"),
    (("runner-check", "--role", "trustd"), "did you mean trusted?"),
], ids=["--grid", "--dtype", "--platform", "--role"])
def test_an_unknown_choice_exits_2_naming_the_closest_and_all(capsys, argv, hint):
    code, _, err = run(capsys, *argv)
    assert code == exits.ERROR and hint in err, err
    assert "(known: " in err


def test_a_choice_keeps_its_type(capsys):
    parser = cli.build_parser()
    assert parser.parse_args(["gate", "--base", "a", "--head", "b", "--grid", "quick"]).grid == "quick"


@pytest.mark.parametrize("argv, hint", [
    (("bench", "--impl", "flash_mlaa"), "--impl: implementation 'flash_mlaa' is unknown; did you mean flash_mla"),
    (("ladder", "--base", "HEAD", "--impls", "tilelang-hoper"), "did you mean tilelang-hopper, "),
], ids=["bench --impl", "ladder --impls"])
def test_an_unknown_implementation_names_the_closest_of_perf_yml(capsys, argv, hint):
    code, _, err = run(capsys, *argv)
    assert code == exits.ERROR and hint in err, err

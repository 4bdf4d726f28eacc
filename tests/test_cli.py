"""The command line helps: --version, the exit codes in every --help (from mlagate/exits.py), and "did you mean"
for an unknown subcommand, choice or implementation."""

import os
import shutil
import subprocess
from importlib import metadata

import pytest

import gate_fixtures as fx
from mlagate import cli, config, exits, gitops
from mlagate.cli import flags
from mlagate.cli import parser as cli_parser
from mlagate.config import ROOT
from mlagate.store.errors import GateError
from mlagate.store.results import Store, pick_machine


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
    (("ladder", "--base", "HEAD", "--machine", "m", "--impl", "tilelang-hoper"), "did you mean tilelang-hopper, "),
], ids=["bench --impl", "ladder --impl"])
def test_an_unknown_implementation_names_the_closest_of_perf_yml(capsys, argv, hint):
    code, _, err = run(capsys, *argv)
    assert code == exits.ERROR and hint in err, err


# -- errors that name what exists and what to type next ---------------------------------------------------------

def test_gate_on_an_empty_store_says_so_and_gives_the_record_commands(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code, _, err = run(capsys, "gate", "--base", fx.BASE, "--head", fx.DOCS, "--results", str(tmp_path / "empty"),
                       "--out", str(tmp_path / "out"))
    assert code == exits.ERROR
    assert "no results recorded yet, on any machine" in err
    for commit in (fx.BASE, fx.DOCS):
        assert f"mlagate record --rev {commit} --machine <name> --results {tmp_path / 'empty'}" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["gate", "report"])
def test_a_machine_the_store_lacks_is_refused_naming_those_it_has(tmp_path, capsys, command):
    root = fx.copy_store(tmp_path)
    revisions = ["--base", fx.BASE, "--head", fx.DOCS] if command == "gate" else []
    code, _, err = run(capsys, command, *revisions, "--machine", "h20", "--results", str(root),
                       "--out", str(tmp_path / "out"))
    assert code == exits.ERROR
    assert "--machine 'h20' is unknown; did you mean h200? (known: h200)" in err, err
    assert not (tmp_path / "out").exists()


def test_several_machines_and_no_machine_names_them(tmp_path, capsys):
    root = fx.copy_store(tmp_path)
    shutil.copytree(root / fx.MACHINE, root / "mi300x")
    code, _, err = run(capsys, "gate", "--base", fx.BASE, "--head", fx.DOCS, "--results", str(root),
                       "--out", str(tmp_path / "out"))
    assert code == exits.ERROR and "2 machines recorded (h200, mi300x); pass --machine" in err, err


def test_a_machine_a_record_is_about_to_start_is_taken(tmp_path):
    store = Store(fx.copy_store(tmp_path))
    assert pick_machine(store, "new-box", new=True) == "new-box"
    with pytest.raises(GateError, match="did you mean"):
        pick_machine(store, "h2000")


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """mlagate's own default (commits resolve in the working directory's repository), run from tmp_path."""
    monkeypatch.setattr(gitops, "REPO", None)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("argv", [
    ("gate", "--base", "HEAD~1", "--head", "HEAD", "--results", "r"),
    ("record", "--machine", "m", "--results", "r"),
    ("bisect", "--machine", "m", "--results", "r"),
    ("ladder", "--base", "HEAD", "--machine", "m"),
], ids=["gate --base", "record --rev", "bisect --bad", "ladder --base"])
def test_outside_a_git_repository_a_revision_is_refused_saying_so(elsewhere, capsys, argv):
    code, _, err = run(capsys, *argv)
    assert code == exits.ERROR
    assert f"{elsewhere} is in no git repository" in err and "cd into your clone" in err, err
    assert f"--{ {'gate': 'base', 'record': 'rev', 'bisect': 'bad', 'ladder': 'base'}[argv[0]]} " in err, err
    assert list(elsewhere.iterdir()) == []  # nothing written


def test_revisions_resolve_in_the_working_directorys_repository(elsewhere, capsys):
    def git(*args):
        return subprocess.run(["git", "-C", str(elsewhere), *args], check=True, capture_output=True, text=True)

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@localhost", "-c", "commit.gpgsign=false", "commit", "-q",
        "--allow-empty", "-m", "another project")
    theirs = git("rev-parse", "HEAD").stdout.strip()
    assert theirs != gitops.head_or_none(ROOT)
    (elsewhere / "empty").mkdir()
    code, _, err = run(capsys, "gate", "--base", "HEAD", "--head", "HEAD", "--results", "empty", "--out", "out")
    assert code == exits.ERROR and f"mlagate record --rev {theirs} " in err, err


def test_a_revision_the_clone_lacks_names_it_and_how_to_fetch_it():
    with pytest.raises(gitops.GitError) as e:
        gitops.resolve("no-such-branch")
    assert f"'no-such-branch' names no commit in {ROOT}" in str(e.value) and "fetch" in str(e.value)
    assert "fatal" not in str(e.value)


# -- the same flag, the same way, in every subcommand -------------------------------------------------------------

def shared_uses():
    """{dest: [(subcommand path, action)]} of the flags tests below hold to mlagate/cli/flags.py."""
    uses = {}
    for path, parser in commands():
        for action in parser._actions:
            if action.dest in SHARED:
                uses.setdefault(action.dest, []).append((" ".join(path), action))
    return uses


SHARED = {  # dest: (its one spelling, the helps flags.py writes for it, the defaults it may have)
    "grid": ("--grid", "perf.yml grid, ", {flags.STORE_GRID, flags.LOOK_GRID}),
    "impl": ("--impl", "implementation of perf.yml (repeatable; default: ", {None}),
    "dtype": ("--dtype", "dtype (repeatable; default: ", {None}),
    "machine": ("--machine", tuple(flags.MACHINE_HELP.values()), {None}),
    "results": ("--results", flags.RESULTS_HELP, {None}),
    "gpus": ("--gpus", "measure on several GPUs of this host", {None}),
    "jobs": ("--jobs", "", {os.cpu_count() or 1}),
}


@pytest.mark.parametrize("dest", SHARED)
def test_a_shared_flag_has_one_spelling_one_help_source_and_one_default(dest):
    spelling, helps, defaults = SHARED[dest]
    uses = shared_uses()[dest]
    assert len(uses) >= 2, dest  # shared: else it belongs to its command alone
    for where, action in uses:
        assert action.option_strings == [spelling], where
        help_text = action.help or ""
        assert (help_text in helps) if isinstance(helps, tuple) else help_text.startswith(helps), (where, help_text)
        assert action.default in defaults, (where, action.default)
        if dest == "machine":  # required exactly where the records go under it
            assert action.required == (help_text == flags.MACHINE_HELP["records"]), where
    assert len({type(a) for _, a in uses}) == 1, dest  # repeatable everywhere, or nowhere
    assert len({tuple(a.choices or ()) for _, a in uses}) == 1, dest


def test_every_grid_is_a_checked_choice_of_perf_ymls_grids_and_says_its_default():
    for where, action in shared_uses()["grid"]:
        assert tuple(action.choices) == config.GRIDS, where
        assert action.help.endswith(f"(default {action.default})"), where


def test_the_old_spelling_ladder_impls_is_gone_from_the_workflows_compose_and_docs():
    texts = [p.read_text() for p in (*ROOT.glob(".github/workflows/*.yml"), ROOT / "docker-compose.yml",
                                     ROOT / "Makefile", ROOT / "README.md", *ROOT.glob("docs/*.md"))
             if p.name != "measurements.md"]  # the log keeps the commands as they were run
    assert not [t for t in texts if "--impls" in t]

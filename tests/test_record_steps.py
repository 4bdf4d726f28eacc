"""A record's steps on a CPU, asv stood in: the asv command lines, their environment and working folder, the
config asv reads, the time budget, what goes into the store beside asv's results, the record's private tree
and the dead ones it clears, and the store's lock while another process writes.

record runs asv with the Python it runs in (``record.sys.executable``): a stand-in executable takes its place,
logs how it was called and writes what a real `asv run` would. git is real, in a repository of two commits
made for each test (no checkout of this project needed: mutmut's copy of the tree has none)."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import gate_fixtures as fx
from mlagate import gitops
from mlagate.measure import asv_one_process
from mlagate.store import files, record
from mlagate.store.errors import StoreError
from mlagate.store.results import Store
from test_record_safety import control_files, snapshot

# the cases a run measured (CaseResult.to_dict()s) and what the suite said about it; flash_mla is a vendor
KERNELS = ["void flash::flash_fwd_splitkv_mla_kernel<Traits>(Params)",
           "void flash::flash_fwd_mla_combine_kernel<T>(Params)"]
CASES = {"results": [{"impl": "flash_mla", "dtype": "bfloat16", "heads": 128, "q_len": 1, "kv_dtype": "bfloat16",
                      "kernels": KERNELS},
                     {"impl": "torch", "dtype": "bfloat16", "heads": 128, "kernels": ["ampere_bf16_gemm"]}],
         "said": ["compiled 2 kernels in 1.5 s", "measuring pass: 40 s of the 90 s budget"]}
VENDORS = {"flash_mla": {"version": "1.0.3"}}
VENDORS_RAN = {"flash_mla": {"version": "1.0.3", "kernels": {"bfloat16/128": {
    "ran": KERNELS, "kernel": "flash_fwd_splitkv_mla_kernel#e28cba39 + flash_fwd_mla_combine_kernel#059eac0c"}}}}


def git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def asv_conf(project) -> dict:
    return {"version": 1, "project": project, "repo": ".", "environment_type": "existing",
            "benchmark_dir": "benchmarks", "results_dir": ".asv/results", "html_dir": ".asv/html"}


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A repository of two commits, "first" and "second" (HEAD), each with its own asv.conf.json (the
    project named so) and perf.yml; commits resolve in it."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    for args in (("user.name", "mlagate tests"), ("user.email", "tests@localhost"), ("commit.gpgsign", "false")):
        git(repo, "config", *args)
    for project in ("first", "second"):
        (repo / "asv.conf.json").write_text(json.dumps(asv_conf(project)))
        (repo / "perf.yml").write_text(f"# {project}\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", project)
    monkeypatch.setattr(gitops, "REPO", repo)
    return repo


def worktrees(repo) -> list:
    return [line for line in git(repo, "worktree", "list", "--porcelain").splitlines() if line.startswith("worktree ")]


def asv_results(folder: Path, commit: str) -> Path:
    """What `asv run` writes for ``commit`` on the h200 machine: a real H200 results file of another commit,
    renamed, with asv's machine.json and benchmarks.json."""
    src = fx.results_file(fx.RESULTS, fx.BASE)
    data = json.loads(src.read_text())
    data["commit_hash"] = commit
    (folder / fx.MACHINE).mkdir(parents=True)
    (folder / fx.MACHINE / src.name.replace(fx.BASE[:8], commit[:8])).write_text(json.dumps(data))
    shutil.copy(fx.RESULTS / fx.MACHINE / "machine.json", folder / fx.MACHINE / "machine.json")
    shutil.copy(fx.RESULTS / "benchmarks.json", folder / "benchmarks.json")
    return folder


STANDIN = """#!{python}
import json, os, shutil, sys
plan = json.loads(open({plan!r}).read())
args = sys.argv[1:]
config = json.loads(open(args[args.index("--config") + 1]).read()) if "--config" in args else None
with open({calls!r}, "a") as log:
    log.write(json.dumps({{"args": args, "cwd": os.getcwd(), "env": dict(os.environ), "config": config}}) + "\\n")
step = plan.get(args[2] if len(args) > 2 else "", {{"exit": 99}})
for stream, line in step.get("say", ()):
    print(line, file=sys.stdout if stream == "out" else sys.stderr, flush=True)
if step.get("results"):
    shutil.copytree(step["results"], config["results_dir"], dirs_exist_ok=True)
if step.get("cases") is not None:
    open(os.environ["MLAGATE_CASES_OUT"], "w").write(json.dumps(step["cases"]))
sys.exit(step.get("exit", 0))
"""


class StandIn:
    """asv's stand-in: ``plan(machine=..., run=...)`` says what `asv machine` and `asv run` do (lines to
    say on "out" or "err", a folder of results to write, cases to write, an exit code); ``calls()`` is how
    it was called, each with its arguments, working folder, environment and the config it was given."""

    def __init__(self, folder: Path):
        folder.mkdir()
        self.plan_path, self.calls_path, self.path = folder / "plan.json", folder / "calls.jsonl", folder / "python"
        self.path.write_text(STANDIN.format(python=sys.executable, plan=str(self.plan_path),
                                            calls=str(self.calls_path)))
        self.path.chmod(0o755)
        self.plan()

    def plan(self, machine=None, run=None):
        self.plan_path.write_text(json.dumps({"machine": machine or {}, "run": run or {}}))

    def calls(self) -> list:
        if not self.calls_path.exists():
            return []
        return [json.loads(line) for line in self.calls_path.read_text().splitlines()]


@pytest.fixture
def asv(tmp_path, repo, monkeypatch):
    """The stand-in asv, a GPU, and an environment record that names the commit it was taken for."""
    standin = StandIn(tmp_path / "standin")
    monkeypatch.setattr(record, "sys", SimpleNamespace(executable=str(standin.path)))
    monkeypatch.setattr(record, "gpu_available", lambda: True)
    taken = []

    def environment(commit=None):
        taken.append(commit)
        return {"commit": commit, "platform": "cuda", "taken": len(taken), "vendors": json.loads(json.dumps(VENDORS))}

    monkeypatch.setattr(record.environment, "environment", environment)
    for name in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    return standin


def tree_of(call) -> Path:
    """The record's private tree: the folder of the config asv was given."""
    return Path(call["args"][call["args"].index("--config") + 1]).parent


def prefix(results: Path) -> str:
    return f"mlagate-record-{hashlib.sha1(str(results).encode()).hexdigest()[:10]}-"


def run_command(tree: Path, commit: str, *bench) -> list:
    return [str(record.sys.executable), asv_one_process.SCRIPT, "asv", "run", "--python=same", "--set-commit-hash",
            commit, "--machine", fx.MACHINE, "--record-samples", "--show-stderr", "--config",
            str(tree / "asv.conf.json"), *bench]


# -- a whole record -------------------------------------------------------------------

def test_a_record_of_the_clean_checkout_runs_asv_there_and_stores_its_results_log_environment_and_cases(
        tmp_path, repo, asv, monkeypatch):
    """Everything a record is given reaches asv (its command line and environment) and the env sidecar; the
    cases the suite wrote go in beside them, with the vendor kernels that ran in the environment record."""
    head = git(repo, "rev-parse", "HEAD")
    (repo / "notes.txt").write_text("untracked files leave the checkout clean")
    monkeypatch.setattr(record, "time", SimpleNamespace(time=lambda: 1_000.0))
    monkeypatch.setenv("PYTHONPATH", "/opt/extra")
    root = fx.copy_store(tmp_path)
    before = snapshot(root)
    say = [["out", "· Discovering benchmarks"], ["err", "  warning: no GPU  "], ["out", "   · TimeDecode 1/2 ok"]]
    asv.plan(machine={"say": [["out", "I will now ask you some questions"]]},
             run={"say": say, "results": str(asv_results(tmp_path / "made", head)), "cases": CASES})
    echoed, gpu_check = [], {"consistent": True, "gpus": ["H200", "H200"]}
    installed = record.record("HEAD", results=root, machine=fx.MACHINE, grid="quick", dtypes=["float16", "bfloat16"],
                              impls=["torch", "flash_mla"], bench_regex="TimeDecode", time_budget_s=90, gpus="0,1",
                              shard="2/3", gpu_check=gpu_check, echo=echoed.append)

    machine_call, run_call = asv.calls()
    tree = tree_of(run_call)
    assert tree.parent == repo / ".asv" / "records" and tree.name.startswith(prefix(root))
    assert machine_call["args"] == ["-m", "asv", "machine", "--machine", fx.MACHINE, "--yes", "--config",
                                    str(tree / "asv.conf.json")]
    command = run_command(tree, head, "--bench", "TimeDecode")
    assert run_call["args"] == command[1:] and run_call["cwd"] == str(repo)
    assert run_call["config"] == machine_call["config"] == {
        **asv_conf("second"), "repo": str(repo), "benchmark_dir": str(repo / "benchmarks"),
        "results_dir": str(tree / "results"), "html_dir": str(tree / "html")}
    assert run_call["env"] == machine_call["env"] == {
        **os.environ, "ASV_PYTHONPATH": f"{repo}{os.pathsep}/opt/extra", "MLAGATE_CONFIG": str(repo / "perf.yml"),
        "MLAGATE_GRID": "quick", "MLAGATE_DTYPES": "float16,bfloat16", "MLAGATE_IMPLS": "torch,flash_mla",
        "MLAGATE_CASES_OUT": str(tree / "cases.json"), "MLAGATE_DEADLINE": "1090.0", "MLAGATE_GPUS": "0,1",
        "MLAGATE_SHARD": "2/3"}
    assert echoed == [f"$ {' '.join(command)}", "· Discovering benchmarks", "  warning: no GPU",
                      "   · TimeDecode 1/2 ok", *CASES["said"]]

    results_name = fx.results_file(tmp_path / "made", head).name
    assert installed == root / fx.MACHINE / results_name
    assert sorted(set(snapshot(root)) - set(before)) == [f"h200/{head[:8]}-{kind}.sidecar"
                                                          for kind in ("asv-log", "cases", "env")] + [
                                                             f"h200/{results_name}"]
    stored = Store(root)
    assert stored.load(fx.MACHINE, head).paths == [str(installed)]
    assert stored.read_sidecar(fx.MACHINE, head, "asv-log") == {
        "command": command, "exit_code": 0,
        "log": "· Discovering benchmarks\n  warning: no GPU  \n   · TimeDecode 1/2 ok\n"}
    assert stored.read_sidecar(fx.MACHINE, head, "env") == {
        "start": {"commit": head, "platform": "cuda", "taken": 1, "vendors": VENDORS_RAN},
        "end": {"commit": head, "platform": "cuda", "taken": 2, "vendors": VENDORS}, "grid": "quick",
        "dtypes": ["float16", "bfloat16"], "impls": ["torch", "flash_mla"], "platform": "cuda", "gpus": "0,1",
        "shard": "2/3", "gpu_consistency": gpu_check}
    assert stored.read_sidecar(fx.MACHINE, head, "cases") == CASES
    assert control_files(root) == [files.LOCK]
    assert list((repo / ".asv" / "records").iterdir()) == [] and len(worktrees(repo)) == 1


def test_a_record_of_another_commit_runs_asv_in_a_worktree_of_it_with_the_defaults(tmp_path, repo, asv,
                                                                                   monkeypatch):
    """The commit's own asv.conf.json and perf.yml, not the checkout's; a commit from before the suite wrote
    its cases stores none; asv's exit code is kept beside results it wrote all the same."""
    first = git(repo, "rev-parse", "HEAD~1")
    monkeypatch.delenv("PYTHONPATH", raising=False)
    root = fx.copy_store(tmp_path)
    asv.plan(run={"say": [["out", "· 1 failed"]], "results": str(asv_results(tmp_path / "made", first)), "exit": 1})
    echoed = []
    record.record("HEAD~1", results=root, machine=fx.MACHINE, echo=echoed.append)

    machine_call, run_call = asv.calls()
    tree = tree_of(run_call)
    source = tree / "src"
    command = run_command(tree, first)
    assert run_call["args"] == command[1:] and run_call["cwd"] == str(source)
    assert run_call["config"] == {**asv_conf("first"), "repo": str(repo), "benchmark_dir": str(source / "benchmarks"),
                                  "results_dir": str(tree / "results"), "html_dir": str(tree / "html")}
    assert run_call["env"] == machine_call["env"] == {
        **os.environ, "ASV_PYTHONPATH": str(source), "MLAGATE_CONFIG": str(source / "perf.yml"),
        "MLAGATE_GRID": "full", "MLAGATE_CASES_OUT": str(tree / "cases.json")}
    assert echoed == [f"$ {' '.join(command)}", "· 1 failed"]
    stored = Store(root)
    assert stored.read_sidecar(fx.MACHINE, first, "asv-log") == {"command": command, "exit_code": 1,
                                                                 "log": "· 1 failed\n"}
    assert stored.read_sidecar(fx.MACHINE, first, "env") == {
        "start": {"commit": first, "platform": "cuda", "taken": 1, "vendors": VENDORS},
        "end": {"commit": first, "platform": "cuda", "taken": 2, "vendors": VENDORS}, "grid": "full",
        "dtypes": None, "impls": None, "platform": "cuda", "gpus": None, "shard": None, "gpu_consistency": None}
    assert stored.read_sidecar(fx.MACHINE, first, "cases") is None
    assert list((repo / ".asv" / "records").iterdir()) == [] and len(worktrees(repo)) == 1


def test_a_long_asv_log_is_stored_by_its_last_200000_characters(tmp_path, repo, asv):
    head = git(repo, "rev-parse", "HEAD")
    lines = [f"{i:06d} " + "." * 92 for i in range(2_100)]  # 100 characters a line with its newline
    asv.plan(run={"say": [["out", line] for line in lines], "results": str(asv_results(tmp_path / "made", head)),
                  "cases": {"results": []}})
    echoed = []
    record.record("HEAD", results=fx.copy_store(tmp_path), machine=fx.MACHINE, echo=echoed.append)
    log = Store(tmp_path / "results").read_sidecar(fx.MACHINE, head, "asv-log")["log"]
    assert log == "".join(f"{line}\n" for line in lines[100:]) and len(log) == 200_000
    assert echoed[1:] == lines  # a cases file without "said": nothing more is said


# -- refusals: nothing starts, nothing is stored --------------------------------------

def test_a_record_without_a_gpu_refuses_naming_the_store_it_left_alone(tmp_path, repo, asv, monkeypatch):
    monkeypatch.setattr(record, "gpu_available", lambda: False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as refused:
        record.record("HEAD", results=Path("store"), machine=fx.MACHINE)
    assert str(refused.value) == ("no GPU: torch.cuda.is_available() is False in this process; mlagate record "
                                  f"measures on a CUDA or ROCm GPU and stored nothing in {tmp_path / 'store'}")
    assert not (tmp_path / "store").exists() and not (repo / ".asv").exists() and asv.calls() == []


@pytest.mark.parametrize("gpus, shard, message", [
    ("0,0", None, "--gpus 0,0: GPU indices are distinct numbers >= 0"),
    (None, "3/2", "--shard 3/2: I must be between 1 and N"),
])
def test_bad_gpus_or_shard_are_refused_before_anything_starts(tmp_path, repo, asv, gpus, shard, message):
    with pytest.raises(ValueError) as refused:
        record.record("HEAD", results=tmp_path / "store", machine=fx.MACHINE, gpus=gpus, shard=shard)
    assert str(refused.value) == message
    assert not (tmp_path / "store").exists() and not (repo / ".asv").exists() and asv.calls() == []


@pytest.mark.parametrize("say, reason", [
    ([["out", "asv: checking"], ["err", "start-" + "x" * 2500 + "-end  "]], "x" * 1996 + "-end"),
    ([["out", "  no machine named h200  "]], "no machine named h200"),
], ids=["stderr, its last 2000 characters", "stdout when stderr is empty"])
def test_a_failed_asv_machine_is_refused_with_what_asv_said(tmp_path, repo, asv, say, reason):
    root = fx.copy_store(tmp_path)
    before = snapshot(root)
    asv.plan(machine={"say": say, "exit": 2})
    with pytest.raises(ValueError) as refused:
        record.record("HEAD", results=root, machine=fx.MACHINE)
    assert str(refused.value) == f"asv machine --machine h200 failed: {reason}"
    assert [call["args"][2] for call in asv.calls()] == ["machine"]
    assert snapshot(root) == before and control_files(root) == [files.LOCK]
    assert list((repo / ".asv" / "records").iterdir()) == [] and len(worktrees(repo)) == 1


def test_an_asv_run_that_wrote_no_results_stores_nothing_and_says_its_exit_code(tmp_path, repo, asv):
    head = git(repo, "rev-parse", "HEAD")
    root = fx.copy_store(tmp_path)
    before = snapshot(root)
    asv.plan(run={"say": [["err", "Traceback: boom"]], "cases": CASES, "exit": 3})
    echoed = []
    with pytest.raises(StoreError) as refused:
        record.record("HEAD", results=root, machine=fx.MACHINE, echo=echoed.append)
    assert str(refused.value) == (f"asv wrote no results for {head[:8]} (exit code 3; its log is above); "
                                  "nothing was stored")
    assert echoed[1:] == ["Traceback: boom"]
    assert snapshot(root) == before and control_files(root) == [files.LOCK]
    assert list((repo / ".asv" / "records").iterdir()) == []


def test_a_record_waits_for_the_stores_lock_and_refuses_a_commit_stored_meanwhile(tmp_path, repo, asv):
    head = git(repo, "rev-parse", "HEAD")
    root = fx.copy_store(tmp_path)
    echoed, outcome = [], []

    def record_head():
        try:
            record.record("HEAD", results=root, machine=fx.MACHINE, echo=echoed.append)
        except StoreError as e:
            outcome.append(e)

    with files.store_lock(root):  # another record, in progress
        waiting = threading.Thread(target=record_head, daemon=True)
        waiting.start()
        deadline = time.monotonic() + 20
        while not echoed and time.monotonic() < deadline:
            time.sleep(0.01)
        assert echoed == [f"{root / files.LOCK}: another mlagate process is writing to this store; waiting for it"]
        files.install_record(asv_results(tmp_path / "made", head), root, fx.MACHINE)  # what it stores
    waiting.join(20)
    assert [str(e) for e in outcome] == [f"{root / fx.MACHINE}: {head[:8]} is already recorded on 'h200'; the store "
                                         "is append-only (record a new commit)"]
    assert asv.calls() == [] and list((repo / ".asv" / "records").iterdir()) == []


def test_without_an_echo_the_wait_for_a_stores_lock_is_said_on_stderr(tmp_path, capsys):
    def hold():
        with files.store_lock(tmp_path):
            pass

    with files.store_lock(tmp_path):
        waiting = threading.Thread(target=hold, daemon=True)
        waiting.start()
        said, deadline = ("", ""), time.monotonic() + 20
        while said == ("", "") and time.monotonic() < deadline:
            time.sleep(0.01)
            said = tuple(capsys.readouterr())
    waiting.join(20)
    assert said == ("", f"{tmp_path / files.LOCK}: another mlagate process is writing to this store; waiting for it\n")


# -- the record's tree, the dead ones, the checkout -----------------------------------

def test_a_record_clears_its_stores_dead_trees_only(tmp_path, repo, asv):
    """What killed records of this store left (their trees, and the worktrees those registered) goes; the
    trees of another store's records, and whatever a link named like a dead tree points at, stay."""
    head = git(repo, "rev-parse", "HEAD")
    root = fx.copy_store(tmp_path)
    records = repo / ".asv" / "records"
    records.mkdir(parents=True)
    dead, other = records / f"{prefix(root)}dead", records / f"{prefix(tmp_path / 'other')}live"
    (other / "results").mkdir(parents=True)
    git(repo, "worktree", "add", "-q", "--detach", str(dead / "src"), "HEAD~1")
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "file").write_text("not the record's")
    (records / f"{prefix(root)}link").symlink_to(kept)
    asv.plan(run={"results": str(asv_results(tmp_path / "made", head))})
    record.record("HEAD", results=root, machine=fx.MACHINE)
    assert sorted(p.name for p in records.iterdir()) == sorted([other.name, f"{prefix(root)}link"])
    assert (kept / "file").read_text() == "not the record's" and (other / "results").is_dir()
    assert len(worktrees(repo)) == 1


def test_dead_trees_are_removed_with_the_worktrees_they_registered(tmp_path, repo):
    results = tmp_path / "store"
    records = repo / ".asv" / "records"
    dead = records / f"{prefix(results)}dead"
    git(repo, "worktree", "add", "-q", "--detach", str(dead / "src"), "HEAD~1")
    record._remove_dead_trees(results)
    assert list(records.iterdir()) == [] and len(worktrees(repo)) == 1


def test_a_records_tree_is_removed_with_its_worktree_and_once_gone_removing_it_is_no_error(tmp_path, repo):
    tree = tmp_path / "tree"
    git(repo, "worktree", "add", "-q", "--detach", str(tree / "src"), "HEAD~1")
    record._remove_tree(tree)
    assert not tree.exists() and len(worktrees(repo)) == 1
    record._remove_tree(tree)  # a cleanup in a `finally`: it never hides the record's own outcome


def test_only_a_clean_checkout_of_the_commit_counts_as_checked_out(tmp_path, repo, monkeypatch):
    head, first = git(repo, "rev-parse", "HEAD"), git(repo, "rev-parse", "HEAD~1")
    (repo / "notes.txt").write_text("untracked")
    monkeypatch.setattr(gitops, "REPO", tmp_path / "elsewhere")  # the repository asked about, not the default
    assert record._is_checked_out(head, repo) is True
    assert record._is_checked_out(first, repo) is False
    (repo / "perf.yml").write_text("# changed, not committed\n")
    assert record._is_checked_out(head, repo) is False


# -- installing a record: what a staging folder or a journal may not do --------------

def test_a_staging_folder_without_the_machines_results_installs_nothing(tmp_path):
    root = fx.copy_store(tmp_path)
    before = snapshot(root)
    (tmp_path / "staging").mkdir()
    with files.store_lock(root), pytest.raises(StoreError) as refused:
        files.install_record(tmp_path / "staging", root, fx.MACHINE)
    assert str(refused.value) == f"{tmp_path / 'staging' / fx.MACHINE}: no asv results file to install"
    assert snapshot(root) == before and control_files(root) == [files.LOCK]


def journal(root, *entries):
    (root / files.JOURNAL).write_text(json.dumps({"files": [{"path": p, "once": True, "text": t} for p, t in entries]}))


@pytest.mark.parametrize("path", ["../outside.json", "h200/../../outside.json", "ABSOLUTE"])
def test_a_journal_entry_outside_the_store_is_refused_and_written_nowhere(tmp_path, path):
    root = fx.copy_store(tmp_path)
    before = snapshot(root)
    path = str(tmp_path / "outside.json") if path == "ABSOLUTE" else path
    journal(root, (path, "{}"))
    with pytest.raises(StoreError) as refused:
        files.recover(root)
    assert str(refused.value) == f"{root / files.JOURNAL}: a path outside the store: {path}"
    assert not (tmp_path / "outside.json").exists() and snapshot(root) == before


def test_a_journal_never_overwrites_a_file_of_the_store_with_other_content(tmp_path):
    """An entry already in place with the same content (put there before a kill) is fine; other content is not
    the record's, and stays."""
    root = fx.copy_store(tmp_path)
    before = snapshot(root)
    taken = fx.results_file(root, fx.DOCS)
    journal(root, (str(taken.relative_to(root)), taken.read_text()), (str(taken.relative_to(root)), "{}"))
    with pytest.raises(StoreError) as refused:
        files.recover(root)
    assert str(refused.value) == (f"{taken}: exists with other content than the record being installed; "
                                  "the store is append-only")
    assert snapshot(root) == before


def test_recover_finishes_a_killed_install_and_says_whether_there_was_one(tmp_path):
    root = fx.copy_store(tmp_path)
    before, control = snapshot(root), control_files(root)  # (a lock file a copied store may hold stays)
    assert files.recover(root) is False and snapshot(root) == before
    journal(root, ("h200/new.sidecar", '{"a": 1}'))
    assert files.recover(root) is True
    assert snapshot(root) == {**before, "h200/new.sidecar": b'{"a": 1}'} and control_files(root) == control


def test_a_journal_with_an_infinite_number_is_refused_saying_what_the_file_should_be(tmp_path):
    (tmp_path / files.JOURNAL).write_text('{"files": [], "written": Infinity}')
    with pytest.raises(StoreError) as refused:
        files.recover(tmp_path)
    assert str(refused.value) == (f"{tmp_path / files.JOURNAL}: unreadable install journal (written: an infinite "
                                  "number, not an install journal); move it away to go on")

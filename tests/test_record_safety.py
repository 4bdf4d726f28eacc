"""A record never leaves the store half-written (issue 14): it holds the store's lock from start
to finish, asv writes into a private staging directory, and the new files go into the store all
or nothing, so a SIGKILL at any point leaves the store as it was or with the complete record.

Records run in a clone of this repository (a record adds and prunes git worktrees; this
checkout is not the tests' to change), on the CPU: the GPU check is a function in the recording
process that the tests stand in for, and every case is skipped by the suite itself."""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import gate_fixtures as fx
from mlagate import gitops
from mlagate.store import files, record
from mlagate.store.errors import StoreError
from mlagate.store.results import Store
from mlagate.store.results_file import BENCH_TIME

NEW = "c" * 40


def snapshot(root) -> dict:
    """Every file of a store except mlagate's control files: relative path -> bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(Path(root).rglob("*"))
            if p.is_file() and not p.name.startswith(files.CONTROL)}


def control_files(root) -> list:
    return sorted(p.name for p in Path(root).rglob(f"{files.CONTROL}*"))


def worktrees(repo) -> int:
    out = subprocess.run(["git", "-C", str(repo), "worktree", "list", "--porcelain"], capture_output=True,
                         text=True, check=True).stdout
    return sum(line.startswith("worktree ") for line in out.splitlines())


def stage(folder: Path, commit=NEW) -> Path:
    """A finished record in a staging results directory, made from a real H200 one: its results
    file and sidecars under a new commit, and changed benchmarks.json and machine.json."""
    machine = folder / fx.MACHINE
    machine.mkdir(parents=True)
    src = fx.results_file(fx.RESULTS, fx.BASE)
    data = json.loads(src.read_text())
    data["commit_hash"] = commit
    (machine / src.name.replace(fx.BASE[:8], commit[:8])).write_text(json.dumps(data))
    for kind in ("env", "asv-log"):
        shutil.copy(Store(fx.RESULTS).sidecar_path(fx.MACHINE, fx.BASE, kind),
                    Store(folder).sidecar_path(fx.MACHINE, commit, kind))
    for name in ("benchmarks.json", f"{fx.MACHINE}/machine.json"):
        (folder / name).write_text(json.dumps(json.loads((fx.RESULTS / name).read_text()), indent=2))
    return folder


# -- the install, killed at every step ------------------------------------------------

KILL_AT_CALL = """
import os, signal, sys
from mlagate.store import files
staging, root, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
calls = 0
def counted(real):
    def call(*args, **kwargs):
        global calls
        calls += 1
        if calls == n:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    return call
for name in ("fsync", "link", "replace", "rename", "unlink"):  # every step that makes data durable or visible
    setattr(os, name, counted(getattr(os, name)))
with files.store_lock(root):
    files.install_record(staging, root, "h200")
"""


def test_an_install_killed_at_any_step_leaves_the_old_store_or_the_whole_record(tmp_path):
    staging = stage(tmp_path / "staging")
    before = snapshot(fx.RESULTS)
    done = fx.copy_store(tmp_path / "done")
    with files.store_lock(done):
        installed = files.install_record(staging, done, fx.MACHINE)
    complete = snapshot(done)
    assert installed.name.startswith(NEW[:8]) and len(set(complete) - set(before)) == 3
    script = tmp_path / "kill.py"
    script.write_text(KILL_AT_CALL)
    results_name = str(installed.relative_to(done))
    for n in range(1, 200):
        root = fx.copy_store(tmp_path / f"k{n}")
        run = subprocess.run([sys.executable, str(script), str(staging), str(root), str(n)], capture_output=True,
                             text=True)
        after = snapshot(root)
        if run.returncode == 0:
            assert after == complete and control_files(root) == [files.LOCK]
            break
        assert run.returncode == -signal.SIGKILL, run.stderr
        for name in set(before) | set(after):  # each file is the old one or the new one, whole
            assert after.get(name) in (before.get(name), complete.get(name)), (n, name)
        if results_name in after:  # the results file goes in last: whoever finds it finds the rest
            assert after == complete, n
        elif after != before:
            assert files.JOURNAL in control_files(root), n  # and the next record finishes it
        assert Store(root).load(fx.MACHINE, NEW) is None or after == complete
        pending = files.JOURNAL in control_files(root)
        with files.store_lock(root):  # what the next record does first
            files.recover(root)
        assert snapshot(root) == (complete if pending or after == complete else before), n
        assert control_files(root) == [files.LOCK], n
    else:
        pytest.fail("the install never finished")
    assert n > 20  # it was killed at every one of its steps before that


def test_an_install_refuses_a_recorded_commit_and_writes_nothing(tmp_path):
    root = fx.copy_store(tmp_path)
    staging = stage(tmp_path / "staging", fx.BASE)
    before = snapshot(root)
    with files.store_lock(root), pytest.raises(StoreError, match="already recorded"):
        files.install_record(staging, root, fx.MACHINE)
    assert snapshot(root) == before and control_files(root) == [files.LOCK]


# -- one record at a time -------------------------------------------------------------

@pytest.fixture
def fake_asv(clone, monkeypatch):
    """record() with asv's part replaced by a staged H200 record of the commit asked for."""
    monkeypatch.setattr(record, "gpu_available", lambda: True)
    runs = []

    def run(tree, commit, machine, *args):
        runs.append(commit)
        return stage(tree / "results", commit)

    monkeypatch.setattr(record, "_run_asv", run)
    return runs


def test_a_second_record_of_a_store_waits_for_the_first(tmp_path, fake_asv):
    root = fx.copy_store(tmp_path / "store")
    before = snapshot(root)
    messages, outcomes = [], []

    def record_head():
        try:
            outcomes.append(record.record("HEAD", results=root, machine=fx.MACHINE, echo=messages.append))
        except StoreError as e:
            outcomes.append(e)

    with files.store_lock(root):  # a record in progress
        threads = [threading.Thread(target=record_head) for _ in range(2)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 20
        while len(messages) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(messages) == 2 and all("waiting for it" in m for m in messages)
        assert snapshot(root) == before and fake_asv == []
    for t in threads:
        t.join(60)
    recorded = [o for o in outcomes if isinstance(o, Path)]
    refused = [o for o in outcomes if isinstance(o, StoreError)]
    assert len(recorded) == 1 and len(refused) == 1 and "already recorded" in str(refused[0])
    assert len(fake_asv) == 1  # the second one measured nothing
    assert [Path(p).resolve() for p in Store(root).load(fx.MACHINE, gitops.resolve("HEAD")).paths] == recorded
    assert list((gitops.REPO / ".asv" / "records").iterdir()) == []


def test_a_record_without_results_stores_nothing(tmp_path, clone, monkeypatch):
    """asv ran but wrote no results file: nothing goes in, not even its log, so the commit can
    be recorded again (the log was echoed)."""
    monkeypatch.setattr(record, "gpu_available", lambda: True)
    monkeypatch.setattr(record, "_stream", lambda cmd, env, cwd, echo: (1, "asv: crashed\n"))
    root = fx.copy_store(tmp_path / "store")
    before = snapshot(root)
    with pytest.raises(StoreError, match="asv wrote no results .* nothing was stored"):
        record.record("HEAD", results=root, machine=fx.MACHINE, grid="quick", impls=["torch"])
    assert snapshot(root) == before and control_files(root) == [files.LOCK]
    assert list((clone / ".asv" / "records").iterdir()) == [] and worktrees(clone) == 1


# -- a real record, killed while asv runs and while its files go in -------------------

KILLED_RECORD = """
import os, signal, sys
from pathlib import Path
from mlagate import gitops
from mlagate.store import files, record
repo, results, rev, mode = sys.argv[1:5]
gitops.REPO = Path(repo)
record.gpu_available = lambda: True  # a CPU stands in for the GPU; the suite skips every case


def die():  # like a cancelled job: the record, asv and its benchmark processes at once
    os.killpg(os.getpgrp(), signal.SIGKILL)


def echo(line):
    print(line, flush=True)
    if mode == "asv" and "Benchmarking" in line:
        die()


installed, real_install = [], files._install


def install(root, entry):  # killed after the rewritten files and the first sidecar are in
    installed.append(entry["path"])
    if mode == "install" and len(installed) == 4:
        die()
    return real_install(root, entry)


files._install = install
record.record(rev, results=Path(results), machine="h200", grid="quick", impls=["torch"],
                bench_regex="TimeDecode", echo=echo)
"""


def _kill_leftovers(tmp_path):
    """asv's benchmark server runs in a session of its own and outlives a killed record: end it,
    so that no process of this test outlives it (found by this test's folder in its command line)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(tmp_path).encode() in cmdline.read_bytes():
                os.kill(int(cmdline.parent.name), signal.SIGKILL)
        except (OSError, ValueError):
            pass


def _killed_record(tmp_path, repo, root, rev, mode):
    script = tmp_path / "record.py"
    script.write_text(KILLED_RECORD)
    try:
        run = subprocess.run([sys.executable, str(script), str(repo), str(root), rev, mode], capture_output=True,
                             text=True, start_new_session=True, cwd=tmp_path, timeout=300)
    finally:
        _kill_leftovers(tmp_path)
    assert run.returncode == -signal.SIGKILL, run.stdout[-3000:] + run.stderr[-3000:]


@pytest.mark.slow
def test_a_record_killed_anywhere_leaves_the_store_whole_and_the_next_one_runs(tmp_path, clone, monkeypatch,
                                                                               capsys):
    from mlagate import cli

    root = fx.copy_store(tmp_path / "store")
    before = snapshot(root)
    records = clone / ".asv" / "records"
    parent = gitops.resolve("HEAD~1")

    _killed_record(tmp_path, clone, root, "HEAD~1", "asv")  # HEAD~1: a worktree of the commit
    assert snapshot(root) == before and control_files(root) == [files.LOCK]
    assert len(list(records.iterdir())) == 1 and worktrees(clone) == 2  # what the dead record left

    _killed_record(tmp_path, clone, root, "HEAD~1", "install")
    after = snapshot(root)
    new = sorted(set(after) - set(before))
    assert new == [f"h200/{parent[:8]}-asv-log.sidecar"]  # benchmarks.json and machine.json rewritten too
    assert Store(root).load(fx.MACHINE, parent) is None and files.JOURNAL in control_files(root)
    assert len(list(records.iterdir())) == 1  # the first dead record's tree is gone, the second's is left

    monkeypatch.setattr(record, "gpu_available", lambda: True)
    capsys.readouterr()
    args = ["record", "--rev", "HEAD", "--machine", "h200", "--grid", "quick", "--impl", "torch", "--bench",
            "TimeDecode", "--results", str(root)]
    assert cli.main(args) == 0, capsys.readouterr().err
    s = Store(root)
    for commit in (parent, gitops.resolve("HEAD")):  # the interrupted install was finished first
        assert s.load(fx.MACHINE, commit).entries(BENCH_TIME)
        assert s.read_sidecar(fx.MACHINE, commit, "env")["grid"] == "quick"
        assert s.read_sidecar(fx.MACHINE, commit, "asv-log")["exit_code"] == 0
    final = snapshot(root)
    assert all(final[name] == after[name] for name in new)  # finished, not rewritten
    assert all(final[name] == before[name] for name in before if name not in ("benchmarks.json", "h200/machine.json"))
    assert control_files(root) == [files.LOCK] and not s.problems
    assert list(records.iterdir()) == [] and worktrees(clone) == 1

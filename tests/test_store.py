import json
import math
import subprocess
from pathlib import Path

import pytest

import gate_fixtures as fx
from mlagate.config import ROOT
from mlagate.store import files
from mlagate.store.branch import checkout_branch, commit_branch
from mlagate.store.errors import GateError, StoreError
from mlagate.store.results import Problem, Store, pick_machine, results_root
from mlagate.store.results_file import BENCH_TFLOPS, BENCH_TIME, parse_results_file


def test_reads_real_asv_results_with_samples():
    s = Store(fx.RESULTS)
    assert s.machines() == ["h200"]
    base = s.load("h200", fx.BASE[:8])
    assert base.commit == fx.BASE
    entry = base.entries(BENCH_TIME)[fx.HOPPER_64]
    assert entry.status == "ok" and len(entry.samples) >= 50
    assert 150e-6 < entry.value < 200e-6
    assert base.entries(BENCH_TFLOPS)[("flash_mla", 128, 4096, "float16", 128, 1, "float16", "dense")].value > 400
    assert s.read_sidecar("h200", fx.BASE, "env")["start"]["gpu"] == "NVIDIA H200"


@pytest.mark.parametrize("damage", [
    lambda text: text[: len(text) // 3],            # partial write
    lambda text: "not json at all",                 # garbage
    lambda text: json.dumps({"commit_hash": "x"}),  # valid JSON, not asv results
])
def test_corrupt_files_are_reported_skipped_and_kept(tmp_path, damage):
    root = fx.copy_store(tmp_path)
    path = fx.results_file(root, fx.SLOW)
    path.write_text(damage(path.read_text()))
    before = path.read_bytes()
    s = Store(root)
    found = s.load_all("h200")
    assert set(found) == {fx.BASE, fx.DOCS}
    assert [p.path for p in s.problems] == [str(path)]
    assert path.read_bytes() == before


@pytest.mark.parametrize("samples,message", [
    (lambda s: [math.nan] * len(s), "sample 0 of .* is nan, not a positive finite number"),
    (lambda s: [0.0] * len(s), "sample 0 of .* is 0.0"),
    (lambda s: [str(x) for x in s], "sample 0 of .* is '0.000"),
    (lambda s: [*s[:-1], None], "is None"),
    (lambda s: "1e-4", "samples must be a list"),
])
def test_invalid_samples_name_the_file_and_the_case(tmp_path, samples, message):
    root = fx.copy_store(tmp_path)
    fx.edit(root, fx.DOCS, BENCH_TIME, fx.HOPPER_64, lambda v, s: (v, samples(s)))
    path = fx.results_file(root, fx.DOCS)
    with pytest.raises(StoreError, match=message) as raised:
        parse_results_file(path)
    assert str(raised.value).startswith(f"{path}: not a valid asv results file: {BENCH_TIME} "
                                        "tilelang-hopper h=128 b=64 s=4096 float16: ")


@pytest.mark.parametrize("value", [math.inf, 0.0, -1.0, "1.6e-4", True, [1.6e-4]])
def test_a_value_must_be_a_positive_finite_number(tmp_path, value):
    root = fx.copy_store(tmp_path)
    fx.edit(root, fx.BASE, BENCH_TFLOPS, ("flash_mla", 128, 4096, "float16", 128, 1, "float16", "dense"),
            lambda v, s: (value, s))
    with pytest.raises(StoreError, match=f"{BENCH_TFLOPS} flash_mla h=128 b=128 s=4096 float16: value"):
        parse_results_file(fx.results_file(root, fx.BASE))


@pytest.mark.parametrize("factor,refused", [(1.0, False), (1.009, False), (1.011, True), (0.989, True), (1.3, True)])
def test_tflops_that_disagree_with_the_latency_are_refused_naming_the_case(tmp_path, factor, refused):
    """TFLOPs and latency come from one measurement: a record where flops / median is more than 1% off
    the recorded TFLOPs (as in a record that timed them in two passes) is refused, the file and case named."""
    root = fx.copy_store(tmp_path)
    fx.edit(root, fx.BASE, BENCH_TFLOPS, fx.HOPPER_64, lambda v, s: (v * factor, s))
    path = fx.results_file(root, fx.BASE)
    if not refused:
        parse_results_file(path)
        return
    with pytest.raises(StoreError, match="TFLOPs and latency were not measured as one") as raised:
        parse_results_file(path)
    assert str(raised.value).startswith(f"{path}: not a valid asv results file: tilelang-hopper h=128 b=64 ")


def test_a_gate_on_a_record_whose_tflops_disagree_exits_2_naming_it(tmp_path, capsys):
    from mlagate import cli

    root = fx.copy_store(tmp_path)
    fx.edit(root, fx.SLOW, BENCH_TFLOPS, fx.HOPPER_64, lambda v, s: (v * 1.3, s))  # the latency moved, TFLOPs not
    out = tmp_path / "out"
    code = cli.main(["gate", "--base", fx.BASE, "--head", fx.SLOW, "--machine", fx.MACHINE, "--results", str(root),
                     "--out", str(out)])
    assert code == 2 and not out.exists()
    err = capsys.readouterr().err
    assert str(fx.results_file(root, fx.SLOW)) in err and "tilelang-hopper h=128 b=64" in err


def test_infinity_anywhere_is_refused(tmp_path):
    root = fx.copy_store(tmp_path)
    path = fx.results_file(root, fx.BASE)
    path.write_text(path.read_text().replace('"durations": {', '"durations": {"x": 1e999, ', 1))
    with pytest.raises(StoreError, match=r"durations.x: an infinite number"):
        parse_results_file(path)


def test_a_problem_belongs_to_the_commit_its_file_is_named_for(tmp_path):
    root = fx.copy_store(tmp_path)
    path = fx.results_file(root, fx.SLOW)
    path.write_text("{")
    s = Store(root)
    s.load_all("h200")
    assert [p.path for p in s.problems_of(fx.SLOW)] == [str(path)] and s.problems_of(fx.BASE) == []


def test_a_case_in_two_files_of_one_commit_is_a_problem(tmp_path):
    root = fx.copy_store(tmp_path)
    path = fx.results_file(root, fx.DOCS)
    twin = path.with_name(f"{fx.DOCS[:8]}-other-env.json")
    twin.write_bytes(path.read_bytes())
    s = Store(root)
    assert s.load("h200", fx.DOCS).paths == [str(path)]
    assert s.problems_of(fx.DOCS)[0].path == str(twin) and "is also in" in s.problems[0].reason


def test_results_without_machine_json_are_an_error_but_sidecars_alone_are_not(tmp_path):
    root = fx.copy_store(tmp_path)
    (root / "h200" / "machine.json").unlink()
    with pytest.raises(StoreError, match=f"{root / 'h200' / 'machine.json'}: missing"):
        Store(root).load("h200", fx.BASE)
    Store(tmp_path / "new").write_sidecar("m", "a" * 40, "build-cuda-sm_90a", {"x": 1})  # build --record first
    assert Store(tmp_path / "new").load("m", "a" * 40) is None


def test_a_sidecar_must_be_a_json_object(tmp_path):
    s = Store(tmp_path)
    path = s.sidecar_path("m", "c" * 40, "env")
    path.parent.mkdir(parents=True)
    for text in ("[]", '"cuda"', "null", '{"x": Infinity}', "\ufffd"):
        path.write_text(text)
        assert s.read_sidecar("m", "c" * 40, "env") is None
        with pytest.raises(StoreError, match=f"{path}: corrupt sidecar"):
            s.read_sidecar("m", "c" * 40, "env", strict=True)
    assert len(s.problems) == 5


def test_a_sidecar_that_cannot_be_read_is_a_problem_naming_the_os_error(tmp_path):
    s = Store(tmp_path)
    path = s.sidecar_path("m", "c" * 40, "env")
    path.mkdir(parents=True)  # it exists, but reading it is an OSError, not a JSON error
    assert s.read_sidecar("m", "c" * 40, "env") is None
    assert s.problems == [Problem(str(path), "corrupt sidecar (unreadable: Is a directory)")]
    with pytest.raises(StoreError) as raised:
        s.read_sidecar("m", "c" * 40, "env", strict=True)
    assert str(raised.value) == f"{path}: corrupt sidecar (unreadable: Is a directory)"


def test_unknown_machine_is_named(tmp_path):
    with pytest.raises(StoreError, match="no results for machine 'mi300x'"):
        Store(fx.RESULTS).load_all("mi300x")


def test_sidecars_are_write_once(tmp_path):
    s = Store(tmp_path)
    s.write_sidecar("m", "a" * 40, "env", {"x": 1})
    with pytest.raises(StoreError, match="already recorded; the store is append-only"):
        s.write_sidecar("m", "a" * 40, "env", {"x": 2})
    assert s.read_sidecar("m", "a" * 40, "env") == {"x": 1}
    s.sidecar_path("m", "b" * 40, "env").write_text("{broken")
    assert s.read_sidecar("m", "b" * 40, "env") is None and "corrupt sidecar" in s.problems[0].reason


def git(cwd, *args):
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True)


def test_results_branch_round_trip(tmp_path):
    origin, branch = tmp_path / "origin.git", _branch(tmp_path)
    (branch / "results").mkdir()
    (branch / "results" / "r.json").write_text("{}")
    assert commit_branch(branch, "results: one") is True
    assert commit_branch(branch, "results: nothing") is False
    (branch / "results" / "r.json").write_text('{"rewritten": true}')
    with pytest.raises(StoreError, match="modified, not only added"):
        commit_branch(branch, "results: rewrite")
    fresh = tmp_path / "fresh"  # the next CI job: a new clone fetches what was pushed
    git(tmp_path, "clone", "-q", str(origin), str(fresh))
    again = checkout_branch(fresh, "perf-results", tmp_path / "second")
    assert (again / "results" / "r.json").read_text() == "{}"


# -- issue 14: whole files, one writer, history that keeps growing -------------------

def test_a_sidecar_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    s = Store(tmp_path)
    path = s.write_sidecar("m", "a" * 40, "env", {"x": 1})
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temporary file left
    assert json.loads(path.read_text()) == {"x": 1}

    def crash(src, dst):  # the moment the complete temporary file would be linked into place
        raise OSError("disk gone")

    monkeypatch.setattr(files.os, "link", crash)
    with pytest.raises(OSError, match="disk gone"):
        s.write_sidecar("m", "b" * 40, "env", {"x": 2})
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def _branch(tmp_path):
    origin, work = tmp_path / "origin.git", tmp_path / "work"
    git(tmp_path, "init", "-q", "--bare", str(origin))
    git(tmp_path, "init", "-q", str(work))
    git(work, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty", "-m", "init")
    git(work, "remote", "add", "origin", str(origin))
    branch = checkout_branch(work, "perf-results", tmp_path / "branch")
    git(branch, "config", "user.email", "ci@x")
    git(branch, "config", "user.name", "ci")
    return branch


def _committed(branch):
    out = subprocess.run(["git", "-C", str(branch), "ls-files"], capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_the_results_branch_takes_what_asv_rewrites_and_refuses_the_rest(tmp_path):
    branch = _branch(tmp_path)
    root = branch / "results"
    s = Store(root)
    s.write_sidecar("m", "a" * 40, "env", {"x": 1})  # leaves the store's lock file behind
    (root / "benchmarks.json").write_text('{"v": 1}')
    (root / "m" / "machine.json").write_text('{"machine": "m"}')
    (root / "m" / "aaaaaaaa-existing.json").write_text("{}")
    assert commit_branch(branch, "one", push=False) is True
    assert _committed(branch) == ["results/benchmarks.json", "results/m/aaaaaaaa-env.sidecar",
                                  "results/m/aaaaaaaa-existing.json", "results/m/machine.json"]
    # The next record: asv rewrote benchmarks.json and machine.json (its benchmark code changed).
    (root / "benchmarks.json").write_text('{"v": 2}')
    (root / "m" / "machine.json").write_text('{"machine": "m", "ram": 1}')
    (root / "m" / "bbbbbbbb-existing.json").write_text("{}")
    assert commit_branch(branch, "two", push=False) is True
    assert "results/m/bbbbbbbb-existing.json" in _committed(branch)
    for damage in (lambda: (root / "m" / "aaaaaaaa-existing.json").write_text('{"x": 1}'),
                   lambda: (root / "m" / "aaaaaaaa-existing.json").unlink(),
                   lambda: (root / "m" / "aaaaaaaa-env.sidecar").unlink()):
        damage()
        with pytest.raises(StoreError, match=r"results/m/aaaaaaaa-.*: modified, not only added"):
            commit_branch(branch, "rewrite", push=False)
        git(branch, "checkout", "--", ".")


def test_pushing_finishes_an_install_a_killed_record_left(tmp_path):
    """A record killed while its files went in left a journal: the push completes the record
    instead of publishing half of it (which a fresh checkout could never complete)."""
    branch = _branch(tmp_path)
    root = branch / "results"
    staging = tmp_path / "staging"
    Store(staging).write_sidecar("m", "c" * 40, "env", {"x": 1})
    (staging / "m" / "cccccccc-existing.json").write_text('{"commit_hash": "' + "c" * 40 + '"}')
    with files.store_lock(root):
        entries = [{"path": f"m/{p.name}", "once": True, "text": p.read_text()}
                   for p in sorted((staging / "m").glob("c*"))]
        files.write_once(root / files.JOURNAL, json.dumps({"files": entries}).encode())
    assert commit_branch(branch, "finished", push=False) is True
    assert _committed(branch) == ["results/m/cccccccc-env.sidecar", "results/m/cccccccc-existing.json"]
    assert not (root / files.JOURNAL).exists()


# -- which store, and which of its machines, a command reads -------------------------------------------

def _with_machines(root, *names):
    for name in names:  # a machine is a folder with asv's machine.json
        (root / name).mkdir(parents=True)
        (root / name / "machine.json").write_text("{}")
    return Store(root)


def test_the_machine_given_is_taken_only_if_the_store_has_it(tmp_path):
    store = _with_machines(tmp_path, "h200")
    assert pick_machine(store, "h200") == "h200"
    with pytest.raises(GateError) as raised:
        pick_machine(store, "h20")  # not a record starting a new machine (new defaults to False)
    assert str(raised.value) == f"{tmp_path}: --machine 'h20' is unknown; did you mean h200? (known: h200)"


def test_a_machine_a_record_starts_is_taken_even_in_an_empty_store(tmp_path):
    assert pick_machine(Store(tmp_path), "new-box", new=True) == "new-box"


@pytest.mark.parametrize("machine, new, named", [(None, False, "<name>"), (None, True, "<name>"), ("m", False, "m")])
def test_an_empty_store_gives_the_record_command_of_each_revision(tmp_path, machine, new, named):
    """Nothing to read: the error says how to record, with the machine given (else a placeholder)."""
    with pytest.raises(GateError) as raised:
        pick_machine(Store(tmp_path), machine, new=new, revs=("b292e892", "22e8a671"))
    assert str(raised.value) == (f"{tmp_path}: no results recorded yet, on any machine. Record first: "
                                 f"mlagate record --rev b292e892 --machine {named} --results {tmp_path}; "
                                 f"mlagate record --rev 22e8a671 --machine {named} --results {tmp_path}")


def test_the_only_machine_is_taken_when_none_is_given(tmp_path):
    assert pick_machine(_with_machines(tmp_path, "h200"), None) == "h200"


def test_several_machines_and_none_given_are_refused_naming_them(tmp_path):
    with pytest.raises(GateError) as raised:
        pick_machine(_with_machines(tmp_path, "mi300x", "h200"), None)
    assert str(raised.value) == (f"{tmp_path}: 2 machines recorded (h200, mi300x); pass --machine with one of "
                                 "them, e.g. --machine h200")


def test_the_results_directory_is_the_one_given_else_the_environment_s_else_asv_s(monkeypatch):
    monkeypatch.setenv("MLAGATE_RESULTS", "/ci/results")
    assert results_root("given") == Path("given")
    assert results_root() == Path("/ci/results")
    monkeypatch.delenv("MLAGATE_RESULTS")
    assert results_root() == ROOT / ".asv" / "results"

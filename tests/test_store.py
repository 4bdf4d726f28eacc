import json
import subprocess

import pytest

import gate_fixtures as fx
from mlagate import store as store_mod
from mlagate.store import BENCH_TFLOPS, BENCH_TIME, Store, StoreError


def test_reads_real_asv_results_with_samples():
    s = Store(fx.RESULTS)
    assert s.machines() == ["h200"]
    base = s.load("h200", fx.BASE[:8])
    assert base.commit == fx.BASE
    entry = base.entries(BENCH_TIME)[fx.HOPPER_64]
    assert entry.status == "ok" and len(entry.samples) >= 50
    assert 150e-6 < entry.value < 200e-6
    assert base.entries(BENCH_TFLOPS)[("flash_mla", 128, 4096, "float16", 128)].value > 400
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
    origin, work = tmp_path / "origin.git", tmp_path / "work"
    git(tmp_path, "init", "-q", "--bare", str(origin))
    git(tmp_path, "init", "-q", str(work))
    git(work, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty", "-m", "init")
    git(work, "remote", "add", "origin", str(origin))
    branch = store_mod.checkout_branch(work, "perf-results", tmp_path / "branch")
    (branch / "results").mkdir()
    (branch / "results" / "r.json").write_text("{}")
    git(branch, "config", "user.email", "ci@x")
    git(branch, "config", "user.name", "ci")
    assert store_mod.commit_branch(branch, "results: one") is True
    assert store_mod.commit_branch(branch, "results: nothing") is False
    (branch / "results" / "r.json").write_text('{"rewritten": true}')
    with pytest.raises(StoreError, match="modified, not only added"):
        store_mod.commit_branch(branch, "results: rewrite")
    fresh = tmp_path / "fresh"  # the next CI job: a new clone fetches what was pushed
    git(tmp_path, "clone", "-q", str(origin), str(fresh))
    again = store_mod.checkout_branch(fresh, "perf-results", tmp_path / "second")
    assert (again / "results" / "r.json").read_text() == "{}"

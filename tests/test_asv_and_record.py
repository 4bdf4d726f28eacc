"""The asv suite on a CPU: discovered, recordable (every case skipped with its
reason), and the store refuses to record a commit twice."""

import json
import math
import subprocess
import sys

from mlagate import cli
from mlagate.recorder import REPO, resolve
from mlagate.store import BENCH_TIME, Store


def test_asv_discovers_the_benchmarks(tmp_path):
    conf = json.loads((REPO / "asv.conf.json").read_text())
    assert conf["environment_type"] == "existing"
    conf.update(repo=str(REPO), benchmark_dir=str(REPO / "benchmarks"), results_dir=str(tmp_path / "r"),
                html_dir=str(tmp_path / "h"))
    (tmp_path / "asv.json").write_text(json.dumps(conf))
    out = subprocess.run([sys.executable, "-m", "asv", "check", "--python=same", "--config", str(tmp_path / "asv.json")],
                         capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "No problems found" in out.stdout


def test_benchmark_params_come_from_the_config(monkeypatch):
    monkeypatch.setenv("MLAGATE_GRID", "quick")
    monkeypatch.setenv("MLAGATE_IMPLS", "tilelang-hopper,flash_mla")
    from mlagate import asv_suite

    params, names = asv_suite.params()
    assert names == ["impl", "batch", "seqlen", "dtype"]
    assert params == [["tilelang-hopper", "flash_mla"], [64, 128], [4096], ["float16"]]


def test_record_on_a_cpu_writes_skips_and_refuses_a_second_record(tmp_path, capsys):
    args = ["record", "--rev", "HEAD", "--machine", "cpu-test", "--grid", "quick", "--impl", "torch",
            "--impl", "aiter", "--results", str(tmp_path)]
    assert cli.main(args) == 0
    head = Store(tmp_path).load("cpu-test", resolve("HEAD"))
    entries = head.entries(BENCH_TIME)
    assert set(entries) == {(i, b, 4096, "float16") for i in ("torch", "aiter") for b in (64, 128)}
    assert all(e.status == "skipped" for e in entries.values())
    env = Store(tmp_path).read_sidecar("cpu-test", head.commit, "env")
    assert env["grid"] == "quick" and "start" in env and "end" in env
    log = Store(tmp_path).read_sidecar("cpu-test", head.commit, "asv-log")["log"]
    assert "no CUDA or ROCm GPU is visible to torch" in log
    capsys.readouterr()
    assert cli.main(args) == 2
    assert "already recorded" in capsys.readouterr().err
    assert not math.isnan(head.date)

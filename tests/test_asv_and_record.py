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
    assert names == ["impl", "batch", "seqlen", "dtype", "heads"]
    assert params == [["tilelang-hopper", "flash_mla"], [64, 128], [4096], ["float16"], [16]]


def test_each_platform_measures_the_dtypes_its_vendor_takes(monkeypatch):
    """aiter's decode takes bf16 (or fp8) queries only: an fp16 grid on ROCm has no vendor ratio."""
    monkeypatch.setenv("MLAGATE_GRID", "quick")
    from mlagate import asv_suite

    monkeypatch.setattr(asv_suite, "platform", lambda: "rocm")
    assert {c.dtype for c in asv_suite.cases()} == {"bfloat16"}
    monkeypatch.setattr(asv_suite, "platform", lambda: "cuda")
    assert {c.dtype for c in asv_suite.cases()} == {"float16"}
    monkeypatch.setenv("MLAGATE_DTYPES", "bfloat16,float16")
    assert {c.dtype for c in asv_suite.cases()} == {"bfloat16", "float16"}


def test_record_on_a_cpu_writes_skips_and_refuses_a_second_record(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path.parent)  # a relative --results, as `make bench` passes it
    args = ["record", "--rev", "HEAD", "--machine", "cpu-test", "--grid", "quick", "--impl", "torch",
            "--impl", "aiter", "--results", tmp_path.name]
    assert cli.main(args) == 0
    head = Store(tmp_path).load("cpu-test", resolve("HEAD"))
    entries = head.entries(BENCH_TIME)
    assert set(entries) == {(i, b, 4096, "float16", 16) for i in ("torch", "aiter") for b in (64, 128)}
    assert all(e.status == "skipped" for e in entries.values())
    env = Store(tmp_path).read_sidecar("cpu-test", head.commit, "env")
    assert env["grid"] == "quick" and "start" in env and "end" in env
    log = Store(tmp_path).read_sidecar("cpu-test", head.commit, "asv-log")["log"]
    assert "no CUDA or ROCm GPU is visible to torch" in log
    capsys.readouterr()
    assert cli.main(args) == 2
    assert "already recorded" in capsys.readouterr().err
    assert not math.isnan(head.date)


def test_the_suite_imports_without_touching_the_gpu():
    """asv's forkserver forks every case from the process that imported the suite: a
    device query there (cuInit/hipInit) would leave no forked child able to use the GPU."""
    probe = """
import sys, torch
calls = []
def spy(name, real):
    def wrapped(*a, **k):
        calls.append(name)
        return real(*a, **k)
    return wrapped
if hasattr(torch._C, "_cuda_getDeviceCount"):  # CUDA/ROCm builds only
    torch._C._cuda_getDeviceCount = spy("getDeviceCount", torch._C._cuda_getDeviceCount)
torch.cuda.is_available = spy("is_available", torch.cuda.is_available)
torch.cuda.device_count = spy("device_count", torch.cuda.device_count)
sys.path.insert(0, "benchmarks")
import mla_decode
print(calls, "tilelang" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[] False"

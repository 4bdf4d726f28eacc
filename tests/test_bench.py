"""The grid runner's fault isolation, with a stand-in worker (no GPU needed)."""

import os
import stat
import sys
import textwrap

from mlagate import bench, config
from mlagate.config import Case

FAKE_WORKER = textwrap.dedent('''
    import json, os, signal, sys
    MARK = "@@mlagate "
    job = json.load(sys.stdin)
    print("library noise that is not protocol", flush=True)
    for index, fields in job["cases"]:
        print(MARK + json.dumps({"event": "start", "index": index}), flush=True)
        if fields["seqlen"] == 666:
            sys.stderr.write("illegal memory access\\n"); sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGSEGV)
        status = "skipped" if fields["impl"] == "aiter" else "ok"
        outcome = dict(fields, status=status, reason=None if status == "ok" else "aiter: not installed",
                       samples={"times_ms": [1.0, 1.1, 0.9]} if status == "ok" else None, error={},
                       pid=os.getpid())
        print(MARK + json.dumps({"event": "done", "index": index, "outcome": outcome}), flush=True)
''')


def fake_python(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(FAKE_WORKER)
    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {script}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


def cases(*seqlens, impl="tilelang-hopper"):
    return [Case(impl, 64, s, "float16") for s in seqlens]


def test_a_crashing_case_fails_alone_and_the_grid_goes_on(tmp_path):
    timing = config.load().timing
    seen = []
    rows = bench.run_cases(cases(1024, 666, 2048, 4096), timing, python=fake_python(tmp_path), on_result=seen.append)
    assert [r["status"] for r in rows] == ["ok", "failed", "ok", "ok"]
    assert "worker exited with code -11 during this case" in rows[1]["reason"]
    assert "illegal memory access" in rows[1]["reason"]
    assert rows[0]["pid"] != rows[2]["pid"]  # a fresh worker took over after the crash
    assert len(seen) == 4


def test_skips_keep_their_reason(tmp_path):
    rows = bench.run_cases(cases(1024, impl="aiter"), config.load().timing, python=fake_python(tmp_path))
    assert rows[0]["status"] == "skipped" and rows[0]["reason"] == "aiter: not installed"


def test_a_worker_that_cannot_start_fails_every_case_once(tmp_path):
    broken = tmp_path / "broken"
    broken.write_text("#!/bin/sh\necho 'no such module' >&2\nexit 1\n")
    broken.chmod(broken.stat().st_mode | stat.S_IEXEC)
    rows = bench.run_cases(cases(1024, 2048), config.load().timing, python=str(broken))
    assert all(r["status"] == "failed" and "failed to start" in r["reason"] for r in rows)


def test_cases_spread_over_gpus_record_their_gpu(tmp_path):
    rows = bench.run_cases(cases(1024, 2048, 4096, 8192), config.load().timing, gpus=[0, 1],
                           python=fake_python(tmp_path))
    assert {r["gpu"] for r in rows} == {0, 1}
    assert all(r["status"] == "ok" for r in rows)


def test_outputs_are_json_and_csv(tmp_path):
    rows = bench.add_metrics(bench.run_cases(cases(1024), config.load().timing, python=fake_python(tmp_path)))
    bench.write_outputs(tmp_path / "bench.json", rows, {"gpu": "none"})
    assert (tmp_path / "bench.csv").read_text().splitlines()[0].startswith("impl,batch,seqlen")
    assert os.path.getsize(tmp_path / "bench.json") > 100

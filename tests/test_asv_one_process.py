"""A record runs asv's own run command with every case in one process (measure.asv_one_process): what it
stores is what a plain `asv run` of the suite (forkserver, a process per case) stores, field by field, and
`asv publish` and the gate read it. On a CPU: tests/asv_standin gives the suite a fake measured grid, so
that cases have samples (measured, skipped and failed ones)."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlagate import cli, gitops
from mlagate.case import Case
from mlagate.measure import grid
from mlagate.measure.shards import runner_shard
from mlagate.store import record
from mlagate.store.results import Store
from mlagate.store.results_file import BENCH_TIME

STANDIN = Path(__file__).parent / "asv_standin"
MACHINE = "cpu-test"
TIMES = ("started_at", "duration")  # when and how long: the only columns two runs may differ in


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, fresh_clone):
    """A clone whose HEAD~1 and HEAD `mlagate record` stored on the stand-in, and when it ran."""
    tmp = tmp_path_factory.mktemp("one-process")
    with pytest.MonkeyPatch.context() as mp:
        repo = fresh_clone(tmp / "repo")
        mp.setattr(gitops, "REPO", repo)
        mp.setenv("HOME", str(tmp / "home"))
        mp.setenv("PYTHONPATH", str(STANDIN))
        mp.setattr(record, "gpu_available", lambda: True)
        store = tmp / "store"
        start = time.time()
        for rev, gpus in (("HEAD~1", None), ("HEAD", "0,1,2,3")):  # HEAD on 4 fake GPUs
            record.record(rev, results=store, machine=MACHINE, grid="quick", gpus=gpus, echo=lambda line: None)
        yield repo, store, (start, time.time()), tmp, mp


def results_file(store, commit) -> Path:
    return Path(Store(store).load(MACHINE, commit).paths[0])


@pytest.mark.slow
def test_the_record_stores_what_a_plain_asv_run_stores(recorded):
    repo, store, (start, end), tmp, mp = recorded
    head = gitops.resolve("HEAD", repo)
    plain = tmp / "plain"
    conf = tmp / "asv.conf.json"
    conf.write_text(json.dumps(record.asv_config(repo, plain, tmp / "html")))
    env = record._asv_env(repo, "quick", None, None)
    # exit code 2: asv's for a run in which a benchmark failed (the stand-in's failed case), the record's too
    for args, code in ((["machine", "--machine", MACHINE, "--yes"], 0),
                       (["run", "--python=same", "--set-commit-hash", head, "--machine", MACHINE, "--record-samples",
                         "--launch-method", "forkserver"], 2)):
        out = subprocess.run([sys.executable, "-m", "asv", *args, "--config", str(conf)], env=env, cwd=repo,
                             capture_output=True, text=True)
        assert out.returncode == code, out.stdout[-3000:] + out.stderr[-3000:]
    assert Store(store).read_sidecar(MACHINE, head, "asv-log")["exit_code"] == 2
    ours, theirs = (json.loads(results_file(s, head).read_text()) for s in (store, plain))
    assert results_file(store, head).name == results_file(plain, head).name
    assert {k: v for k, v in ours.items() if k not in ("results", "durations")} == \
           {k: v for k, v in theirs.items() if k not in ("results", "durations")}
    assert sorted(ours["durations"]) == sorted(theirs["durations"])  # <build>, <setup_cache ...>
    assert all(v >= 0 for v in ours["durations"].values())
    columns = ours["result_columns"]
    assert sorted(ours["results"]) == sorted(theirs["results"]) and len(ours["results"]) == 6
    for name, row in ours["results"].items():
        other = theirs["results"][name]
        assert len(row) == len(other), name
        for column, a, b in zip(columns, row, other):
            if column not in TIMES:
                assert json.dumps(a) == json.dumps(b), (name, column)  # NaN and null as asv wrote them
        started_at, duration = row[columns.index("started_at")], row[columns.index("duration")]
        assert start * 1e3 <= started_at <= end * 1e3 and 0 < duration < end - start
    samples = ours["results"][BENCH_TIME][columns.index("samples")]
    # measured ones have samples (8 skipped, 2 failed: none), at both caches: the 16-bit one and the fp8 one
    assert sum(s is not None for s in samples) == 2 * (32 - 10)
    for name in ("benchmarks.json", f"{MACHINE}/machine.json"):
        assert json.loads((store / name).read_text()) == json.loads((plain / name).read_text()), name


@pytest.mark.slow
def test_asv_publish_and_the_gate_read_a_record_made_in_one_process(recorded, capsys):
    repo, store, _, tmp, mp = recorded
    conf = tmp / "publish.json"
    conf.write_text(json.dumps(record.asv_config(repo, store, tmp / "html")))
    out = subprocess.run([sys.executable, "-m", "asv", "publish", "--config", str(conf)], cwd=repo,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    graphs = list((tmp / "html" / "graphs").rglob("mla_decode.TimeDecode.time_decode.json"))
    assert graphs and all(json.loads(g.read_text()) for g in graphs)
    s = Store(store)
    assert not s.problems and s.load(MACHINE, gitops.resolve("HEAD", repo)).entries(BENCH_TIME)
    mp.setenv("MLAGATE_CONFIG", str(repo / "perf.yml"))
    code = cli.main(["gate", "--base", "HEAD~1", "--head", "HEAD", "--machine", MACHINE, "--results", str(store),
                     "--out", str(tmp / "gate")])
    err = capsys.readouterr().err
    assert code == 0, err  # the same fake measurement on both sides: no regression
    assert json.loads((tmp / "gate" / "verdict.json").read_text())
    # HEAD was measured on 4 GPUs: each point (all its implementations) on one, all four used
    rows = s.read_sidecar(MACHINE, gitops.resolve("HEAD", repo), "cases")["results"]
    gpu_of = {}
    for row in rows:
        point = (row["batch"], row["seqlen"], row["dtype"], row["heads"], row["q_len"], row["workload"])
        gpu_of.setdefault(point, set()).add(row["gpu"])
    assert all(len(g) == 1 for g in gpu_of.values()) and set.union(*gpu_of.values()) == {0, 1, 2, 3}
    # what the measuring pass said, which asv keeps to itself, is kept beside the cases (and `record` prints it)
    said = s.read_sidecar(MACHINE, gitops.resolve("HEAD", repo), "cases")["said"]
    assert [line.split(";")[0].split()[:2] for line in said] == [["measuring", "pass"]]


# -- the same point on the same GPU ---------------------------------------------------

def _gpu_of(cases, n):
    return {grid.point(cases[i]): gpu for gpu, part in enumerate(grid.shard(cases, n)) for i in part}


def test_a_point_is_measured_on_the_same_gpu_in_every_commits_record():
    """Whatever implementations a commit has, and in whatever order its cases come (budgets sort them),
    a grid point lands on the same GPU: base and head compare on one GPU."""
    points = [(b, s, "float16", h) for b in (64, 128) for s in (1024, 2048, 4096, 8192, 16384) for h in (16, 128)]
    base = [Case(i, *p) for i in ("tilelang-hopper", "flash_mla") for p in points]
    head = [Case(i, *p) for p in reversed(points) for i in ("torch", "tilelang-hopper", "flash_mla", "triton")]
    for n in (2, 4, 8):
        assert _gpu_of(base, n) == _gpu_of(head, n)
        assert len(set(_gpu_of(base, n).values())) == n


def test_the_split_of_points_is_pinned():
    """Over runners (--shard) and over a runner's GPUs: the hash and the order are part of the store's
    history (a change moves points to another GPU between base and head), so their values are pinned."""
    assert [runner_shard(Case("tilelang-hopper", b, 4096, "float16", 16), 4) for b in (64, 128)] == [3, 0]
    cases = [Case("tilelang-hopper", b, s, "float16", 16) for b in (64, 128) for s in (1024, 4096, 16384)]
    assert grid.shard(cases, 2) == [[0, 1, 5], [2, 3, 4]]

"""`mlagate results merge` on a CPU: real H200 records split into shards the way `mlagate record
--shard I/N` writes them (each shard's results file holds the other shards' cases as skipped, or only
its own points), merged, and compared with the unsharded record case by case; every bad set of shards
is refused, naming the shard or file, with nothing written in the target store."""

import ast
import json
import math
import shutil
from pathlib import Path

import pytest

import gate_fixtures as fx
from mlagate import cli
from mlagate.case import Case
from mlagate.measure.shards import runner_shard
from mlagate.store.errors import StoreError
from mlagate.store.merge import merge_shards
from mlagate.store.results import Store
from mlagate.store.results_file import BENCH_TIME, case_keys

FULL = fx.FIXTURES / "results-full"  # the full fp16 grid: 70 cases over 10 grid points
FULL_HEAD = "45cfef26b8cdf6dc2bfcf8bab9f60017bc434ac8"
FULL_OTHER = "40ecf0a55899cc0dbc4bc6040c778df62dc4259c"
PER_CASE = ("result", "stats_ci_99_a", "stats_ci_99_b", "stats_q_25", "stats_q_75", "stats_number", "stats_repeat",
            "samples")


def results_path(root, commit) -> Path:
    return next((Path(root) / fx.MACHINE).glob(f"{commit[:8]}-*.json"))


def owned(key, shard, shards) -> bool:
    return runner_shard(Case(*key), shards) == shard - 1


def _cut_row(row, columns, keys, new_keys, keep):
    """A results row re-laid for ``new_keys``: a kept case's columns as they were, any other case
    skipped as asv writes it (NaN result, no stats or samples; an all-None column is None, trailing
    None columns dropped)."""
    index = {k: i for i, k in enumerate(keys)}
    row = row + [None] * (len(columns) - len(row))
    for c, name in enumerate(columns):
        if name in PER_CASE and row[c] is not None:
            skipped = math.nan if name == "result" else None
            row[c] = [row[c][index[k]] if k in index and keep(k) else skipped for k in new_keys]
            row[c] = None if all(v is None for v in row[c]) else row[c]
    while row and row[-1] is None:
        row.pop()
    return row


def make_shard(dest, shard, shards, *, src=FULL, commit=FULL_HEAD, own_params=False, cases=False) -> Path:
    """Shard ``shard`` of ``shards`` of ``commit``'s record in ``src``, as a store of its own at ``dest``.
    ``own_params``: asv's parameter lists hold only this shard's points (asv_suite.params() under
    MLAGATE_SHARD); otherwise the whole grid, the other shards' cases skipped. ``cases``: a cases sidecar."""
    dest = Path(dest)
    (dest / fx.MACHINE).mkdir(parents=True)
    shutil.copy(src / "benchmarks.json", dest)
    for path in (src / fx.MACHINE).glob(f"{commit[:8]}-*"):
        shutil.copy(path, dest / fx.MACHINE)
    shutil.copy(src / fx.MACHINE / "machine.json", dest / fx.MACHINE)
    env_path = dest / fx.MACHINE / f"{commit[:8]}-env.sidecar"
    env_path.write_text(json.dumps({**json.loads(env_path.read_text()), "shard": f"{shard}/{shards}"}))
    path = results_path(dest, commit)
    data = json.loads(path.read_text())
    columns, p = data["result_columns"], data["result_columns"].index("params")
    bench_params = json.loads((dest / "benchmarks.json").read_text())
    for name, row in data["results"].items():
        keys = case_keys(row[p])
        params = row[p]
        if own_params:
            mine = [k for k in keys if owned(k, shard, shards)]
            params = [[v for v in vs if ast.literal_eval(v) in {m[i] for m in mine}] for i, vs in enumerate(row[p])]
            bench_params[name]["params"] = params
        data["results"][name] = _cut_row(row, columns, keys, case_keys(params), lambda k: owned(k, shard, shards))
        data["results"][name][p] = params
    path.write_text(json.dumps(data))
    (dest / "benchmarks.json").write_text(json.dumps(bench_params, indent=4))
    if cases:
        entries = Store(src).load(fx.MACHINE, commit).entries(BENCH_TIME)
        rows = [{**dict(zip(("impl", "batch", "seqlen", "dtype", "heads"), k)), "status": e.status, "shard": shard}
                for k, e in entries.items() if owned(k, shard, shards)]
        (dest / fx.MACHINE / f"{commit[:8]}-cases.sidecar").write_text(json.dumps({"results": rows}))
    return dest


def split(tmp_path, shards, **kwargs) -> list:
    return [make_shard(tmp_path / f"shard-{i}", i, shards, **kwargs) for i in range(1, shards + 1)]


def tree(root) -> dict:
    root = Path(root)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()} \
        if root.exists() else None


# -- merged as recorded ---------------------------------------------------------------------------

def test_three_shards_merge_into_the_unsharded_record(tmp_path):
    shards = split(tmp_path, 3)
    for root in shards:  # the split is real: every shard measured some cases and skipped others
        statuses = {e.status for e in Store(root).load(fx.MACHINE, FULL_HEAD).entries(BENCH_TIME).values()}
        assert {"ok", "skipped"} <= statuses, root
    path = merge_shards(shards, tmp_path / "into", fx.MACHINE, FULL_HEAD)
    assert path == tmp_path / "into" / fx.MACHINE / results_path(FULL, FULL_HEAD).name  # asv's name, kept
    original, merged = Store(FULL).load(fx.MACHINE, FULL_HEAD), Store(tmp_path / "into").load(fx.MACHINE, FULL_HEAD)
    assert set(merged.benchmarks) == set(original.benchmarks)
    for bench, entries in original.benchmarks.items():
        assert merged.entries(bench) == entries, bench  # status, value and samples of every case
    assert sum(e.samples is not None for e in merged.entries(BENCH_TIME).values()) == 60
    # The whole file as asv wrote it, stats columns included, and machine.json copied.
    assert json.loads(path.read_text()) == json.loads(results_path(FULL, FULL_HEAD).read_text())
    machine_json = (FULL / fx.MACHINE / "machine.json").read_bytes()
    assert (tmp_path / "into" / fx.MACHINE / "machine.json").read_bytes() == machine_json
    assert json.loads((tmp_path / "into" / "benchmarks.json").read_text()) == json.loads(
        (FULL / "benchmarks.json").read_text())


def test_shards_whose_params_hold_only_their_own_points_merge_too(tmp_path):
    shards = split(tmp_path, 3, own_params=True)
    sizes = [len(Store(r).load(fx.MACHINE, FULL_HEAD).entries(BENCH_TIME)) for r in shards]
    assert all(0 < n < 70 for n in sizes), sizes  # each shard's file has a part of the grid only
    merge_shards(shards, tmp_path / "into", fx.MACHINE, FULL_HEAD)
    original, merged = Store(FULL).load(fx.MACHINE, FULL_HEAD), Store(tmp_path / "into").load(fx.MACHINE, FULL_HEAD)
    for bench, entries in original.benchmarks.items():
        assert merged.entries(bench) == entries, bench
    bench_params = json.loads((tmp_path / "into" / "benchmarks.json").read_text())[BENCH_TIME]["params"]
    original_params = json.loads((FULL / "benchmarks.json").read_text())[BENCH_TIME]["params"]
    assert [sorted(p) for p in bench_params] == [sorted(p) for p in original_params]


def test_a_record_without_shards_merges_alone_unchanged(tmp_path):
    # N = 1: a plain record (no "shard" in its env sidecar) is all of the grid.
    root = tmp_path / "plain"
    (root / fx.MACHINE).mkdir(parents=True)
    shutil.copy(FULL / "benchmarks.json", root)
    for path in [*(FULL / fx.MACHINE).glob(f"{FULL_HEAD[:8]}-*"), FULL / fx.MACHINE / "machine.json"]:
        shutil.copy(path, root / fx.MACHINE)
    path = merge_shards([root], tmp_path / "into", fx.MACHINE, FULL_HEAD)
    assert json.loads(path.read_text()) == json.loads(results_path(FULL, FULL_HEAD).read_text())
    env = Store(tmp_path / "into").read_sidecar(fx.MACHINE, FULL_HEAD, "env")
    original_env = json.loads((root / fx.MACHINE / f"{FULL_HEAD[:8]}-env.sidecar").read_text())
    assert env == {**original_env, "shards": [original_env]}


def test_the_sidecars_join_the_shards(tmp_path):
    shards = split(tmp_path, 3, cases=True)
    merge_shards(shards[::-1], tmp_path / "into", fx.MACHINE, FULL_HEAD)  # the order given does not matter
    store = Store(tmp_path / "into")
    envs = [Store(r).read_sidecar(fx.MACHINE, FULL_HEAD, "env") for r in shards]
    assert store.read_sidecar(fx.MACHINE, FULL_HEAD, "env") == {**envs[0], "shards": envs}
    cases = store.read_sidecar(fx.MACHINE, FULL_HEAD, "cases")["results"]
    assert [r["shard"] for r in cases] == sorted(r["shard"] for r in cases)  # shard 1's, then 2's, then 3's
    assert len(cases) == 70 and len({(r["impl"], r["batch"], r["seqlen"]) for r in cases}) == 70
    log = store.read_sidecar(fx.MACHINE, FULL_HEAD, "asv-log")
    heads = [line for line in log["log"].splitlines() if line.startswith("===== shard")]
    assert heads == [f"===== shard {i}/3 ({root}) =====" for i, root in enumerate(shards, 1)]
    assert [s["shard"] for s in log["shards"]] == ["1/3", "2/3", "3/3"] and log["exit_code"] == 0



def test_the_merged_row_starts_with_the_earliest_shard_and_lasts_as_long_as_the_longest(tmp_path):
    # The shards ran side by side: the merged benchmark started when the first shard started it and took as
    # long as the slowest shard; the file's durations likewise.
    shards = split(tmp_path, 3)
    columns = json.loads(results_path(FULL, FULL_HEAD).read_text())["result_columns"]
    start, took = columns.index("started_at"), columns.index("duration")
    offsets = {1: (500, 1.0), 2: (-300, 3.0), 3: (0, 2.0)}  # shard 2 started first and took longest
    for i, root in enumerate(shards, 1):
        path = results_path(root, FULL_HEAD)
        data = json.loads(path.read_text())
        for row in data["results"].values():
            row[start] += offsets[i][0]
            row[took] *= offsets[i][1]
        data["durations"] = {k: v * offsets[i][1] for k, v in data["durations"].items()}
        path.write_text(json.dumps(data))
    merged = json.loads(merge_shards(shards, tmp_path / "into", fx.MACHINE, FULL_HEAD).read_text())
    original = json.loads(results_path(FULL, FULL_HEAD).read_text())
    for name, row in original["results"].items():
        assert merged["results"][name][start] == row[start] - 300, name
        assert merged["results"][name][took] == row[took] * 3.0, name
    assert merged["durations"] == {k: v * 3.0 for k, v in original["durations"].items()}


def test_a_merged_file_that_does_not_read_back_as_its_shards_is_refused(tmp_path, monkeypatch):
    # The read-back check, on its own: a merge that got one case's value wrong is caught before it is installed.
    import mlagate.store.merge as merge

    merge_row = merge._merge_row

    def one_case_lost(name, shards, columns):
        # a measured case written as skipped: a well-formed results file, just not the shards' record
        row, expected = merge_row(name, shards, columns)
        if name == BENCH_TIME:
            i = next(i for i, v in enumerate(row[0]) if not math.isnan(v))
            for c, column in enumerate(columns):
                if column in PER_CASE and c < len(row) and row[c] is not None:
                    row[c] = [*row[c][:i], math.nan if column == "result" else None, *row[c][i + 1:]]
        return row, expected

    monkeypatch.setattr(merge, "_merge_row", one_case_lost)
    refused(tmp_path, split(tmp_path, 2), "the merged results do not read back as the shards'")

# -- refused, nothing written ---------------------------------------------------------------------

def refused(tmp_path, shards, match, commit=FULL_HEAD, machine=fx.MACHINE):
    into = tmp_path / "into"
    with pytest.raises((StoreError, ValueError), match=match) as raised:
        merge_shards(shards, into, machine, commit)
    assert not into.exists()  # not even the lock
    return str(raised.value)


def measured_case(shard, shards) -> int:
    """The index (in the fixture's row) of a case that shard ``shard`` measured."""
    entries = Store(FULL).load(fx.MACHINE, FULL_HEAD).entries(BENCH_TIME)
    keys = case_keys(json.loads(results_path(FULL, FULL_HEAD).read_text())["results"][BENCH_TIME][1])
    return next(i for i, k in enumerate(keys) if owned(k, shard, shards) and entries[k].status == "ok")


def test_a_case_measured_by_two_shards_is_refused(tmp_path):
    shards = split(tmp_path, 2)
    i = measured_case(1, 2)
    original = json.loads(results_path(FULL, FULL_HEAD).read_text())
    path = results_path(shards[1], FULL_HEAD)
    data = json.loads(path.read_text())
    data["results"][BENCH_TIME][0][i] = original["results"][BENCH_TIME][0][i]  # shard 2 measured it too
    path.write_text(json.dumps(data))
    message = refused(tmp_path, shards, "measured by shard 1/2")
    assert f"shard 2/2 ({shards[1]})" in message and f"({shards[0]})" in message


def test_a_case_measured_by_a_shard_it_is_not_assigned_to_is_refused(tmp_path):
    shards = split(tmp_path, 2)
    i = measured_case(1, 2)
    a, b = (json.loads(results_path(r, FULL_HEAD).read_text()) for r in shards)
    # the case moves from shard 1 to shard 2: measured once, but by the runner of another point
    b["results"][BENCH_TIME][0][i], a["results"][BENCH_TIME][0][i] = a["results"][BENCH_TIME][0][i], math.nan
    for root, data in zip(shards, (a, b)):
        results_path(root, FULL_HEAD).write_text(json.dumps(data))
    message = refused(tmp_path, shards, r"is measured in shard 2/2, but its grid point is shard 1/2's")
    assert str(results_path(shards[1], FULL_HEAD)) in message


def test_a_missing_or_repeated_shard_is_refused(tmp_path):
    shards = split(tmp_path, 3)
    message = refused(tmp_path, shards[:2], r"not shards 1\.\.2")
    assert "shard 1/3" in message and "shard 2/3" in message
    refused(tmp_path, [shards[0], shards[0], shards[2]], r"not shards 1\.\.3 of one record, each once")
    refused(tmp_path, [*shards, make_shard(tmp_path / "extra", 1, 4)], r"not shards 1\.\.4")


def test_a_shard_of_another_commit_machine_or_grid_is_refused(tmp_path):
    good = make_shard(tmp_path / "good", 1, 2)
    other_commit = make_shard(tmp_path / "other-commit", 2, 2, commit=FULL_OTHER)
    message = refused(tmp_path, [good, other_commit], f"no results of {FULL_HEAD[:8]}")
    assert str(other_commit / fx.MACHINE) in message and FULL_OTHER[:8] in message

    other_machine = make_shard(tmp_path / "other-machine", 2, 2)
    (other_machine / fx.MACHINE).rename(other_machine / "mi300x")
    message = refused(tmp_path, [good, other_machine], "no results")
    assert str(other_machine) in message and "machines: mi300x" in message

    named_other = make_shard(tmp_path / "named-other", 2, 2)
    (named_other / fx.MACHINE / "machine.json").write_text(json.dumps({"machine": "mi300x", "version": 1}))
    refused(tmp_path, [good, named_other], "not asv's machine.json of 'h200'")

    other_host = make_shard(tmp_path / "other-host", 2, 2)
    machine_json = other_host / fx.MACHINE / "machine.json"
    machine_json.write_text(json.dumps({**json.loads(machine_json.read_text()), "ram": "1024"}))
    assert str(machine_json) in refused(tmp_path, [good, other_host], "differs .* in ram")

    other_grid = make_shard(tmp_path / "other-grid", 2, 2)
    env = other_grid / fx.MACHINE / f"{FULL_HEAD[:8]}-env.sidecar"
    env.write_text(json.dumps({**json.loads(env.read_text()), "grid": "quick"}))
    assert "shard 2/2" in refused(tmp_path, [good, other_grid], "grid")

    other_platform = make_shard(tmp_path / "other-platform", 2, 2)  # e.g. a ROCm runner's shard of a CUDA record
    env = other_platform / fx.MACHINE / f"{FULL_HEAD[:8]}-env.sidecar"
    env.write_text(json.dumps({**json.loads(env.read_text()), "platform": "rocm"}))
    assert "'rocm'" in refused(tmp_path, [good, other_platform], "shard 2/2 .*: grid")

    refused(tmp_path, [good, make_shard(tmp_path / "second", 2, 2)], "full commit hash", commit=FULL_HEAD[:8])


def test_a_truncated_or_incomplete_shard_is_refused_naming_the_file(tmp_path):
    shards = split(tmp_path, 2)
    path = results_path(shards[1], FULL_HEAD)
    text = path.read_text()
    path.write_text(text[:len(text) // 2])
    assert str(path) in refused(tmp_path, shards, "not readable JSON")
    path.write_text(text)
    env = shards[1] / fx.MACHINE / f"{FULL_HEAD[:8]}-env.sidecar"
    env.unlink()
    assert str(env) in refused(tmp_path, shards, "missing")
    refused(tmp_path, [shards[0], tmp_path / "nowhere"], "no such shard store")


def test_a_commit_already_in_the_store_is_refused(tmp_path):
    into = fx.copy_store(tmp_path)
    shards = split(tmp_path, 4, src=fx.RESULTS, commit=fx.DOCS)
    before = tree(into)
    with pytest.raises(StoreError, match="already recorded"):
        merge_shards(shards, into, fx.MACHINE, fx.DOCS)
    assert tree(into) == before


# -- the command line and the gate ------------------------------------------------------------------

def merge_cli(into, commit, shards):
    return cli.main(["results", "merge", "--machine", fx.MACHINE, "--commit", commit, "--into", str(into),
                     *map(str, shards)])


def test_the_cli_merges_with_exit_0_and_refuses_with_exit_2(tmp_path, capsys):
    shards = split(tmp_path, 2)
    assert merge_cli(tmp_path / "into", FULL_HEAD, shards) == 0
    assert f"merged 2 shard(s) of {FULL_HEAD[:8]}" in capsys.readouterr().out
    before = tree(tmp_path / "into")
    assert merge_cli(tmp_path / "into", FULL_HEAD, shards) == 2
    assert "already recorded" in capsys.readouterr().err
    assert merge_cli(tmp_path / "other", FULL_HEAD, shards[:1]) == 2
    assert "not shards 1..1" in capsys.readouterr().err and not (tmp_path / "other").exists()
    with pytest.raises(SystemExit) as raised:  # argparse: a usage error, exit 2 as every error
        cli.main(["results", "merge", "--machine", fx.MACHINE, "--commit", FULL_HEAD, *map(str, shards)])
    assert raised.value.code == 2 and "--into" in capsys.readouterr().err
    assert tree(tmp_path / "into") == before


@pytest.mark.parametrize("head, exit_code", [(fx.DOCS, 0), (fx.SLOW, 1)])
def test_the_gate_decides_a_merged_store_as_the_unsharded_one(tmp_path, head, exit_code):
    # The quick grid's two points land on shards 1 and 3 of 4: shards 2 and 4 measured nothing.
    assert sorted({runner_shard(Case(*k), 4) for k in Store(fx.RESULTS).load(fx.MACHINE, head).entries(BENCH_TIME)}) \
        == [0, 2]
    merged = tmp_path / "merged"
    shutil.copytree(fx.RESULTS, merged, ignore=lambda d, names: [n for n in names if n.startswith(head[:8])])
    assert Store(merged).load(fx.MACHINE, head) is None
    assert merge_cli(merged, head, split(tmp_path, 4, src=fx.RESULTS, commit=head)) == 0
    verdicts = []
    for name, root in (("unsharded", fx.copy_store(tmp_path / "unsharded")), ("merged", merged)):
        out = tmp_path / f"gate-{name}"
        assert cli.main(["gate", "--base", fx.BASE, "--head", head, "--machine", fx.MACHINE, "--results", str(root),
                         "--out", str(out)]) == exit_code
        verdicts.append(json.loads((out / "verdict.json").read_text()))
    assert verdicts[0] == verdicts[1]
    assert len(verdicts[0]["cases"]) == 2


def test_the_helpers_split_as_asv_writes(tmp_path):
    # make_shard's cut, checked on its own: every case is measured in exactly one shard.
    shards = split(tmp_path, 3)
    original = Store(FULL).load(fx.MACHINE, FULL_HEAD).entries(BENCH_TIME)
    per_shard = [Store(r).load(fx.MACHINE, FULL_HEAD).entries(BENCH_TIME) for r in shards]
    for key, entry in original.items():
        measured = [i for i, e in enumerate(per_shard) if e[key].status != "skipped"]
        assert measured == ([runner_shard(Case(*key), 3)] if entry.status != "skipped" else []), key


def test_shards_with_workload_benchmarks_merge_into_the_unsharded_record(tmp_path):
    """The workloads' asv classes (their own benchmark names, a workload parameter) merge like the grid's
    and read back into the same cases (store.results_file.WORKLOAD_BENCH)."""
    from mlagate.store.results_file import WORKLOAD_BENCH

    src = tmp_path / "src"
    shutil.copytree(FULL, src)
    path = results_path(src, FULL_HEAD)
    data = json.loads(path.read_text())
    p = data["result_columns"].index("params")
    bench_json = json.loads((src / "benchmarks.json").read_text())
    tail = [["128"], ["'ragged-4k'"]]  # the fixture predates the heads parameter: 128 heads
    for name, logical in WORKLOAD_BENCH.items():  # the grid's rows again, as one workload's
        row = json.loads(json.dumps(data["results"][logical]))
        row[p] = [*row[p], *tail]
        data["results"][name] = row
        bench_json[name] = {**bench_json[logical], "name": name, "params": [*bench_json[logical]["params"], *tail],
                            "param_names": [*bench_json[logical]["param_names"], "heads", "workload"]}
    path.write_text(json.dumps(data))
    (src / "benchmarks.json").write_text(json.dumps(bench_json))
    original = Store(src).load(fx.MACHINE, FULL_HEAD)
    assert sum(k[-1] == "ragged-4k" for k in original.entries(BENCH_TIME)) == 70
    merge_shards(split(tmp_path, 2, src=src), tmp_path / "into", fx.MACHINE, FULL_HEAD)
    merged = Store(tmp_path / "into").load(fx.MACHINE, FULL_HEAD)
    for bench, entries in original.benchmarks.items():
        assert merged.entries(bench) == entries, bench


@pytest.mark.parametrize("journal", ['{"files": 3}', '{"files": [', '{"files": [], "files": []}'])
def test_a_damaged_journal_in_the_target_store_is_refused_before_its_lock_is_made(tmp_path, journal):
    from mlagate.store.files import JOURNAL

    into = tmp_path / "into"
    into.mkdir()
    (into / JOURNAL).write_text(journal)
    with pytest.raises(StoreError, match=f"{into / JOURNAL}: unreadable install journal"):
        merge_shards(split(tmp_path, 2), into, fx.MACHINE, FULL_HEAD)
    assert tree(into) == {JOURNAL: journal.encode()}  # no lock file, nothing else

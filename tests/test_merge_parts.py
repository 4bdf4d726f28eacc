"""`mlagate results merge`, part by part (test_merge.py's split shards): the columns asv keeps once per
benchmark, grid points no shard holds, the files written beside the results (benchmarks.json, the asv-log
sidecar), and each way the shards' files can disagree, refused with its whole message."""

import json
import math
import re
import shutil
import tempfile
from pathlib import Path

import pytest

import gate_fixtures as fx
from mlagate.store.errors import StoreError
from mlagate.store.merge import merge_shards
from mlagate.store.results import Store
from mlagate.store.results_file import BENCH_TFLOPS, BENCH_TIME, Entry, case_keys
from test_merge import FULL, FULL_HEAD, _cut_row, make_shard, results_path, split

ORIGINAL = json.loads(results_path(FULL, FULL_HEAD).read_text())
COLUMNS = ORIGINAL["result_columns"]
P, VERSION, START, TOOK = (COLUMNS.index(c) for c in ("params", "version", "started_at", "duration"))


def edit(path, change):
    """Rewrite the JSON file at ``path`` with ``change`` applied to its data (which it changes in place)."""
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def edit_rows(root, change):
    """``change(name, row)`` on every benchmark's row of the shard store at ``root``."""
    edit(results_path(root, FULL_HEAD), lambda data: [change(name, row) for name, row in data["results"].items()])


def merged(tmp_path, shards) -> dict:
    return json.loads(merge_shards(shards, tmp_path / "into", fx.MACHINE, FULL_HEAD).read_text())


# -- the columns asv keeps once per benchmark ---------------------------------------------------------

def test_a_shard_whose_asv_timed_a_benchmark_at_zero_merges_as_the_longest_shard(tmp_path):
    """0.0 s is a number asv's clock can give: it is not refused, and the longest shard's duration is kept."""
    shards = split(tmp_path, 2)

    def zero(name, row):
        row[TOOK] = 0.0

    edit_rows(shards[0], zero)
    edit(results_path(shards[0], FULL_HEAD), lambda data: data["durations"].update({"<build>": 0.0}))
    assert merged(tmp_path, shards) == ORIGINAL


def test_a_benchmark_no_shard_timed_merges_without_a_start_or_duration(tmp_path):
    shards = split(tmp_path, 2)

    def untimed(name, row):
        row[START] = row[TOOK] = None
        while row[-1] is None:  # as asv writes a row
            row.pop()

    for root in shards:
        edit_rows(root, untimed)
    expected = json.loads(json.dumps(ORIGINAL))
    for name, row in expected["results"].items():
        untimed(name, row)
    assert merged(tmp_path, shards) == expected
    assert [len(row) for row in expected["results"].values()] == [3, 3, 12]  # the tflops rows lost both columns


def test_a_case_no_shard_measured_is_copied_from_the_first_shard_that_holds_it(tmp_path):
    """Not pieced together from several: shard 2's stray statistic of a case it skipped stays out."""
    shards = split(tmp_path, 2)
    skipped = next(i for i, v in enumerate(ORIGINAL["results"][BENCH_TIME][0]) if math.isnan(v))
    assert ORIGINAL["results"][BENCH_TIME][COLUMNS.index("stats_q_25")][skipped] is None

    def stray(name, row):
        if name == BENCH_TIME:
            row[COLUMNS.index("stats_q_25")][skipped] = 5e-05

    edit_rows(shards[1], stray)
    assert merged(tmp_path, shards) == ORIGINAL


def test_a_grid_point_that_no_shard_holds_reads_back_as_skipped(tmp_path):
    """Shards whose parameter lists hold only their own points: shard 1 batch 128 x seqlen 4096, shard 2 batch
    64 x seqlen 1024 (each its own runner's point). The joined lists also make 64 x 4096 and 128 x 1024, which
    neither shard has: skipped (NaN), as asv writes a case it did not run."""
    shards = split(tmp_path, 2)
    for root, batch, seqlen in ((shards[0], "128", "4096"), (shards[1], "64", "1024")):
        bench_json = json.loads((root / "benchmarks.json").read_text())

        def narrow(name, row):
            params = [row[P][0], [batch], [seqlen], row[P][3]]
            row[:] = _cut_row(row, COLUMNS, case_keys(row[P]), case_keys(params), lambda key: True)
            row[P] = bench_json[name]["params"] = params

        edit_rows(root, narrow)
        (root / "benchmarks.json").write_text(json.dumps(bench_json, indent=4))
    merge_shards(shards, tmp_path / "into", fx.MACHINE, FULL_HEAD)
    original = Store(FULL).load(fx.MACHINE, FULL_HEAD)
    got = Store(tmp_path / "into").load(fx.MACHINE, FULL_HEAD)
    held, joined = {(128, 4096), (64, 1024)}, {(128, 4096), (64, 1024), (64, 4096), (128, 1024)}
    for bench, entries in original.benchmarks.items():
        assert got.entries(bench) == {k: e if k[1:3] in held else Entry("skipped")
                                      for k, e in entries.items() if k[1:3] in joined}, bench
        assert {k[1:3] for k, e in entries.items() if e.status == "ok"} >= held, bench  # both points measured
    assert json.loads((tmp_path / "into" / "benchmarks.json").read_text())[BENCH_TIME]["params"][1:3] == [
        ["128", "64"], ["4096", "1024"]]  # every value once, in shard order


# -- the files beside the results ----------------------------------------------------------------------

def test_the_merged_benchmarks_json_is_the_unsharded_records_text(tmp_path):
    """asv's own layout (four-space indent), byte for byte: a results branch diff shows no change."""
    merge_shards(split(tmp_path, 2), tmp_path / "into", fx.MACHINE, FULL_HEAD)
    assert (tmp_path / "into" / "benchmarks.json").read_bytes() == (FULL / "benchmarks.json").read_bytes()


def test_the_asv_log_sidecar_keeps_each_shards_command_exit_code_and_log(tmp_path):
    """The record's exit code is the first failing shard's; the command shown on top is shard 1's."""
    shards = split(tmp_path, 3)
    logs = [{"command": ["asv", "run", "--shard", "1/3"], "exit_code": 0, "log": "one"},
            {"command": ["asv", "run", "--shard", "2/3"], "exit_code": 2, "log": "two"},
            {"command": ["asv", "run", "--shard", "3/3"], "exit_code": 1}]  # a log asv never wrote
    for root, log in zip(shards, logs):
        (root / fx.MACHINE / f"{FULL_HEAD[:8]}-asv-log.sidecar").write_text(json.dumps(log))
    merge_shards(shards, tmp_path / "into", fx.MACHINE, FULL_HEAD)
    assert Store(tmp_path / "into").read_sidecar(fx.MACHINE, FULL_HEAD, "asv-log") == {
        "command": ["asv", "run", "--shard", "1/3"], "exit_code": 2,
        "log": f"===== shard 1/3 ({shards[0]}) =====\none\n===== shard 2/3 ({shards[1]}) =====\ntwo\n"
               f"===== shard 3/3 ({shards[2]}) =====\n\n",
        "shards": [{"shard": "1/3", "command": ["asv", "run", "--shard", "1/3"], "exit_code": 0},
                   {"shard": "2/3", "command": ["asv", "run", "--shard", "2/3"], "exit_code": 2},
                   {"shard": "3/3", "command": ["asv", "run", "--shard", "3/3"], "exit_code": 1}]}


# -- shards that disagree: refused, the whole message --------------------------------------------------

def _row(name, change):
    """A change of shard 2's row of ``name``."""
    def apply(data):
        change(data["results"][name])
    return apply


def _set(index, value):
    def change(row):
        row[index] = value
    return change


VERSION_TIME = ORIGINAL["results"][BENCH_TIME][VERSION]
STARTED_TIME, TOOK_TIME = ORIGINAL["results"][BENCH_TIME][START], ORIGINAL["results"][BENCH_TIME][TOOK]
DISAGREEMENTS = {  # id: (what changes in shard 2's results file, in its benchmarks.json; the message)
    "a parameter more": (_row(BENCH_TIME, lambda row: row[P].append(["128"])), None,
                         "{name} in {path1}, {path2}: the shards have different parameters"),
    "a statistic short": (_row(BENCH_TIME, lambda row: row[COLUMNS.index("stats_q_25")].pop()), None,
                          "{path2}: column stats_q_25 of a benchmark is not one value per case"),
    "a start that is no time": (_row(BENCH_TIME, _set(START, "2026-11-29T12:04:13Z")), None,
                                f"{{name}}: the shards' started_at values [{STARTED_TIME}, '2026-11-29T12:04:13Z'] "
                                "do not merge"),
    "a duration that is no number": (_row(BENCH_TIME, _set(TOOK, "slow")), None,
                                     f"{{name}}: the shards' duration values [{TOOK_TIME}, 'slow'] do not merge"),
    "other benchmark code": (_row(BENCH_TIME, _set(VERSION, "other")), None,
                             f"{{name}}: the shards' version values ['{VERSION_TIME}', 'other'] do not merge"),
    "durations that are no numbers": (lambda data: data.update(durations={"<build>": "fast"}), None,
                                      "{path2}: durations {{'<build>': 'fast'}} are not numbers"),
    "another benchmark timeout": (None, lambda bench: bench[BENCH_TIME].update(timeout=1),
                                  "{root2}/benchmarks.json: differs from shard 1/2 ({root1})'s in more than params"),
    "a parameter value that is no literal": (None, lambda bench: bench[BENCH_TIME]["params"][3].__setitem__(0, "fp16"),
                                             "{name}: parameter value 'fp16' is not a Python literal"),
}


@pytest.mark.parametrize("results_change, bench_change, message", DISAGREEMENTS.values(), ids=DISAGREEMENTS)
def test_shards_that_disagree_are_refused_naming_what_differs(tmp_path, results_change, bench_change, message):
    shards = split(tmp_path, 2)
    if results_change:
        edit(results_path(shards[1], FULL_HEAD), results_change)
    if bench_change:
        edit(shards[1] / "benchmarks.json", bench_change)
    with pytest.raises(StoreError) as raised:
        merge_shards(shards, tmp_path / "into", fx.MACHINE, FULL_HEAD)
    assert str(raised.value) == message.format(name=BENCH_TIME, path1=results_path(shards[0], FULL_HEAD),
                                               path2=results_path(shards[1], FULL_HEAD), root1=shards[0],
                                               root2=shards[1])
    assert not (tmp_path / "into").exists()  # nothing written, not even the lock


# -- shard stores that are no set of one record: refused, the whole message ----------------------------

def _sidecar(root, kind) -> Path:
    return root / fx.MACHINE / f"{FULL_HEAD[:8]}-{kind}.sidecar"


def _other_commits(tmp_path):
    """A store of three other commits, on h200 and another machine."""
    root = fx.copy_store(tmp_path / "others")
    (root / "mi300x").mkdir()
    shutil.copy(root / fx.MACHINE / "machine.json", root / "mi300x")
    return [make_shard(tmp_path / "good", 1, 2), root], (
        f"{root / fx.MACHINE}: no results of 45cfef26 on machine 'h200' in this shard store (commits: 22e8a671, "
        "b292e892, fbc171ef; machines: h200, mi300x)")


def _empty_store(tmp_path):
    (root := tmp_path / "empty").mkdir()
    return [make_shard(tmp_path / "good", 1, 2), root], (
        f"{root / fx.MACHINE}: no results of 45cfef26 on machine 'h200' in this shard store (commits: none; "
        "machines: none)")


def _two_files(tmp_path):
    """Shard 2's record split over two results files (asv environments): each holds other benchmarks."""
    shards = split(tmp_path, 2)
    path = results_path(shards[1], FULL_HEAD)
    data = json.loads(path.read_text())
    tflops = {**data, "results": {BENCH_TFLOPS: data["results"].pop(BENCH_TFLOPS)}}
    path.write_text(json.dumps(data))
    path.with_name(f"{FULL_HEAD[:8]}-other-env.json").write_text(json.dumps(tflops))
    return shards, f"{shards[1] / fx.MACHINE}: 2 results files of 45cfef26; a shard has one"


def _sidecar_written(kind, text, message):
    def setup(tmp_path):
        shards = split(tmp_path, 2)
        _sidecar(shards[1], kind).write_text(text)
        return shards, message.format(path=_sidecar(shards[1], kind))
    return setup


def _benchmarks_json(text, message):
    def setup(tmp_path):
        shards = split(tmp_path, 2)
        (shards[1] / "benchmarks.json").unlink()
        if text is not None:
            (shards[1] / "benchmarks.json").write_text(text)
        return shards, message.format(path=shards[1] / "benchmarks.json")
    return setup


def _missing_shard(tmp_path):
    shards = split(tmp_path, 3)
    return shards[:2], (f"shard 1/3 ({shards[0]}), shard 2/3 ({shards[1]}): not shards 1..2 of one record, each "
                        "once (as `mlagate record --shard I/N` wrote them in their env sidecars)")


def _header(tmp_path):
    shards = split(tmp_path, 2)
    edit(results_path(shards[1], FULL_HEAD), lambda data: data.update(python="/usr/bin/python3"))
    return shards, (f"{results_path(shards[1], FULL_HEAD)}: python '/usr/bin/python3' differs from "
                    f"{results_path(shards[0], FULL_HEAD)}'s '/opt/torch/.venv/bin/python3'")


def _machine(tmp_path):
    shards = split(tmp_path, 2)
    edit(shards[1] / fx.MACHINE / "machine.json", lambda data: data.update(cpu="EPYC", ram="1024"))
    return shards, f"{shards[1] / fx.MACHINE / 'machine.json'}: differs from shard 1/2 ({shards[0]})'s in cpu, ram"


def _file_name(tmp_path):
    shards = split(tmp_path, 2)
    path = results_path(shards[1], FULL_HEAD)
    path.rename(path.with_name(f"{FULL_HEAD[:8]}-renamed.json"))
    return shards, (f"shard 2/2 ({shards[1]}): results file name '45cfef26-renamed.json' differs from shard 1/2 "
                    f"({shards[0]})'s '{path.name}'")


def _cases_sidecar(tmp_path):
    shards = [make_shard(tmp_path / "shard-1", 1, 2, cases=True), make_shard(tmp_path / "shard-2", 2, 2)]
    return shards, f"shard 2/2 ({shards[1]}): cases sidecar False differs from shard 1/2 ({shards[0]})'s True"


SETS = {
    "a store of other commits": _other_commits,
    "an empty store": _empty_store,
    "two results files": _two_files,
    "a corrupt env sidecar": _sidecar_written("env", "[]", "{path}: corrupt sidecar (a JSON list, not an object)"),
    "a shard that is no I/N": _sidecar_written("env", '{"shard": "2 of 2"}',
                                               "{path}: --shard must be I/N (e.g. 2/4), got '2 of 2'"),
    "a cases sidecar without its list": _sidecar_written("cases", '{"results": 3}', "{path}: no list of results"),
    "no benchmarks.json": _benchmarks_json(None, "{path}: not readable (No such file or directory)"),
    "a truncated benchmarks.json": _benchmarks_json("{", "{path}: not readable JSON (not complete JSON (truncated?): "
                                                    "Expecting property name enclosed in double quotes (line 1, "
                                                    "column 2))"),
    "a benchmarks.json list": _benchmarks_json("[]", "{path}: not the JSON object asv writes"),
    "a shard missing": _missing_shard,
    "another python": _header,
    "another host": _machine,
    "another file name": _file_name,
    "a cases sidecar in one shard only": _cases_sidecar,
}


@pytest.mark.parametrize("setup", SETS.values(), ids=SETS)
def test_shard_stores_that_are_no_set_of_one_record_are_refused_naming_why(tmp_path, setup):
    shards, message = setup(tmp_path)
    with pytest.raises(StoreError) as raised:
        merge_shards(shards, tmp_path / "into", fx.MACHINE, FULL_HEAD)
    assert str(raised.value) == message
    assert not (tmp_path / "into").exists()


def test_shards_of_other_benchmarks_are_refused_naming_what_differs(tmp_path):
    shards = split(tmp_path, 2)
    edit(results_path(shards[1], FULL_HEAD), lambda data: data["results"].pop(BENCH_TFLOPS))
    with pytest.raises(StoreError) as raised:
        merge_shards(shards, tmp_path / "into", fx.MACHINE, FULL_HEAD)
    assert str(raised.value) == (f"shard 2/2 ({shards[1]}): benchmarks differ from shard 1/2 ({shards[0]})'s: only "
                                 f"here [], only there ['{BENCH_TFLOPS}']")


def test_a_merge_that_does_not_read_back_names_its_private_staging_folder(tmp_path, monkeypatch):
    """The staged record lives in a temporary `mlagate-merge-*` folder, as asv's results directory `results`."""
    import mlagate.store.merge as merge

    merge_row = merge._merge_row

    def one_case_expected_failed(name, shards, columns):
        row, expected = merge_row(name, shards, columns)
        return row, {**expected, next(iter(expected)): Entry("failed")}

    monkeypatch.setattr(merge, "_merge_row", one_case_expected_failed)
    with pytest.raises(StoreError) as raised:
        merge_shards(split(tmp_path, 2), tmp_path / "into", fx.MACHINE, FULL_HEAD)
    assert re.fullmatch(rf"{re.escape(tempfile.gettempdir())}/mlagate-merge-[^/]+/results/h200: the merged results "
                        r"do not read back as the shards' \(\[\]\)", str(raised.value))

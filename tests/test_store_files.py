"""The store's files as written and refused: a sidecar's text, the refusal of a commit already recorded, and
what a results-branch push counts as a change (git status -z, renames, mlagate's control files)."""

import json

import pytest

import gate_fixtures as fx
from mlagate.store import files
from mlagate.store.branch import commit_branch
from mlagate.store.errors import StoreError
from mlagate.store.results import Store, refuse_recorded
from mlagate.store.results_file import BENCH_TFLOPS, BENCH_TIME, Entry, parse_results_file
from test_store import _branch, git


def test_a_sidecar_is_json_indented_by_one_space_one_value_a_line(tmp_path):
    """The form every recorded sidecar has on the results branch: a diff of two records' sidecars reads by line."""
    path = Store(tmp_path).write_sidecar("m", "a" * 40, "env", {"gpu": "NVIDIA H200", "clocks": [1980, 1755]})
    assert path == tmp_path / "m" / "aaaaaaaa-env.sidecar"
    assert path.read_text() == '{\n "gpu": "NVIDIA H200",\n "clocks": [\n  1980,\n  1755\n ]\n}'


def test_a_commit_already_recorded_is_refused_with_the_whole_message(tmp_path):
    refuse_recorded(fx.RESULTS, fx.MACHINE, "c" * 40)  # not recorded: no error
    refuse_recorded(tmp_path / "empty", fx.MACHINE, fx.BASE)  # nor in a store that does not exist yet
    with pytest.raises(StoreError) as raised:
        refuse_recorded(fx.RESULTS, fx.MACHINE, fx.BASE)
    assert str(raised.value) == (f"{fx.RESULTS / fx.MACHINE}: b292e892 is already recorded on 'h200'; the store is "
                                 "append-only (record a new commit)")


# -- what a push counts as a change -------------------------------------------------------------------

def test_a_store_that_only_took_its_lock_has_nothing_to_push(tmp_path):
    """A record that took the lock of a new store and stopped: its folder holds only mlagate's control file,
    so the push finds nothing new (git's untracked folder is looked into, not counted as a change)."""
    branch = _branch(tmp_path)
    with files.store_lock(branch / "results" / "new-store"):
        pass
    assert [p.name for p in (branch / "results" / "new-store").iterdir()] == [files.LOCK]
    assert commit_branch(branch, "nothing", push=False) is False


def test_a_renamed_results_file_is_refused_naming_it_once(tmp_path):
    """git status -z gives a rename's new path, then its old one: the old one is no change of its own, and
    the entries after it are read as they are (an added file next to it is no refusal)."""
    branch = _branch(tmp_path)
    folder = branch / "results" / "m"
    folder.mkdir(parents=True)
    (folder / "aaaaaaaa-existing.json").write_text("{}")
    assert commit_branch(branch, "one", push=False) is True
    git(branch, "mv", "results/m/aaaaaaaa-existing.json", "results/m/bbbbbbbb-existing.json")
    (folder / "cccccccc-existing.json").write_text("{}")
    with pytest.raises(StoreError) as raised:
        commit_branch(branch, "renamed", push=False)
    assert str(raised.value) == (f"{folder / 'bbbbbbbb-existing.json'}: modified, not only added (1 file(s) modified "
                                 "or deleted: results/m/bbbbbbbb-existing.json); results files and sidecars are "
                                 "append-only")


@pytest.mark.parametrize("text, why", [('{"written": 1}', "KeyError: 'files'"),
                                       ('{"files": [1]}', "TypeError: files: a list of entries, got [1]")])
def test_a_journal_of_the_wrong_shape_is_refused_naming_what_is_wrong_and_what_to_do(tmp_path, text, why):
    (tmp_path / files.JOURNAL).write_text(text)
    with pytest.raises(StoreError) as refused:
        files.read_journal(tmp_path)
    journal = tmp_path / files.JOURNAL
    assert str(refused.value) == f"{journal}: unreadable install journal ({why}); move it away to go on"


# -- a results file read: each refusal's whole message ------------------------------------------------

A = "ab" + "0" * 38
PARAMS = [["'tilelang-hopper'"], ["64", "128"], ["4096"], ["'float16'"], ["128"]]  # two cases: b=64, b=128
WORKLOAD_PARAMS = [*PARAMS, ["1"], ["''"], ["'ragged-4k@ab'"]]
CASE_64 = ("tilelang-hopper", 64, 4096, "float16", 128, 1, "float16", "dense")
LABEL_64 = "tilelang-hopper h=128 b=64 s=4096 float16"
OTHER = "mla_decode.Other.track_x"  # a benchmark mlagate does not record: any finite number, no bounds
TIME_WORKLOAD = "mla_decode.TimeWorkload.time_decode"


def _results(results=None, **header) -> dict:
    """An asv 0.6 results file of commit A: by default one time benchmark, its two cases measured."""
    data = {"commit_hash": A, "env_name": "e", "date": 1700000000000, "params": {}, "requirements": {},
            "result_columns": ["result", "params", "version", "samples"],
            "results": {BENCH_TIME: [[1e-4, 2e-4], PARAMS, "v", [[1e-4, 1.1e-4], None]]} if results is None
            else results, "durations": {}, "version": 2}
    return {**data, **header}


def _write(folder, data):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{A[:8]}-e.json"
    path.write_text(json.dumps(data))
    return path


def _refusal(tmp_path, data) -> str:
    """What parse_results_file says of ``data``, after the prefix that names the file."""
    path = _write(tmp_path, data)
    with pytest.raises(StoreError) as raised:
        parse_results_file(path)
    prefix = f"{path}: not a valid asv results file: "
    assert str(raised.value).startswith(prefix)
    return str(raised.value).removeprefix(prefix)


@pytest.mark.parametrize("data, message", [
    ([], "a JSON list, not an object"),
    (_results(commit_hash="abc"), "commit_hash 'abc' is not a full commit hash"),
    (_results(date=-1), "date -1 is not a timestamp"),
    (_results(result_columns=["result"]), "result_columns ['result'] lack result and params"),  # a list, no params
    (_results(results=[]), "results: a list, not an object"),
], ids=["not-an-object", "commit_hash", "date", "result_columns", "results"])
def test_a_results_file_with_a_bad_header_is_refused_naming_the_key(tmp_path, data, message):
    assert _refusal(tmp_path, data) == message


@pytest.mark.parametrize("row, message", [
    ({}, f"{BENCH_TIME}: a dict where asv writes a list of columns"),
    ([[1e-4], [["'a'"], "64"]], """params must be a list of lists, got [["'a'"], '64']"""),  # a list, one item not
    ([[1e-4, 2e-4], [*PARAMS[:1], ["64", "64"], *PARAMS[2:4]]],
     """params repeat a value: [["'tilelang-hopper'"], ['64', '64'], ['4096'], ["'float16'"], ['128'], ['1'], """
     """["''"], ["'dense'"]]"""),
    ([[1e-4], [*PARAMS[:1], [64], *PARAMS[2:4]]], "parameter batch: 64 is not a positive integer"),  # not a str
    ([[1e-4], [*PARAMS[:1], ["0"], *PARAMS[2:4]]], "parameter batch: '0' is not a positive integer"),
    ([[1e-4], [["1"], *PARAMS[1:4]]], "parameter impl: '1' is not a quoted name"),
    ([[1e-4], [*PARAMS[:1], ["64"], *PARAMS[2:], ["1"], ["'int4'"], ["'dense'"]]],
     "parameter kv_dtype: 'int4' is not a dtype (float16, bfloat16, float32, float8_e4m3fn, float8_e4m3fnuz)"),
    ([[1e-4], PARAMS], f"{BENCH_TIME} results: 1 where 2 per-case values go"),
    (["ab", PARAMS], f"{BENCH_TIME} results: str where 2 per-case values go"),  # a str of the right length
    ([[1e-4, 2e-4], PARAMS, "v", [None]], f"{BENCH_TIME} samples: 1 where 2 per-case values go"),
    ([None, PARAMS], f"{BENCH_TIME}: no results"),
], ids=["row", "params-list", "params-repeat", "batch-int", "batch-zero", "impl", "kv_dtype", "results-short",
        "results-str", "samples-short", "no-results"])
def test_a_benchmark_row_asv_never_writes_is_refused_naming_what_is_wrong(tmp_path, row, message):
    assert _refusal(tmp_path, _results({BENCH_TIME: row})) == message


def test_a_workload_benchmark_without_a_workload_is_refused_naming_the_parameters(tmp_path):
    assert _refusal(tmp_path, _results({TIME_WORKLOAD: [[1e-4, 2e-4], PARAMS]})) == (
        f"""{TIME_WORKLOAD}: params [["'tilelang-hopper'"], ['64', '128'], ['4096'], ["'float16'"], ['128']] do not """
        "name a workload (impl, batch, seqlen, dtype, heads, q_len, kv_dtype, workload)")


@pytest.mark.parametrize("value, samples, message", [
    (0.0, None, "value 0.0 is not a positive finite number"),  # not 'outside the physical bounds'
    (-1.0, None, "value -1.0 is not a positive finite number"),
    (10**400, None, f"value 1{'0' * 59} is not a positive finite number"),  # an int past float's range
    (100.0, None, "value 100.0 is outside the physical bounds [1e-09, 10]s"),
    (1e-4, [0.0, 1e-4], "sample 0 of 2 is 0.0, not a positive finite number"),
    (1e-4, [1e-4, 100.0], "sample 1 of 2 is 100.0, outside the physical bounds [1e-09, 10]s"),
], ids=["zero", "negative", "huge-int", "out-of-bounds", "sample-zero", "sample-out-of-bounds"])
def test_a_time_that_is_no_positive_physical_number_is_refused_naming_the_case(tmp_path, value, samples, message):
    row = [[value, 2e-4], PARAMS, "v", [samples, None]]
    assert _refusal(tmp_path, _results({BENCH_TIME: row})) == f"{BENCH_TIME} {LABEL_64}: {message}"


@pytest.mark.parametrize("value, samples, message", [
    ("x", None, "value 'x' is not a finite number"),
    (1.0, ["x"], "sample 0 of 1 is 'x', not a finite number"),
], ids=["value", "sample"])
def test_another_benchmark_s_value_need_only_be_finite_and_its_refusal_says_so(tmp_path, value, samples, message):
    assert _refusal(tmp_path, _results({OTHER: [[value, 2e-4], PARAMS, "v", [samples, None]]})) == (
        f"{OTHER} {LABEL_64}: {message}")


def test_another_benchmark_reads_zero_and_negative_values(tmp_path):
    commit, date, benchmarks = parse_results_file(_write(tmp_path, _results({OTHER: [[-1.0, 0.0], PARAMS]})))
    assert (commit, date) == (A, 1700000000000)
    assert benchmarks == {OTHER: {CASE_64: Entry("ok", -1.0), (*CASE_64[:1], 128, *CASE_64[2:]): Entry("ok", 0.0)}}


def test_a_workload_time_is_bounded_as_the_dense_time_is(tmp_path):
    """A workload benchmark is read as its dense measure: a time, positive (and within the physical bounds)."""
    assert _refusal(tmp_path, _results({TIME_WORKLOAD: [[0.0, 2e-4], WORKLOAD_PARAMS]})) == (
        f"{TIME_WORKLOAD} {LABEL_64} ragged-4k: value 0.0 is not a positive finite number")


def test_a_results_file_that_cannot_be_read_is_refused_naming_the_os_error(tmp_path):
    with pytest.raises(StoreError) as raised:
        parse_results_file(tmp_path)  # a folder: an OSError, not a JSON error
    assert str(raised.value) == f"{tmp_path}: not readable (Is a directory)"


# -- TFLOPs and latency of one case agree ------------------------------------------------------------

# tilelang-hopper h=128 b=64 s=4096 in 100 us: flops(64, 128, 4096) = 73014444032, so 730.14444032 TFLOPs
IMPLIED_64 = 730.14444032


def test_tflops_agree_within_one_percent(tmp_path):
    """1% is the tolerance: TFLOPs 0.9% above what the latency implies read, 1.1% above are refused."""
    for share, refused in ((1.009, False), (1.011, True)):
        tflops = IMPLIED_64 * share
        data = _results({BENCH_TIME: [[1e-4], [*PARAMS[:1], ["64"], *PARAMS[2:]]],
                         BENCH_TFLOPS: [[tflops], [*PARAMS[:1], ["64"], *PARAMS[2:]]]})
        if refused:
            assert _refusal(tmp_path, data).startswith(f"{LABEL_64}: {tflops:.1f} TFLOPs recorded")
        else:
            assert parse_results_file(_write(tmp_path, data))[2][BENCH_TFLOPS] == {CASE_64: Entry("ok", tflops)}


def test_tflops_of_several_query_tokens_count_each_token(tmp_path):
    params = [*PARAMS[:1], ["64"], *PARAMS[2:], ["2"]]  # s_q=2: twice the work of one token in the same time
    data = _results({BENCH_TIME: [[1e-4], params], BENCH_TFLOPS: [[2 * IMPLIED_64], params]})
    key = (*CASE_64[:5], 2, *CASE_64[6:])
    assert parse_results_file(_write(tmp_path, data))[2] == {BENCH_TIME: {key: Entry("ok", 1e-4)},
                                                             BENCH_TFLOPS: {key: Entry("ok", 2 * IMPLIED_64)}}


def test_a_case_without_a_latency_does_not_end_the_agreement_check(tmp_path):
    """b=64's time failed (nothing to check it against); b=128, after it, is still checked."""
    data = _results({BENCH_TIME: [[None, 2e-4], PARAMS], BENCH_TFLOPS: [[1.0, IMPLIED_64 * 1.3], PARAMS]})
    assert _refusal(tmp_path, data) == (
        "tilelang-hopper h=128 b=128 s=4096 float16: 949.2 TFLOPs recorded, but its median latency 200 us implies "
        "730.1 (off by more than 1%): TFLOPs and latency were not measured as one")


def test_tflops_that_disagree_name_the_latency_in_microseconds(tmp_path):
    """123.449995 us reads 123.4 to four digits (a latency a millionth larger would read 123.5)."""
    data = _results({BENCH_TIME: [[1.23449995e-4, 2e-4], PARAMS], BENCH_TFLOPS: [[768.9, IMPLIED_64], PARAMS]})
    assert _refusal(tmp_path, data) == (
        f"{LABEL_64}: 768.9 TFLOPs recorded, but its median latency 123.4 us implies 591.4 (off by more than 1%): "
        "TFLOPs and latency were not measured as one")


# -- a machine's folder: asv's machine.json, and one case in two files ---------------------------------

@pytest.mark.parametrize("damage, results, reason", [
    (lambda p: None, True, "missing (asv writes it with a machine's first results): the folder is damaged; restore "
                           "machine.json from the results branch"),
    (lambda p: p.mkdir(), True, "not readable (Is a directory); restore it from the results branch"),
    (lambda p: p.write_text("[]"), True, "a JSON list, not asv's machine object"),
    (lambda p: p.write_text("[]"), False, "a JSON list, not asv's machine object"),  # checked with no results yet
], ids=["missing", "a-folder", "a-list", "a-list-alone"])
def test_a_damaged_machine_json_is_refused_naming_it(tmp_path, damage, results, reason):
    folder = tmp_path / "m"
    folder.mkdir()
    if results:
        _write(folder, _results())
    damage(folder / "machine.json")
    with pytest.raises(StoreError) as raised:
        Store(tmp_path).load_all("m")
    assert str(raised.value) == f"{folder / 'machine.json'}: {reason}"


def test_cases_in_two_files_of_one_commit_name_the_same_one_each_time(tmp_path):
    """Of the cases both files hold, the one named is the least as text (b=128 before b=64), not as a tuple."""
    folder = tmp_path / "m"
    first = _write(folder, _results())
    (folder / "machine.json").write_text("{}")
    second = first.with_name(f"{A[:8]}-other.json")
    second.write_bytes(first.read_bytes())
    store = Store(tmp_path)
    assert store.load("m", A).paths == [str(first)]
    assert [(p.path, p.reason) for p in store.problems] == [
        (str(second), f"{BENCH_TIME} tilelang-hopper h=128 b=128 s=4096 float16 is also in {first}")]

"""Fail closed (issue 38): nothing to compare is an error, not "no change". Each class of input below used to
pass (exit 0) or die with a traceback; each now exits 2 naming what is missing or the file, key or option at
fault, and writes nothing. Driven through ``cli.main`` on copies of the recorded H200 store."""

import json
import math
import os
from pathlib import Path

import pytest

import gate_fixtures as fx
from mlagate import cli
from mlagate.case import PARAM_NAMES
from mlagate.cli import flags
from mlagate.store.results_file import BENCH_TIME, case_keys


@pytest.fixture(autouse=True)
def _no_ci_environment(monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)


@pytest.fixture
def root(tmp_path):
    return fx.copy_store(tmp_path)


def gate(root, out, base=fx.BASE, head=fx.DOCS, config=None) -> int:
    return cli.main([*(["--config", str(config)] if config else []), "gate", "--base", base, "--head", head,
                     "--machine", fx.MACHINE, "--results", str(root), "--platform", "cuda", "--out", str(out)])


def drop_impl(root, commit, impl):
    """Remove every case of one implementation from a copied results file (as a record without it)."""
    path = fx.results_file(root, commit)
    data = json.loads(path.read_text())
    cols = data["result_columns"]
    p_i = cols.index("params")
    per_case = [i for i, c in enumerate(cols) if c not in ("params", "version", "started_at", "duration")]
    for row in data["results"].values():
        keep = [i for i, k in enumerate(case_keys(row[p_i])) if k[0] != impl]
        for c in per_case:
            if c < len(row) and isinstance(row[c], list):
                row[c] = [row[c][i] for i in keep]
        row[p_i][PARAM_NAMES.index("impl")] = [v for v in row[p_i][0] if v != repr(impl)]
    path.write_text(json.dumps(data))


def recorded_with_grid(root, commit, grid):
    """The copy's env sidecar of ``commit`` says it was recorded with ``grid`` (the fixtures' "quick" grid
    had 128 heads when they were recorded; today's has 16)."""
    path = Path(root) / fx.MACHINE / f"{commit[:8]}-env.sidecar"
    path.write_text(json.dumps({**json.loads(path.read_text()), "grid": grid}))


def every_gated_case(root, commit, change):
    for key in case_keys(json.loads(fx.results_file(root, commit).read_text())["results"][BENCH_TIME][1]):
        if key[0] == fx.RECORDED_WITH:
            fx.edit(root, commit, BENCH_TIME, key, change)


# -- 1. an empty comparison is an error ------------------------------------------------------------------

@pytest.mark.parametrize("head, damage, message", [
    (fx.DOCS, lambda root: drop_impl(root, fx.DOCS, fx.RECORDED_WITH), "measured in head fbc171ef: nothing to compare"),
    (fx.SLOW, lambda root: drop_impl(root, fx.SLOW, fx.RECORDED_WITH), "measured in head 22e8a671: nothing to compare"),
    (fx.DOCS, lambda root: every_gated_case(root, fx.DOCS, fx.fail), "measured in head fbc171ef: nothing to compare"),
    (fx.DOCS, lambda root: every_gated_case(root, fx.BASE, fx.skip), "measured in base b292e892: nothing to compare"),
    (fx.DOCS, lambda root: (fx.drop_batch(root, fx.DOCS, 64), recorded_with_grid(root, fx.DOCS, "full")),
     "in base, not in head, and perf.yml still lists it"),
    (fx.SLOW, lambda root: (fx.drop_batch(root, fx.SLOW, 128), recorded_with_grid(root, fx.SLOW, "full")),
     "in base, not in head, and perf.yml still lists it"),
])
def test_a_gate_that_compares_nothing_on_one_side_exits_2_naming_it(root, tmp_path, capsys, head, damage, message):
    damage(root)
    assert gate(root, tmp_path / "out", head=head) == 2
    assert message in capsys.readouterr().err


def test_a_case_perf_yml_no_longer_lists_is_removed_not_missing(root, tmp_path, capsys):
    fx.drop_batch(root, fx.DOCS, 64)
    raw = fx.recorded_raw()
    raw["grid"]["full"]["batch"] = [128]  # batch 64 is no longer measured anywhere
    raw["grid"]["quick"]["batch"] = [128]
    raw["workloads"]["uniform-paged"]["batch"] = raw["workloads"]["ragged-4k"]["batch"] = [128]
    path = tmp_path / "perf.yml"
    import yaml

    path.write_text(yaml.safe_dump(raw))
    assert gate(root, tmp_path / "out", config=path) == 0
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text())
    assert {c["status"] for c in verdict["cases"] if c["case"][1] == 64} == {"removed"}


def test_bisect_without_good_on_a_bad_commit_git_does_not_know_exits_2(tmp_path, capsys):
    # the recorded commits are not in this repository: the history walk cannot run, so nothing was compared
    code = cli.main(["bisect", "--bad", fx.SLOW, "--machine", fx.MACHINE, "--results", str(fx.RESULTS),
                     "--out", str(tmp_path / "out")])
    assert code == 2 and "cannot read the first-parent history of 22e8a671f5" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("side, change", [("bad", fx.fail), ("bad", fx.skip), ("good", fx.fail),
                                          ("good", lambda v, s: (v, []))])
def test_bisect_whose_side_measured_nothing_exits_2_naming_it(root, tmp_path, capsys, side, change):
    commit = {"bad": fx.SLOW, "good": fx.BASE}[side]
    for key in case_keys(json.loads(fx.results_file(root, commit).read_text())["results"][BENCH_TIME][1]):
        if key[0].startswith("tilelang-"):
            fx.edit(root, commit, BENCH_TIME, key, change)
    code = cli.main(["bisect", "--good", fx.BASE, "--bad", fx.SLOW, "--machine", fx.MACHINE,
                     "--results", str(root), "--out", str(tmp_path / "out")])
    assert code == 2
    assert f"{side} {commit[:10]} has no TileLang case measured with samples" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# -- tune --check without a finite committed measurement -------------------------------------------------

import test_tune as tune_tests  # noqa: E402  (its fixtures: a fake GPU, a stand-in lowering, a small perf.yml)

empty_tables, fake_lowering, perf_yml = tune_tests.empty_tables, tune_tests.fake_lowering, tune_tests.perf_yml


@pytest.mark.parametrize("key, value", [("median_ms", math.nan), ("tflops", math.nan), ("median_ms", -0.1),
                                        ("median_ms", 0), ("median_ms", None), ("median_ms", "0.1"),
                                        ("tflops", math.inf), ("tflops", "104.9"), ("tflops", 0)])
def test_tune_check_without_a_finite_committed_measurement_exits_2(monkeypatch, tmp_path, perf_yml, fake_lowering,
                                                                   capsys, key, value):
    tune_tests.fake_gpu(monkeypatch, {tune_tests.N32: 40.0})
    out = tmp_path / "out"
    assert tune_tests.tune_cli(perf_yml, out) == 0
    path = out / "sm_90" / "hopper" / "quick" / "b64-s4096-h16-float16" / f"{tune_tests.DEFAULT}.json"
    record = json.loads(path.read_text())
    if value is None:
        del record["result"][key]
    else:
        record["result"][key] = value
    path.write_text(json.dumps(record))
    capsys.readouterr()
    assert tune_tests.tune_cli(perf_yml, out, "--check") == 2
    err = capsys.readouterr().err
    assert str(path) in err and f"result.{key}" in err


# -- 2. one JSON reader: duplicate keys, bad text and absurd numbers refused, the file named ---------------

def results_text(root, commit) -> str:
    path = fx.results_file(root, commit)
    return json.dumps(json.loads(path.read_text()))  # one line: its keys are where a test puts them


def slow_row_twice(root):
    """head's TimeDecode row twice: SLOW's (a real 22-31% slowdown), then base's; Python's json keeps the last."""
    slow = json.loads(results_text(root, fx.SLOW))["results"][BENCH_TIME]
    head = fx.results_file(root, fx.DOCS)
    text = results_text(root, fx.DOCS).replace('"results": {', f'"results": {{"{BENCH_TIME}": {json.dumps(slow)}, ', 1)
    head.write_text(text)
    return head


def key_twice(path_of, key, value):
    def fault(root):
        path = path_of(root)
        path.write_text(path.read_text().replace("{", f"{{{json.dumps(key)}: {json.dumps(value)}, ", 1))
        return path
    return fault


def times(factor=None, value=None):
    def change(v, samples):
        return (v, [value] * len(samples)) if value is not None else (v * factor, [s * factor for s in samples])
    return change


def on_case(commit, bench, change):
    def fault(root):
        fx.edit(root, commit, bench, fx.HOPPER_64, change)
        return fx.results_file(root, commit)
    return fault


def env(root):
    return root / fx.MACHINE / f"{fx.DOCS[:8]}-env.sidecar"


RATIO = "mla_decode.Throughput.track_vendor_ratio"
STORE_JSON = {
    "a TimeDecode row twice": (slow_row_twice, f"{BENCH_TIME!r} appears twice"),
    "commit_hash twice": (key_twice(lambda r: fx.results_file(r, fx.DOCS), "commit_hash", fx.SLOW),
                          "'commit_hash' appears twice"),
    "env platform twice": (key_twice(lambda r: env(r), "platform", "rocm"), "'platform' appears twice"),
    "base samples 1e308": (on_case(fx.BASE, BENCH_TIME, times(value=1e308)), "outside the physical bounds"),
    "head samples 5e-324": (on_case(fx.DOCS, BENCH_TIME, times(value=5e-324)), "outside the physical bounds"),
    "head samples 1e308": (on_case(fx.DOCS, BENCH_TIME, times(value=1e308)), "outside the physical bounds"),
    "a vendor ratio of 1e308": (on_case(fx.DOCS, RATIO, lambda v, s: (1e308, s)), "outside the physical bounds"),
    "a vendor ratio of 1e-9": (on_case(fx.DOCS, RATIO, lambda v, s: (1e-9, s)), "outside the physical bounds"),
    "a latency of 20 s": (on_case(fx.DOCS, BENCH_TIME, lambda v, s: (20.0, s)), "outside the physical bounds"),
    "env nested 50k deep": (lambda r: (env(r).write_text("[" * 50_000 + "]" * 50_000), env(r))[1], "nested deeper"),
    "env truncated": (lambda r: (env(r).write_text(env(r).read_text()[:40]), env(r))[1], "truncated"),
}


@pytest.mark.parametrize("fault", STORE_JSON.values(), ids=STORE_JSON)
def test_a_results_file_or_sidecar_the_json_reader_refuses_exits_2_naming_it(root, tmp_path, capsys, fault):
    damage, message = fault
    path = damage(root)
    code = gate(root, tmp_path / "out")
    err = capsys.readouterr().err
    assert code == 2 and str(path) in err and message in err, err
    assert not (tmp_path / "out").exists()


def deep(n=50_000) -> str:
    return "[" * n + "]" * n


NOISE = {
    "a list": ("[]", "not a noise study"),
    "{}": ("{}", "not a noise study"),
    "no samples": ('{"c": {"mlagate": [1.0]}}', "c.samples: must be at least 2 rounds"),
    "NaN samples": ('{"c": {"samples": [[NaN], [1.0], [1.0]]}}', "c.samples[0]: nan is not a time"),
    "negative samples": ('{"c": {"samples": [[1.0], [-1.0], [1.0]]}}', "c.samples[1]: -1.0 is not a time"),
    "a key twice": ('{"c": {"samples": [[1.0], [1.0]]}, "c": {}}', "'c' appears twice"),
    "truncated": ('{"c": {"samples": [[1.0', "truncated"),
    "not UTF-8": (b'{"c\xff": 1}', "not UTF-8"),
    "50k deep": (deep(), "nested deeper"),
}


@pytest.mark.parametrize("content, message", NOISE.values(), ids=NOISE)
def test_calibrate_refuses_a_bad_noise_file_naming_it(tmp_path, capsys, content, message):
    path = tmp_path / "noise.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    out = tmp_path / "out"
    assert cli.main(["calibrate", "--noise", str(path), "--trials", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and message in err and "Traceback" not in err, err
    assert not out.exists()


ROW = {"label": "c", "step": 1.0, "injected": 0.01, "status": "pass"}
LADDER = {
    "a row's injected a string": (json.dumps({"table": [{**ROW, "injected": "1%"}]}), "table[0].injected"),
    "a row's step null": (json.dumps({"table": [{**ROW, "step": None}]}), "table[0].step"),
    "a row's label a number": (json.dumps({"table": [{**ROW, "label": 3}]}), "table[0]: label and status"),
    "50k deep": (deep(), "nested deeper"),
    "a key twice": ('{"table": [], "table": []}', "'table' appears twice"),
}


@pytest.mark.parametrize("content, message", LADDER.values(), ids=LADDER)
def test_calibrate_refuses_a_bad_ladder_file_naming_it(tmp_path, capsys, content, message):
    path = tmp_path / "ladder.json"
    path.write_text(content)
    out = tmp_path / "out"
    assert cli.main(["calibrate", "--ladder", str(path), "--trials", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and message in err and "Traceback" not in err, err
    assert not out.exists()


@pytest.mark.parametrize("trials", ["0", "-5"])
def test_calibrate_refuses_trials_below_one(tmp_path, capsys, trials):
    assert cli.main(["calibrate", "--trials", trials, "--out", str(tmp_path / "out")]) == 2
    assert "--trials: must be at least 1" in capsys.readouterr().err and not (tmp_path / "out").exists()


CALIBRATION = {
    "a list": ("[]", "a JSON list, not an object"),
    "truncated": ('{"run_id": "x", ', "truncated"),
    "not UTF-8": (b'{"run_id": "\xff"}', "not UTF-8"),
    "a key twice": ('{"run_id": "x", "run_id": "y"}', "'run_id' appears twice"),
    "no cases": ('{"run_id": "x"}', "cases_calibrated: must be a mapping"),
    "a median of 1e308": ('{"run_id": "x", "cases_calibrated": {"c": {"median_s": 1e308, "steps": {}}}}',
                          "cases_calibrated.c.median_s"),
    "cycles a string": ('{"run_id": "x", "cases_calibrated": {"c": {"median_s": 1e-4, "steps": {"1": '
                        '{"cycles": "9"}}}}}', "cases_calibrated.c.steps.1.cycles"),
    "50k deep": (deep(), "nested deeper"),
}


@pytest.mark.parametrize("content, message", CALIBRATION.values(), ids=CALIBRATION)
def test_a_ladder_calibration_json_that_is_not_one_is_refused_naming_it(tmp_path, content, message):
    from mlagate.ladder import run as ladder

    path = tmp_path / "calibration.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ValueError) as refused:
        ladder.read_calibration(tmp_path)
    assert str(path) in str(refused.value) and message in str(refused.value)


@pytest.mark.parametrize("content, message", [
    ('{"files": [], "files": []}', "'files' appears twice"),
    ('{"files": 3}', "files: a list of entries"),
    ('{"files": [', "truncated"),
    (deep(), "nested deeper"),
], ids=["a key twice", "files a number", "truncated", "50k deep"])
def test_a_damaged_merge_journal_is_refused_naming_it(tmp_path, content, message):
    from mlagate.store import files
    from mlagate.store.errors import StoreError

    (tmp_path / files.JOURNAL).write_text(content)
    with pytest.raises(StoreError) as refused:
        files.recover(tmp_path)
    assert str(tmp_path / files.JOURNAL) in str(refused.value) and message in str(refused.value)


def test_a_tune_candidate_with_a_key_twice_is_refused(monkeypatch, tmp_path, perf_yml, fake_lowering, capsys):
    tune_tests.fake_gpu(monkeypatch)
    out = tmp_path / "out"
    assert tune_tests.tune_cli(perf_yml, out) == 0
    path = out / "sm_90" / "hopper" / "quick" / "b64-s4096-h16-float16" / f"{tune_tests.DEFAULT}.json"
    path.write_text(path.read_text().replace("{", '{"stage": "lowered", ', 1))
    capsys.readouterr()
    assert tune_tests.tune_cli(perf_yml, out, "--check") == 2
    err = capsys.readouterr().err
    assert str(path) in err and "'stage' appears twice" in err


# -- 2b. a tune space or tuned table the kernel would refuse is refused where it is read ------------------

TUNE_SPACE = {  # perf.yml text change -> the key named
    "block_N not a multiple of 16": (("      block_N: [32, 64, 128]", "      block_N: [7]"),
                                     "tune.hopper.space.block_N: every entry must be a multiple of 16, got 7"),
    "block_H not a multiple of 16": (("      block_H: [16, 32, 64]", "      block_H: [16, 24]"),
                                     "tune.cdna3.space.block_H: every entry must be a multiple of 16, got 24"),
    "threads not whole warps": (("threads: [128, 256]\n      num_stages", "threads: [100]\n      num_stages"),
                                "tune.hopper.space.threads: every entry must be a multiple of 32, got 100"),
    "num_stages past the rule": (("      num_stages: [1, 2]", "      num_stages: [2, 9]"),
                                 "tune.hopper.space.num_stages: every entry must be <= 4, got 9"),
    "policy Diagonal": (("      policy: [FullCol, FullRow]", "      policy: [Diagonal]"),
                        "tune.hopper.space.policy: 'Diagonal' is not one of FullRow, FullCol, Square"),
    "hopper on gfx942": (("  hopper:\n    arch: sm_90", "  hopper:\n    arch: gfx942"),
                         "tune.hopper.arch: 'gfx942' is not the hopper family's architecture (sm_90)"),
    "cdna3 on sm_90": (("  cdna3:\n    arch: gfx942", "  cdna3:\n    arch: sm_90"),
                       "tune.cdna3.arch: 'sm_90' is not the cdna3 family's architecture (gfx942)"),
}


@pytest.mark.parametrize("change, message", TUNE_SPACE.values(), ids=TUNE_SPACE)
def test_config_load_refuses_a_tune_space_the_kernel_would_refuse_naming_the_key(tmp_path, capsys, change, message):
    from mlagate import config

    text = config.DEFAULT_PATH.read_text()
    assert text.count(change[0]) == 1, change[0]
    perf = tmp_path / "perf.yml"
    perf.write_text(text.replace(*change))
    with pytest.raises(config.ConfigError) as refused:
        config.load(perf)
    assert str(refused.value) == f"{perf}: {message}"
    assert cli.main(["--config", str(perf), "gate", "--base", fx.BASE, "--head", fx.DOCS, "--results",
                     str(tmp_path / "none"), "--out", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err and sorted(tmp_path.iterdir()) == [perf]


def test_config_load_does_not_import_tilelang():
    # The kernel's rules perf.yml is checked with live in kernels/tile_rules.py: reading them costs no TileLang.
    import subprocess
    import sys

    code = ("import sys; from mlagate import config; config.load(); "
            "print(sorted(m for m in sys.modules if 'tilelang' in m))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


TABLES = {  # what a table says -> what the refusal names, read for sm_90 (a hopper GPU)
    "the cdna3 family in an sm_90 table": ("version: 2\narch: sm_90\nfamilies:\n  cdna3: []\n",
                                           "families.cdna3: the cdna3 family is gfx942's, not sm_90's"),
    "a gfx942 table": ("version: 2\narch: gfx942\nfamilies:\n  hopper: []\n",
                       "arch: must be sm_90, the architecture it is read for, got 'gfx942'"),
    "no arch": ("version: 2\nfamilies:\n  hopper: []\n", "arch: must be sm_90, the architecture it is read for"),
    "an older table's cdna3": ("version: 1\nfamilies:\n  cdna3: []\n",
                               "families.cdna3: the cdna3 family is gfx942's, not sm_90's"),
}


@pytest.mark.parametrize("text, message", TABLES.values(), ids=TABLES)
def test_a_tuned_table_of_another_architecture_is_refused_naming_the_file(tmp_path, text, message):
    from mlagate.kernels import tuned

    path = tmp_path / "sm_90.yaml"
    path.write_text(text)
    with pytest.raises(ValueError) as refused:
        tuned.load_table("sm_90a", path)
    assert str(refused.value).startswith(f"{path}: {message}"), str(refused.value)


MEASURED = {"tflops NaN": ("tflops: .nan", "measured.tflops: nan is not a number within [1e-06, 100000]"),
            "tflops inf": ("tflops: .inf", "measured.tflops: inf is not a number"),
            "tflops a string": ("tflops: '104.9'", "measured.tflops: '104.9' is not a number"),
            "tflops null": ("tflops: null", "measured.tflops: None is not a number"),
            "tflops 0": ("tflops: 0", "measured.tflops: 0 is not a number"),
            "tflops negative": ("tflops: -3.5", "measured.tflops: -3.5 is not a number"),
            "tflops past a GPU": ("tflops: 1.0e+9", "measured.tflops: 1000000000.0 is not a number"),
            "default_tflops NaN": ("tflops: 1.0, default_tflops: .nan", "measured.default_tflops: nan is not"),
            "median_us negative": ("tflops: 1.0, median_us: -1", "measured.median_us: -1 is not a number")}


@pytest.mark.parametrize("measured, message", MEASURED.values(), ids=MEASURED)
def test_a_tuned_tables_measured_numbers_are_bounded_naming_the_key(tmp_path, measured, message):
    from mlagate.kernels import tuned

    path = tmp_path / "sm_90.yaml"
    path.write_text("version: 2\narch: sm_90\nfamilies:\n  hopper:\n"
                    "    - shape: {batch: 64, seqlen: 4096, heads: 16, dtype: float16}\n"
                    "      config: {block_N: 64, block_H: 64, num_split: 2, threads: 256, num_stages: 2, "
                    "policy: FullCol}\n"
                    f"      measured: {{{measured}}}\n")
    with pytest.raises(ValueError) as refused:
        tuned.load_table("sm_90", path)
    assert str(refused.value).startswith(f"{path}: families.hopper[0].measured."), str(refused.value)
    assert message in str(refused.value)


def test_an_older_commits_table_without_its_arch_still_reads():
    from mlagate.kernels import tuned

    committed = Path(__file__).parent.parent / "kernels" / "tuned" / "sm_90.yaml"
    text = committed.read_text().replace("version: 2\narch: sm_90\n", "version: 1\n")
    assert tuned.parse_table(text, "sm_90", "sm_90.yaml at 1a2b3c") == tuned.load_table("sm_90", committed)
    assert len(tuned.load_table("sm_90", committed)["hopper"]) >= 2


# -- 3. the newer commands' inputs: each refusal names its option or file, exit 2, no traceback -------------

EMPTY_REVISION = {
    "gate --base": (["gate", "--base", "", "--head", fx.DOCS, "--results", "r"], "--base: an empty revision"),
    "gate --head": (["gate", "--base", fx.BASE, "--head", " ", "--results", "r"], "--head: an empty revision"),
    "bisect --bad": (["bisect", "--bad", "", "--machine", fx.MACHINE, "--results", "r"], "--bad: an empty revision"),
    "bisect --good": (["bisect", "--good", "", "--machine", fx.MACHINE, "--results", "r"],
                      "--good: an empty revision"),
    "merge --commit": (["results", "merge", "--machine", "m", "--commit", "", "--into", "r", "s"],
                       "--commit: an empty revision"),
    "record --rev": (["record", "--rev", "", "--machine", "m", "--results", "r"], "--rev: an empty revision"),
}


@pytest.mark.parametrize("argv, message", EMPTY_REVISION.values(), ids=EMPTY_REVISION)
def test_an_empty_revision_is_refused_naming_its_option(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["lab/h200", "..", ".h200", "h 200", ""])
@pytest.mark.parametrize("argv", [["record", "--rev", "HEAD", "--results", "r"], ["gate", "--base", fx.BASE, "--head",
                                  fx.DOCS, "--results", "r"], ["bisect", "--bad", fx.SLOW, "--results", "r"]],
                         ids=["record", "gate", "bisect"])
def test_a_machine_name_that_is_no_single_folder_is_refused(tmp_path, monkeypatch, capsys, argv, name):
    """A machine is one folder of the store: a '/' would nest records Store.machines() never lists, '..' leave it."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as refused:  # argparse's own exit: its usage line, then the option's error
        cli.main([*argv, "--machine", name])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --machine: {name!r} is not a machine name" in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []
    assert flags.machine_name("h200-sxm_1.node") == "h200-sxm_1.node"


def test_bisect_on_a_truncated_results_file_names_it_not_a_missing_gpu(root, tmp_path, capsys):
    path = fx.results_file(root, fx.SLOW)
    path.write_text(path.read_text()[:200])
    code = cli.main(["bisect", "--good", fx.BASE, "--bad", fx.SLOW, "--machine", fx.MACHINE, "--results", str(root),
                     "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and f"{path}: corrupt results file of bad 22e8a671" in err and "no GPU" not in err
    assert not (tmp_path / "out").exists()


def test_report_on_a_truncated_results_file_exits_2_writing_nothing(root, tmp_path, capsys):
    path = fx.results_file(root, fx.DOCS)
    path.write_text(path.read_text()[:200])
    assert cli.main(["report", "--results", str(root), "--out", str(tmp_path / "out")]) == 2
    assert str(path) in capsys.readouterr().err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("target", ["cuda:sm_XX", "cuda:sm_", "hip:gfxZZ", "cuda:sm_90;rm"])
def test_build_refuses_a_target_tilelang_cannot_name(tmp_path, capsys, target):
    assert cli.main(["build", "--target", target, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"--target {target!r}: expected cuda:<sm_XX> or hip:<gfxNNN>" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("gpus", ["-1", "0,0", "1,-2"])
def test_gpus_must_be_distinct_indices(gpus):
    from mlagate.measure import grid

    with pytest.raises(ValueError, match=r"--gpus .*: GPU indices are distinct numbers >= 0"):
        grid.parse_gpus(gpus)


# -- 4. nothing written on an error path; outputs whole or not at all -------------------------------------

def test_tune_writes_nothing_before_refusing_a_damaged_candidate(monkeypatch, tmp_path, perf_yml, fake_lowering,
                                                                  capsys):
    tune_tests.fake_gpu(monkeypatch)
    folder = tmp_path / "out" / "sm_90" / "hopper" / "quick"
    candidate = folder / "b64-s4096-h16-float16" / f"{tune_tests.DEFAULT}.json"
    candidate.parent.mkdir(parents=True)
    candidate.write_text('{"candidate": ')
    assert tune_tests.tune_cli(perf_yml, tmp_path / "out") == 2
    assert str(candidate) in capsys.readouterr().err
    assert sorted(p.name for p in folder.rglob("*")) == ["b64-s4096-h16-float16", candidate.name]


def read_set(out, names):
    """The files ``names`` of the output set at ``out`` as one reader sees them: the folder opened once, each file
    read through it (a set swapped meanwhile is left whole for this reader); None while there is no set."""
    try:
        fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return None
    try:
        texts = []
        for name in names:
            with open(name, encoding="utf-8", opener=lambda path, flags: os.open(path, flags, dir_fd=fd)) as f:
                texts.append(f.read())
        return texts
    except FileNotFoundError:  # the set was replaced and removed while this reader held it: poll again
        return None
    finally:
        os.close(fd)


@pytest.mark.slow
def test_concurrent_gates_into_one_out_never_show_a_torn_or_mixed_set(root, tmp_path):
    """Gates of two heads written again and again into one --out (8 runs each) while a reader polls: every
    verdict.json it reads is whole JSON, and the gate.md beside it is the same run's (it names the same head)."""
    import subprocess
    import sys
    import threading
    import time

    out = tmp_path / "out"
    argv = [sys.executable, "-m", "mlagate.cli", "--config", str(fx.recorded_perf_yml(tmp_path)), "gate", "--base",
            fx.BASE, "--machine", fx.MACHINE, "--results", str(root), "--platform", "cuda", "--out", str(out)]
    loop = 'for i in $(seq 8); do "$@" >/dev/null 2>&1; [ $? -le 1 ] || exit 9; done'  # 1: SLOW is a regression
    writers = [subprocess.Popen(["bash", "-c", loop, "gates", *argv, "--head", head]) for head in (fx.DOCS, fx.SLOW)]
    seen, mixed, torn, done = set(), [], [], threading.Event()

    def poll():
        while not done.is_set():
            found = read_set(out, ("verdict.json", "gate.md"))
            time.sleep(0.002)  # the writers need the CPU more than the reader does
            if found is None:
                continue
            try:
                head = json.loads(found[0])["head"]
            except ValueError:
                torn.append(found[0][-80:])
                continue
            seen.add(head)
            if f"head `{head[:10]}`" not in found[1]:
                mixed.append(head)

    reader = threading.Thread(target=poll)
    reader.start()
    try:
        codes = [w.wait() for w in writers]
    finally:
        done.set()
        reader.join()
    assert codes == [0, 0] and seen == {fx.DOCS, fx.SLOW}
    assert (torn, mixed) == ([], [])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "perf-as-recorded.yml", "results"]  # no leftovers


OUT_SETS = {  # a command whose --out is one output set, replaced whole
    "gate": lambda root, out: ["gate", "--base", fx.BASE, "--head", fx.DOCS, "--machine", fx.MACHINE, "--results",
                               str(root), "--platform", "cuda", "--out", str(out)],
    "report": lambda root, out: ["report", "--results", str(root), "--out", str(out)],
    "calibrate": lambda root, out: ["calibrate", "--trials", "2", "--out", str(out)],
    "bisect": lambda root, out: ["bisect", "--good", fx.BASE, "--bad", fx.DOCS, "--machine", fx.MACHINE,
                                 "--results", str(root), "--out", str(out)],
    "demo": lambda root, out: ["demo", "--out", str(out.parent)],  # out/gate, as the issue found it
}


@pytest.mark.parametrize("argv", OUT_SETS.values(), ids=OUT_SETS)
def test_an_out_that_is_not_an_output_set_is_refused_before_anything_is_written(root, tmp_path, capsys, argv):
    out = tmp_path / "out" / "gate"
    (out / "verdict.json").mkdir(parents=True)  # e.g. a folder where a file would go
    assert cli.main(argv(root, out)) == 2
    assert f"{out}: holds files that are not an mlagate output set" in capsys.readouterr().err
    assert [p.relative_to(tmp_path) for p in sorted((tmp_path / "out").rglob("*"))] == [
        Path("out/gate"), Path("out/gate/verdict.json")]


def test_gate_refuses_an_out_that_is_not_an_output_set_writing_nothing(root, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("not the gate's")
    assert gate(root, out) == 2
    assert f"{out}: holds files that are not an mlagate output set" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    (out / "notes.txt").unlink()
    assert gate(root, out) == 0  # an empty folder is replaced; then the set is its own
    assert gate(root, out) == 0 and (out / ".mlagate-output").is_file()

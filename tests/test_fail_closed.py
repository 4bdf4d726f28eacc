"""Fail closed (issue 38): nothing to compare is an error, not "no change". Each class of input below used to
pass (exit 0) or die with a traceback; each now exits 2 naming what is missing or the file, key or option at
fault, and writes nothing. Driven through ``cli.main`` on copies of the recorded H200 store."""

import json
import math

import pytest

import gate_fixtures as fx
from mlagate import cli
from mlagate.case import PARAM_NAMES
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
    (fx.DOCS, lambda root: fx.drop_batch(root, fx.DOCS, 64), "in base, not in head, and perf.yml still lists it"),
    (fx.SLOW, lambda root: fx.drop_batch(root, fx.SLOW, 128), "in base, not in head, and perf.yml still lists it"),
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
                                        ("tflops", math.inf)])
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

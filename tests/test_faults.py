"""Fault injection: every bad input the gate can be handed ends in exit 2, names the file
(or the perf.yml key) at fault on stderr, and leaves the store and perf.yml byte-identical.

The gate is driven through ``cli.main`` on copies of the recorded H200 store
(``tests/fixtures/h200/results``), one copy per test.

# Bad inputs tried: 589 = STORE_FAULTS 156 + YAML_FAULTS 433 + a missing perf.yml + a corrupt
# head file under --record-missing (test_the_count_is_current keeps the two tables' sizes true).
"""

import hashlib
import json
import math
import re
import shutil
from pathlib import Path

import pytest
import yaml

import gate_fixtures as fx
from mlagate import cli, config, exits
from mlagate.case import case_label
from mlagate.decide import verdict
from mlagate.decide.verdict import EXIT_CODE, CaseVerdict, Kind, Note, Outcome, Status, Verdict
from mlagate.report.text import annotations
from mlagate.store.results_file import BENCH_RATIO, BENCH_TFLOPS, BENCH_TIME

CASE = fx.HOPPER_64
LABEL = case_label(CASE)
SIDES = {"base": fx.BASE, "head": fx.DOCS}
RAW = yaml.safe_load(config.DEFAULT_PATH.read_text())
TEXT = config.DEFAULT_PATH.read_text()


@pytest.fixture(autouse=True)
def _no_ci_environment(monkeypatch):
    """The gate appends to GitHub's job summary when it is set; these runs write nowhere but tmp."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)


def digest(folder) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def gate(root, tmp_path, *extra, base=fx.BASE, head=fx.DOCS, after=()) -> int:
    return cli.main([*extra, "gate", "--base", base, "--head", head, "--machine", fx.MACHINE,
                     "--results", str(root), "--platform", "cuda", "--out", str(tmp_path / "out"), *after])


# -- faults in the store: each takes the copied store and returns what stderr must name --------

def results_path(root, side):
    return fx.results_file(root, SIDES[side])


def rewrite(side, change):
    """change(data) edits one results file's parsed JSON in place."""
    def fault(root):
        path = results_path(root, side)
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))
        return [str(path)]
    return fault


def write_text(side, make):
    """make(text) -> the results file's new text (or bytes)."""
    def fault(root):
        path = results_path(root, side)
        new = make(path.read_bytes())
        path.write_bytes(new if isinstance(new, bytes) else new.encode())
        return [str(path)]
    return fault


def edit_case(side, bench, change):
    """change(value, samples) -> (value, samples) for the gated case; file and case must be named."""
    def fault(root):
        fx.edit(root, SIDES[side], bench, CASE, change)
        return [str(results_path(root, side)), LABEL]
    return fault


def decided(side, bench, change):
    """Damage the gate's decision reports per case (stdout and stderr name the case)."""
    def fault(root):
        fx.edit(root, SIDES[side], bench, CASE, change)
        return [LABEL]
    return fault


def remove(make_path):
    def fault(root):
        path = make_path(root)
        path.unlink()
        return [str(path)]
    return fault


def replace(make_path, content):
    def fault(root):
        path = make_path(root)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return [str(path)]
    return fault


def env_path(root):
    return root / fx.MACHINE / f"{fx.DOCS[:8]}-env.sidecar"


def machine_json(root):
    return root / fx.MACHINE / "machine.json"


def build_sidecar(side):
    return lambda root: root / fx.MACHINE / f"{SIDES[side][:8]}-build-cuda-sm_90a.sidecar"


def edit_env(change, key=None):
    """change(data) edits head's env sidecar; stderr must name the file (and ``key``, the field at fault)."""
    def fault(root):
        path = env_path(root)
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))
        return [str(path), *([key] if key else [])]
    return fault


def missing_results(side):
    def fault(root):
        results_path(root, side).unlink()
        return [str(root / fx.MACHINE), f"no {side} results"]
    return fault


def folder_like_results(side):
    def fault(root):
        folder = root / fx.MACHINE / f"{SIDES[side][:8]}-other-env.json"
        folder.mkdir()
        return [str(folder)]
    return fault


def set_param(i, values):
    def change(data):
        for row in data["results"].values():
            row[1][i] = values
    return change


def set_time_row(value):
    def change(data):
        data["results"][BENCH_TIME] = value
    return change


def drop_one_result(data):
    data["results"][BENCH_TIME][0].pop()


def key(name, value):
    def change(data):
        data[name] = value
    return change


def each_sample(value):
    return lambda v, s: (v, [value] * len(s))


def one_sample(value):
    return lambda v, s: (v, [value, *s[1:]])


def half_nan_and_slower(v, s):
    return v * 1.5, [math.nan if i % 2 else x * 1.5 for i, x in enumerate(s)]


BAD_NUMBERS = {"inf": math.inf, "-inf": -math.inf, "string": "0.00016", "bool": True, "list": [1.6e-4],
               "dict": {"s": 1.6e-4}}
BAD_TIMES = {**BAD_NUMBERS, "zero": 0.0, "negative": -1.6e-4}
BAD_SAMPLE_LISTS = {"all NaN": each_sample(math.nan), "one NaN": one_sample(math.nan),
                    "all zero": each_sample(0.0), "negative": each_sample(-1.6e-4),
                    "one inf": one_sample(math.inf), "strings": lambda v, s: (v, [str(x) for x in s]),
                    "bools": each_sample(True), "nulls": each_sample(None), "one null": one_sample(None),
                    "lists": lambda v, s: (v, [[x] for x in s]), "dicts": each_sample({}),
                    "a string": lambda v, s: (v, "1e-4,2e-4"), "a dict": lambda v, s: (v, {"0": 1e-4}),
                    "a number": lambda v, s: (v, 1.6e-4)}


def side_faults(side) -> dict:
    """Every way one commit's results file can be bad."""
    faults = {f"truncated at {pct}%": write_text(side, lambda b, pct=pct: b[: len(b) * pct // 100])
              for pct in (10, 50, 99)}
    faults.update({
        "empty": write_text(side, lambda b: b""),
        "not JSON": write_text(side, lambda b: "not json at all"),
        "not UTF-8": write_text(side, lambda b: b"\xff\xfe" + b[2:]),
        "a JSON list": write_text(side, lambda b: "[]"),
        "a JSON null": write_text(side, lambda b: "null"),
        "only a commit hash": write_text(side, lambda b: json.dumps({"commit_hash": SIDES[side]})),
        "commit hash a number": rewrite(side, key("commit_hash", 12345)),
        "commit hash empty": rewrite(side, key("commit_hash", "")),
        "date inf": rewrite(side, key("date", math.inf)),
        "date a string": rewrite(side, key("date", "yesterday")),
        "date a bool": rewrite(side, key("date", True)),
        "results a list": rewrite(side, key("results", [])),
        "result_columns a mapping": rewrite(side, key("result_columns", {"result": 0})),
        "result_columns without result": rewrite(side, lambda d: d["result_columns"].remove("result")),
        "time row a string": rewrite(side, set_time_row("x")),
        "time row a mapping": rewrite(side, set_time_row({"result": []})),
        "one result short": rewrite(side, drop_one_result),
        "batch params strings": rewrite(side, set_param(1, ["'64'", "'128'"])),
        "impl params numbers": rewrite(side, set_param(0, ["1", "2"])),
        "params not literals": rewrite(side, set_param(2, ["__import__('os')"])),
        "params a string": rewrite(side, lambda d: d["results"][BENCH_TIME].__setitem__(1, "x")),
        "inf in durations": rewrite(side, lambda d: d["durations"].update(x=math.inf)),
        "inf in a stats column": rewrite(side, lambda d: d["results"][BENCH_TIME][5].__setitem__(0, math.inf)),
    })
    faults.update({f"time value {name}": edit_case(side, BENCH_TIME, lambda v, s, x=x: (x, s))
                   for name, x in BAD_TIMES.items()})
    faults.update({f"samples {name}": edit_case(side, BENCH_TIME, change)
                   for name, change in BAD_SAMPLE_LISTS.items()})
    faults.update({f"vendor ratio {name}": edit_case(side, BENCH_RATIO, lambda v, s, x=x: (x, s))
                   for name, x in {**BAD_NUMBERS, "zero": 0.0, "negative": -0.78}.items()})
    faults.update({f"tflops {name}": edit_case(side, BENCH_TFLOPS, lambda v, s, x=x: (x, s))
                   for name, x in {"inf": math.inf, "string": "400", "zero": 0.0}.items()})
    faults["no samples"] = decided(side, BENCH_TIME, lambda v, s: (v, None))
    faults["a folder named like a results file"] = folder_like_results(side)
    return {f"{side} {name}": fault for name, fault in faults.items()}


STORE_FAULTS = {
    **side_faults("base"),
    **side_faults("head"),
    # the rows that the decision, not the reader, must catch
    "head half NaN samples on a 1.5x slower head": edit_case("head", BENCH_TIME, half_nan_and_slower),
    "head time failed (null)": decided("head", BENCH_TIME, fx.fail),
    "head time skipped (NaN)": decided("head", BENCH_TIME, fx.skip),
    "head vendor ratio NaN": decided("head", BENCH_RATIO, fx.skip),
    "head vendor ratio null": decided("head", BENCH_RATIO, fx.fail),
    # missing files
    "base results missing": missing_results("base"),
    "head results missing": missing_results("head"),
    "machine.json missing": remove(machine_json),
    "head env sidecar missing": remove(env_path),
    # machine.json and sidecars
    "machine.json corrupt": replace(machine_json, '{"machine": "h2'),
    "machine.json a list": replace(machine_json, "[]"),
    "env sidecar corrupt": replace(env_path, "{broken"),
    "env sidecar empty": replace(env_path, ""),
    "env sidecar not UTF-8": replace(env_path, b"\xff\xfe{}"),
    "env sidecar a list": replace(env_path, "[]"),
    "env sidecar a string": replace(env_path, '"cuda"'),
    "env sidecar null": replace(env_path, "null"),
    "env sidecar a number": replace(env_path, "7"),
    "env sidecar without platform": edit_env(lambda d: d.pop("platform")),
    "env sidecar unknown platform": edit_env(lambda d: d.update(platform="mi300")),
    "env sidecar platform a list": edit_env(lambda d: d.update(platform=["cuda"])),
    "env sidecar rocm, --platform cuda": edit_env(lambda d: d.update(platform="rocm")),
    "env sidecar start a list": edit_env(lambda d: d.update(start=[]), "start must be"),
    "env sidecar arch a number": edit_env(lambda d: d["start"].update(arch=90), "start.arch must be"),
    "env sidecar gpu a list": edit_env(lambda d: d["start"].update(gpu=["NVIDIA H100 80GB HBM3"]), "start.gpu must be"),
    "env sidecar inf": edit_env(lambda d: d["start"].update(sm_count=math.inf)),
    "env sidecar clock_control a string": edit_env(lambda d: d["start"].update(clock_control="locked"),
                                                   "start.clock_control must be"),
    "env sidecar vendors a list": edit_env(lambda d: d["start"].update(vendors=["flash_mla"]), "start.vendors must be"),
    "env sidecar grid a number": edit_env(lambda d: d.update(grid=1), "grid must be"),
    "env sidecar shards an object": edit_env(lambda d: d.update(shards={}), "shards must be"),
    "head build sidecar corrupt": replace(build_sidecar("head"), "{"),
    "base build sidecar corrupt": replace(build_sidecar("base"), "{"),
    "head build sidecar a list": replace(build_sidecar("head"), "[]"),
    "head build sidecar without a target": replace(build_sidecar("head"), '{"kernels": []}'),
}


@pytest.mark.parametrize("fault", list(STORE_FAULTS))
def test_bad_store_input_fails_closed(fault, tmp_path, capsys):
    root = fx.copy_store(tmp_path)
    named = STORE_FAULTS[fault](root)
    before = digest(root)
    code = gate(root, tmp_path, "--config", str(fx.recorded_perf_yml(tmp_path)))  # the ratios are hopper's
    err = capsys.readouterr().err
    assert code == exits.ERROR, err
    for text in named:
        assert text in err
    assert digest(root) == before


# -- faults in perf.yml --------------------------------------------------------------------

def numeric_leaves(node, path=()):
    if isinstance(node, bool):
        return
    if isinstance(node, (int, float)):
        yield path
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from numeric_leaves(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from numeric_leaves(v, (*path, i))


def key_of(path) -> str:
    return ".".join(str(p) for p in path if not isinstance(p, int))


def with_leaf(path, value) -> str:
    raw = json.loads(json.dumps(RAW))
    node = raw
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return yaml.safe_dump(raw)


def duplicate(after: str, extra: str, key: str) -> tuple:
    """perf.yml with ``extra`` inserted after the line ``after``: the key and the line it lands on."""
    lines = TEXT.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(after)) + 1
    return "\n".join([*lines[:at], extra, *lines[at:]]) + "\n", [key, f"line {at + 1}"]


def flow_duplicate():
    text = TEXT.replace("sm_90:  {tflops: 989.0, tbps: 4.8}", "sm_90:  {tflops: 989.0, tbps: 4.8, tflops: 1.0}")
    line = next(i for i, x in enumerate(text.splitlines()) if "tflops: 1.0}" in x) + 1
    return text, ["roofline.sm_90.tflops", f"line {line}"]


YAML_FAULTS = {f"{key_of(path)}[{path[-1]}] = {name}" if isinstance(path[-1], int) else f"{key_of(path)} = {name}":
               (with_leaf(path, value), [key_of(path)])
               for path in numeric_leaves(RAW) for name, value in (("nan", math.nan), ("inf", math.inf),
                                                                    ("-inf", -math.inf))}
YAML_FAULTS.update({
    "duplicate gate.latency.threshold": duplicate("    threshold:", "    threshold: 0.5", "gate.latency.threshold"),
    "duplicate top-level timing": duplicate("implementations:", "timing: {}", "timing"),
    "duplicate in a flow mapping": flow_duplicate(),
    "threshold too large for a float": (TEXT.replace("threshold: 0.025", "threshold: 1" + "0" * 400),
                                        ["gate.latency.threshold"]),
    "roofline a number": (TEXT.replace("roofline:\n", "roofline: 5\nx_roofline:\n"), ["roofline"]),
    "roofline arch a number": (TEXT.replace("  sm_90:  {tflops", "  90:  {tflops"), ["roofline.90"]),
    "shared_memory_limit arch a number": (TEXT.replace("      sm_90: 232448", "      90: 232448"),
                                          ["gate.build.shared_memory_limit.90"]),
    "a date for a number": (TEXT.replace("threshold: 0.025", "threshold: 2024-01-01"), ["gate.latency.threshold"]),
    "empty": ("", ["top level"]),
    "a YAML list": ("- 1\n", ["top level"]),
    "not YAML": ("grid: [unclosed", ["not valid YAML"]),
    "not UTF-8": (b"\xff\xfe" + TEXT.encode(), ["not UTF-8"]),
    # each platform's fp8 cache is its arch's format: MI300X computes in e4m3fnuz, Hopper in the OCP e4m3fn
    "rocm's fp8 cache in Hopper's format": (TEXT.replace("kv_dtypes: [bfloat16, float8_e4m3fnuz]",
                                                         "kv_dtypes: [bfloat16, float8_e4m3fn]"),
                                            ["platforms.rocm.kv_dtypes", "float8_e4m3fnuz"]),
    "cuda's fp8 cache in MI300X's format": (TEXT.replace("kv_dtypes: [float16, float8_e4m3fn]",
                                                         "kv_dtypes: [float16, float8_e4m3fnuz]"),
                                            ["platforms.cuda.kv_dtypes", "float8_e4m3fn)"]),
    "an unknown cache dtype": (TEXT.replace("kv_dtypes: [bfloat16, float8_e4m3fnuz]", "kv_dtypes: [bfloat16, int4]"),
                               ["platforms.rocm.kv_dtypes: 'int4' is not one of"]),
    "an fp8 vendor not among the implementations": (TEXT.replace("impl: flashinfer ", "impl: flashinfer3 "),
                                                     ["platforms.cuda.fp8_vendor.impl: 'flashinfer3'"]),
})


@pytest.mark.parametrize("fault", list(YAML_FAULTS))
def test_bad_perf_yml_fails_closed(fault, tmp_path, capsys):
    root = fx.copy_store(tmp_path)
    text, named = YAML_FAULTS[fault]
    perf = tmp_path / "perf.yml"
    perf.write_bytes(text if isinstance(text, bytes) else text.encode())
    before, before_yml = digest(root), perf.read_bytes()
    code = gate(root, tmp_path, "--config", str(perf), head=fx.SLOW)  # a real +31% slowdown
    err = capsys.readouterr().err
    assert code == exits.ERROR, err
    for text in named:
        assert text in err
    assert str(perf) in err
    assert digest(root) == before and perf.read_bytes() == before_yml


def test_a_missing_perf_yml_is_named(tmp_path, capsys):
    root = fx.copy_store(tmp_path)
    assert gate(root, tmp_path, "--config", str(tmp_path / "absent.yml")) == exits.ERROR
    assert str(tmp_path / "absent.yml") in capsys.readouterr().err


def test_the_count_is_current():
    # q_len keys, four workloads, gate.confirm; the fp8 vendors' heads (30 numeric leaves' faults), four kv_dtype;
    # the H100's roofline (6)
    assert (len(STORE_FAULTS), len(YAML_FAULTS)) == (156, 433)
    assert "589 = STORE_FAULTS 156 + YAML_FAULTS 433" in __doc__


# -- the rest of the rule ---------------------------------------------------------------

def test_a_corrupt_file_of_another_commit_is_a_warning_not_an_error(tmp_path, capsys):
    root = fx.copy_store(tmp_path)
    other = fx.results_file(root, fx.SLOW)
    other.write_text(other.read_text()[:100])
    before = digest(root)
    assert gate(root, tmp_path) == exits.OK
    assert f"skipped unreadable results: {other}" in capsys.readouterr().out
    assert digest(root) == before


def test_a_corrupt_file_of_a_gated_commit_says_to_restore_it_not_to_record(tmp_path, capsys):
    root = fx.copy_store(tmp_path)
    path = fx.results_file(root, fx.DOCS)
    path.write_text(path.read_text()[:100])
    before = digest(root)
    assert gate(root, tmp_path, after=["--record-missing"]) == exits.ERROR  # records nothing over it
    err = capsys.readouterr().err
    assert str(path) in err and "restore" in err and "mlagate record" not in err
    assert digest(root) == before


def test_an_unexpected_exception_is_an_error_with_its_traceback(tmp_path, capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(verdict, "evaluate", broken)
    assert gate(fx.copy_store(tmp_path), tmp_path) == exits.ERROR
    err = capsys.readouterr().err
    assert "Traceback" in err and err.rstrip().endswith("error: RuntimeError: a bug")


def test_an_error_annotation_keeps_every_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    perf = tmp_path / "perf.yml"
    perf.write_text("grid: [unclosed")  # PyYAML's messages run over several lines
    assert gate(fx.copy_store(tmp_path), tmp_path, "--config", str(perf)) == exits.ERROR
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("::error")]
    assert len(lines) == 1 and "%0A" in lines[0] and "line 1" in lines[0]


def test_annotations_escape_workflow_command_characters():
    cv = CaseVerdict(CASE, Status.ERROR, reasons=[Note(Kind.BAD_SAMPLES, "first\nsecond"),
                                                  Note(Kind.BAD_RATIO, "100% sure\r")])
    out = annotations(Verdict(Outcome.ERROR, [cv], errors=[Note(Kind.NO_GATED_CASES, "a\nb")]))
    assert out[0] == "::error title=perf gate error::a%0Ab"
    assert out[1].endswith("::first%0Asecond; 100%25 sure%0D")
    assert "title=perf error%3A tilelang-hopper" in out[1]
    assert all("\n" not in line and "\r" not in line for line in out)


def test_one_exit_code_table():
    assert EXIT_CODE == {Outcome.PASS: exits.OK, Outcome.REGRESSION: exits.REGRESSION, Outcome.UNSURE: exits.ERROR,
                         Outcome.ERROR: exits.ERROR}  # unsure: could not decide, never "regression"
    assert (exits.OK, exits.REGRESSION, exits.ERROR) == (0, 1, 2)
    # every command returns a name from exits (the gate through EXIT_CODE), never a bare number
    for path in sorted(Path(cli.__file__).parent.glob("*.py")):
        assert not re.search(r"\breturn \d|exit\(\d", path.read_text()), path


def test_copies_of_the_store_start_identical(tmp_path):
    assert digest(fx.copy_store(tmp_path)) == digest(fx.RESULTS)
    shutil.rmtree(tmp_path / "results")

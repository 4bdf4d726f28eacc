"""The env sidecar read back typed (mlagate/store/env.py): every field the gate, the pages and the lab read is
checked once, a bad one named by its key; the gate refuses it (exit 2), the report skips it with the file named."""

import json

import pytest

import gate_fixtures as fx
from mlagate import cli, exits
from mlagate.store.env import COUNTS, OBJECTS, TEXT, EnvRecordError, RunEnv, parse_env
from mlagate.store.errors import StoreError
from mlagate.store.results import Store

GOOD = {"platform": "cuda", "grid": "quick", "shard": "1/2",
        "gpu_consistency": {"case": "c", "gpus": []},
        "start": {"gpu": "NVIDIA H200", "arch": "sm_90", "time": "2026-12-06T10:00:00Z", "sm_count": 132,
                  "clock_control": {"locked": False}, "clocks": {"sm_mhz": "1980"},
                  "vendors": {"flashinfer": {"version": "0.7", "kernels": {"bfloat16/16": {"kernel": "k"}}}}},
        "end": {"time": "2026-12-06T10:01:00Z"}, "impls": ["tilelang-hopper"], "a field of a later version": [1]}


def test_a_record_reads_as_fields():
    env = parse_env(GOOD)
    assert (env.platform, env.grid, env.shard, env.arch, env.gpu, env.time) == (
        "cuda", "quick", "1/2", "sm_90", "NVIDIA H200", "2026-12-06T10:00:00Z")
    assert env.clock_control == {"locked": False} and env.vendors["flashinfer"]["version"] == "0.7"
    assert env.end["time"] == "2026-12-06T10:01:00Z" and env.runners() == (env,)
    empty = parse_env({})
    assert (empty.platform, empty.arch, empty.gpu, empty.time, empty.clock_control, empty.vendors) == (
        None, None, None, None, None, {})


def test_a_merged_record_reads_each_runners_record():
    env = parse_env({**GOOD, "shards": [GOOD, {**GOOD, "shard": "2/2"}]})
    assert [r.shard for r in env.runners()] == ["1/2", "2/2"]
    with pytest.raises(EnvRecordError, match=r"^shards\[1\]\.start\.gpu must be a JSON string"):
        parse_env({**GOOD, "shards": [GOOD, {"start": {"gpu": 7}}]})


def _bad(path: str, value):
    """GOOD with the field at dotted ``path`` set to ``value``."""
    data = json.loads(json.dumps(GOOD))
    *outer, last = path.split(".")
    node = data
    for key in outer:
        node = node[key]
    node[last] = value
    return data


BAD = {**{f"{side}.{name}": ["a list"] for side in ("start", "end") for name in TEXT},
       **{f"start.{name}": value for name in COUNTS for value in ("132",)},
       "start.sm_count": True,  # a bool is no count, though Python says it is an int
       **{f"start.{name}": "a string" for name in OBJECTS},
       "start": [], "end": "x", "platform": ["cuda"], "grid": 1, "shard": 2, "gpu_consistency": [],
       "shards": {}, "start.vendors.flashinfer": "0.7", "start.vendors.flashinfer.kernels": [],
       "start.vendors.flashinfer.kernels.bfloat16/16": "k"}


@pytest.mark.parametrize("path", sorted(BAD))
def test_a_field_of_the_wrong_type_is_refused_with_its_key(path):
    with pytest.raises(EnvRecordError, match=rf"^{path.replace('.', '[.]')} must be a JSON "):
        parse_env(_bad(path, BAD[path]))


def test_the_store_reads_it_strictly_for_the_gate_and_skips_it_with_a_problem_elsewhere(tmp_path):
    store = Store(tmp_path)
    store.write_sidecar("m", "a" * 40, "env", _bad("start.arch", 90))
    path = store.sidecar_path("m", "a" * 40, "env")
    with pytest.raises(StoreError, match=rf"^{path}: corrupt sidecar \(start\.arch must be a JSON string, got 90\)$"):
        store.read_env("m", "a" * 40, strict=True)
    assert store.read_env("m", "a" * 40) is None
    assert [(p.path, p.reason) for p in store.problems] == [
        (str(path), "corrupt sidecar (start.arch must be a JSON string, got 90)")]
    assert store.read_env("m", "b" * 40) is None and len(store.problems) == 1  # none recorded: no problem
    store.write_sidecar("m", "c" * 40, "env", GOOD)
    assert store.read_env("m", "c" * 40, strict=True) == parse_env(GOOD)


@pytest.mark.parametrize("field,value", [("arch", 90), ("gpu", ["NVIDIA H100 80GB HBM3"])])
def test_the_report_names_a_bad_env_sidecar_and_shows_it_not_recorded(tmp_path, capsys, field, value):
    """Before the typed reader, `mlagate report` ended in an AttributeError with no file named."""
    root = fx.copy_store(tmp_path)
    store = Store(root)
    newest = max(store.load_all(fx.MACHINE), key=lambda c: (store.read_env(fx.MACHINE, c) or RunEnv()).time or "")
    path = store.sidecar_path(fx.MACHINE, newest, "env")
    data = json.loads(path.read_text())
    data["start"][field] = value
    path.write_text(json.dumps(data))
    code = cli.main(["report", "--results", str(root), "--machine", fx.MACHINE, "--out", str(tmp_path / "site")])
    err = capsys.readouterr().err
    assert code == exits.OK, err
    assert f"warning: skipped {path}: corrupt sidecar (start.{field} must be a JSON string" in err
    assert "Traceback" not in err and (tmp_path / "site" / "index.html").exists()


def test_every_field_the_pages_show_is_typed():
    """environment.FIELDS and headline read these from a record's start and end: each must be checked here."""
    from mlagate.measure import environment

    class Spy(dict):
        read = set()

        def get(self, key, default=None):
            Spy.read.add(key)
            return super().get(key, default)

        def __getitem__(self, key):
            Spy.read.add(key)
            return super().__getitem__(key)

    values = {**{n: "x" for n in TEXT}, **{n: 1 for n in COUNTS}, **{n: {"k": 1} for n in OBJECTS}}
    env = RunEnv(start=Spy(values), end=Spy(values))
    shown = [read(env.start, env.end) for _, read in environment.FIELDS] + environment.headline(env)
    assert all(shown) and Spy.read and Spy.read <= set(values), Spy.read - set(values)


def test_a_bench_files_platform_is_read_from_its_start():
    """`mlagate bench --out` records the platform in its start only; a record at its top as well (the gate reads
    that one)."""
    from mlagate.config import load
    from mlagate.report.site import platform_of

    cfg = load()
    assert platform_of(cfg, parse_env({"start": {"platform": "rocm"}}), []) == "rocm"
    assert platform_of(cfg, parse_env({"platform": "cuda", "start": {"platform": "rocm"}}), []) == "cuda"
    assert platform_of(cfg, None, []) is None and platform_of(cfg, parse_env({}), []) is None


@pytest.mark.parametrize("bad,named", [
    (lambda text: text.replace('"environment": {', '"environment": {"start": {}, ', 1), "appears twice"),
    (lambda text: text[: len(text) // 2], "not complete JSON"),
    (lambda text: json.dumps({**json.loads(text), "environment": {"start": {"gpu": ["H200"]}}}),
     "environment.start.gpu must be a JSON string"),
])
def test_a_bad_bench_file_for_the_report_is_exit_2_named_and_writes_nothing(tmp_path, capsys, bad, named):
    bench = tmp_path / "bench.json"
    bench.write_text(bad((fx.FIXTURES / "bench_full_fp16_2026-11-29.json").read_text()))
    code = cli.main(["report", "--results", str(fx.copy_store(tmp_path)), "--machine", fx.MACHINE,
                     "--out", str(tmp_path / "site"), "--bench-json", str(bench)])
    err = capsys.readouterr().err
    assert code == exits.ERROR and str(bench) in err and named in err, err
    assert not (tmp_path / "site").exists()

"""The committed tables of tuned tile configs (kernels/tuned/<arch>.yaml), the names of candidate
configs, and where the kernels, the measuring worker and the build read them. CPU only."""

import os
import re
from pathlib import Path

import pytest
import torch

from mlagate.build import plan
from mlagate.kernels import mla_decode as m
from mlagate.kernels import tuned
from mlagate.measure import impls

SHAPE = m.Shape(batch=64, seqlen=4096, heads=16)
OTHER = m.Shape(batch=128, seqlen=4096, heads=16)
MEASURED = {"tflops": 120.5, "median_us": 93.6, "default_tflops": 110.0, "date": "2026-11-30",
            "gpu": "NVIDIA H200", "tilelang": "0.1.15", "command": "mlagate tune --grid quick --family hopper"}
TUNED_HOPPER = m.HOPPER.with_(block_N=32, threads=128, num_split=2, num_stages=1)  # lowers for SHAPE


@pytest.fixture
def tables(tmp_path, monkeypatch):
    """The committed tables' folder, moved to an empty tmp folder."""
    monkeypatch.setattr(tuned, "TABLE_DIR", tmp_path)
    return tmp_path


def test_write_then_load_round_trips_and_keeps_the_other_families(tmp_path):
    path = tmp_path / "sm_90.yaml"
    hopper = [tuned.Entry(OTHER, TUNED_HOPPER, MEASURED), tuned.Entry(SHAPE, m.HOPPER.with_(policy="Square"), {})]
    seesaw = [tuned.Entry(SHAPE, m.SEESAW.with_(num_split=2), {"tflops": 30.0})]
    assert tuned.write_table("sm_90a", "hopper", hopper, path) == path
    tuned.write_table("sm_90a", "seesaw", seesaw, path)
    table = tuned.load_table("sm_90a", path)
    assert list(table["hopper"]) == [tuned.shape_key(SHAPE), tuned.shape_key(OTHER)]  # sorted by shape
    assert list(table["hopper"].values()) == sorted(hopper, key=lambda e: e.shape.batch)
    assert list(table["seesaw"].values()) == seesaw
    text = path.read_text()
    assert text.startswith("# Tuned tile configs for sm_90 ")
    assert "    - shape: {batch: 64, seqlen: 4096, heads: 16, dtype: float16}\n" in text  # one line per part
    assert [p.name for p in tmp_path.iterdir()] == ["sm_90.yaml"]  # no temp file left behind

    tuned.write_table("sm_90a", "hopper", [], path)
    assert tuned.load_table("sm_90", path) == {"hopper": {}, "seesaw": {tuned.shape_key(SHAPE): seesaw[0]}}
    with pytest.raises(ValueError, match=r"sm_90.yaml: not written: families.cdna3: the cdna3 family is gfx942's"):
        tuned.write_table("sm_90a", "cdna3", [tuned.Entry(SHAPE, m.CDNA3, {})], path)


def test_write_refuses_what_would_not_load_and_leaves_the_file(tmp_path):
    path = tmp_path / "sm_90.yaml"
    tuned.write_table("sm_90", "hopper", [tuned.Entry(SHAPE, TUNED_HOPPER, MEASURED)], path)
    before = path.read_text()
    twice = [tuned.Entry(OTHER, TUNED_HOPPER, {}), tuned.Entry(OTHER, m.HOPPER, {})]
    with pytest.raises(ValueError, match=r"sm_90.yaml: not written: families.hopper\[1\].shape: duplicate"):
        tuned.write_table("sm_90", "hopper", twice, path)
    with pytest.raises(ValueError, match="not a config of family hopper"):
        tuned.write_table("sm_90", "hopper", [tuned.Entry(SHAPE, m.CDNA3, {})], path)
    with pytest.raises(ValueError, match="unknown family 'volta'"):
        tuned.write_table("sm_90", "volta", [], path)
    with pytest.raises(ValueError, match=r"sm_90.yaml: not written: .*cannot represent an object"):
        tuned.write_table("sm_90", "hopper", [tuned.Entry(SHAPE, TUNED_HOPPER, {"gpu": object()})], path)
    assert path.read_text() == before
    assert len(list(tmp_path.iterdir())) == 1


GOOD_ENTRY = ("    - shape: {batch: 64, seqlen: 4096, heads: 16, dtype: float16}\n"
              "      config: {block_N: 64, block_H: 64, num_split: 2, threads: 256, num_stages: 2, policy: FullCol}\n"
              "      measured: {tflops: 1.0}\n")


def _table(entries: str = GOOD_ENTRY, family: str = "hopper") -> str:
    return f"version: 2\narch: sm_90\nfamilies:\n  {family}:\n{entries}"


def _with(old: str, new: str, entries: str = GOOD_ENTRY) -> str:
    assert old in entries
    return _table(entries.replace(old, new))


MALFORMED = {
    "not YAML": ("version: 2\nfamilies: {hopper: [\n", r"not YAML: while parsing"),
    "not a mapping": ("- 1\n", r"must be a mapping with version and families"),
    "unknown top key": (_table() + "notes: 1\n", r"notes: unknown key; expected version, arch, families"),
    "unknown version": (_table().replace("version: 2", "version: 3"), r"version: must be 2 \(or 1, .*\), got 3"),
    "version a bool": (_table().replace("version: 2", "version: true"), r"^[^:]*: version: must be 2 .*, got True"),
    "families a list": ("version: 2\narch: sm_90\nfamilies: [hopper]\n", r"families: must be a mapping"),
    "no arch": (_table().replace("arch: sm_90\n", ""), r"^[^:]*: arch: must be sm_90, .* got 'none'"),
    "another arch": (_table().replace("arch: sm_90", "arch: gfx942"), r"arch: must be sm_90, .* got 'gfx942'"),
    "another arch's family": (_table(family="cdna3"), r"families.cdna3: the cdna3 family is gfx942's, not sm_90's"),
    "unknown family": (_table(family="volta"), r"families.volta: unknown family 'volta'; known: cdna3, hopper"),
    "family twice": (_table() + "  hopper: []\n", r"families.hopper: duplicate key at line 8"),
    "entries a mapping": (_table("    {}\n"), r"families.hopper: must be a list of entries"),
    "entry missing config": (_table(GOOD_ENTRY.replace("      config", "      #")), r"hopper\[0\].config: missing"),
    "entry unknown key": (_table(GOOD_ENTRY + "      notes: x\n"), r"hopper\[0\].notes: unknown key"),
    "shape batch a string": (_with("batch: 64", "batch: '64'"), r"hopper\[0\].shape.batch: must be int, got '64'"),
    "shape batch a bool": (_with("batch: 64", "batch: true"), r"hopper\[0\].shape.batch: must be int, got True"),
    "shape dim": (_with("heads: 16", "heads: 16, dim: 256"), r"hopper\[0\].shape.dim: unknown key"),
    "shape dtype": (_with("dtype: float16", "dtype: float8"), r"hopper\[0\].shape: dtype must be one of"),
    "shape batch 0": (_with("batch: 64", "batch: 0"), r"hopper\[0\].shape: batch must be an integer >= 1"),
    "block_N 0": (_with("block_N: 64", "block_N: 0"), r"hopper\[0\].config.block_N: .*must be an integer >= 1"),
    "policy": (_with("FullCol", "Diagonal"), r"hopper\[0\].config.policy: .*must be FullRow, FullCol or Square"),
    "block_N 24": (_with("block_N: 64", "block_N: 24"), r"hopper\[0\].config.block_N: .*multiple of 16, got 24"),
    "block_H 8": (_with("block_H: 64", "block_H: 8"), r"hopper\[0\].config.block_H: .*must be a multiple of 16, got 8"),
    "threads 100": (_with("threads: 256", "threads: 100"), r"hopper\[0\].config.threads: .*multiple of 32, got 100"),
    "num_stages 20": (_with("num_stages: 2", "num_stages: 20"), r"hopper\[0\].config.num_stages: .*<= 4, got 20"),
    "num_stages float": (_with("num_stages: 2", "num_stages: 2.0"), r"config.num_stages: must be int, got 2.0"),
    "threads missing": (_with("threads: 256, ", ""), r"hopper\[0\].config.threads: missing"),
    "name not tunable": (_with("policy: FullCol", "policy: FullCol, name: cdna3"),
                         r"hopper\[0\].config.name: not tunable \(the family sets it\)"),
    "operands not tunable": (_with("policy: FullCol", "policy: FullCol, operands_in_shared: false"),
                             r"hopper\[0\].config.operands_in_shared: not tunable"),
    "heads not a multiple of block_H": (_with("heads: 16", "heads: 96"),
                                        r"hopper\[0\]: query rows \(96 = s_q 1 x heads 96\) must be a multiple"),
    "measured a number": (_with("measured: {tflops: 1.0}", "measured: 3"), r"hopper\[0\].measured: must be a mapping"),
    "shape twice": (_table(GOOD_ENTRY + GOOD_ENTRY.replace("num_split: 2", "num_split: 4") + GOOD_ENTRY),
                    r"families.hopper\[1\].shape: duplicate of families.hopper\[0\].shape"),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_table_names_the_file_and_the_key(case, tmp_path):
    text, message = MALFORMED[case]
    path = tmp_path / "sm_90.yaml"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        tuned.load_table("sm_90a", path)
    assert str(info.value).startswith(f"{path}: ")
    assert re.search(message, str(info.value)), str(info.value)


def test_the_well_formed_base_of_the_malformed_cases_loads(tmp_path):
    path = tmp_path / "sm_90.yaml"
    path.write_text(_table())
    entry = tuned.load_table("sm_90a", path)["hopper"][tuned.shape_key(SHAPE)]
    assert entry == tuned.Entry(SHAPE, m.HOPPER.with_(num_split=2), {"tflops": 1.0})
    tuned.load_table("sm_90a", path)["hopper"].clear()  # a caller's change does not reach the next reader
    assert list(tuned.load_table("sm_90a", path)["hopper"].values()) == [entry]


def test_parse_table_reads_text_as_load_table_reads_the_file_and_names_its_source(tmp_path):
    path = tmp_path / "sm_90.yaml"
    path.write_text(_table())
    assert tuned.parse_table(_table(), "sm_90a", "sm_90.yaml at 1a2b3c") == tuned.load_table("sm_90a", path)
    tuned.parse_table(_table(), "sm_90a", "x")["hopper"].clear()  # the caller's own copy
    assert tuned.parse_table(_table(), "sm_90a", "x")["hopper"]
    for text, problem in [MALFORMED["unknown version"], MALFORMED["not YAML"], MALFORMED["shape twice"]]:
        with pytest.raises(ValueError) as info:
            tuned.parse_table(text, "sm_90a", "kernels/tuned/sm_90.yaml at 1a2b3c")
        message = str(info.value)
        assert message.startswith("kernels/tuned/sm_90.yaml at 1a2b3c: ") and re.search(problem, message)


def test_a_table_named_by_path_must_exist_and_be_utf8(tables, tmp_path):
    typo = tmp_path / "typo.yaml"
    with pytest.raises(ValueError, match=rf"^{re.escape(str(typo))}: no such table$"):
        tuned.load_table("sm_90", typo)
    assert tuned.load_table("sm_90") == {}  # only the committed table may be absent
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes(_table().encode() + b"# r\xe9glage\n")
    with pytest.raises(ValueError, match=rf"^{re.escape(str(latin1))}: not UTF-8 text"):
        tuned.load_table("sm_90", latin1)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(tmp_path))}: not readable"):
        tuned.load_table("sm_90", tmp_path)


def test_the_table_is_read_again_only_when_it_changed(tables, monkeypatch):
    tuned.write_table("sm_90a", "hopper", [tuned.Entry(SHAPE, TUNED_HOPPER, MEASURED)])
    path, reads = tuned.table_path("sm_90"), []
    for name in ("read_bytes", "read_text"):
        real = getattr(Path, name)
        monkeypatch.setattr(Path, name, lambda self, *a, _real=real, **k: reads.append(self) or _real(self, *a, **k))
    for _ in range(3):
        assert tuned.tuned_config("hopper", SHAPE, "sm_90a") == TUNED_HOPPER  # mla_decode() asks on every call
    assert reads.count(path) <= 1
    tuned.write_table("sm_90a", "hopper", [tuned.Entry(SHAPE, TUNED_HOPPER.with_(policy="Square"), MEASURED)])
    assert tuned.tuned_config("hopper", SHAPE, "sm_90a") == TUNED_HOPPER.with_(policy="Square")
    path.write_text(path.read_text().replace("policy: Square", "policy: FullRow"))  # by hand, in place
    os.utime(path, ns=(1, 1))  # a stamp of its own, whatever the clock's grain
    assert tuned.tuned_config("hopper", SHAPE, "sm_90a") == TUNED_HOPPER.with_(policy="FullRow")


def test_the_cache_stays_small_whatever_paths_are_loaded(tmp_path):
    for i in range(40):
        path = tmp_path / f"t{i}.yaml"
        path.write_text(_table())
        tuned.load_table("sm_90", path)
    assert len(tuned._loaded) <= 16


def test_the_written_table_is_readable_by_all_and_on_disk_before_it_replaces_the_old(tmp_path, monkeypatch):
    calls = []
    for name in ("fsync", "replace"):
        real = getattr(os, name)
        monkeypatch.setattr(os, name, lambda *a, _name=name, _real=real: calls.append(_name) or _real(*a))
    old = os.umask(0o022)
    try:
        path = tuned.write_table("sm_90", "hopper", [tuned.Entry(SHAPE, TUNED_HOPPER, MEASURED)], tmp_path / "t.yaml")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644
    assert calls.index("fsync") < calls.index("replace")


def test_table_paths_per_base_architecture(tables):
    assert tuned.table_path("sm_90a") == tuned.table_path("sm_90") == tables / "sm_90.yaml"
    assert tuned.table_path("gfx942:sramecc+:xnack-") == tuned.table_path("gfx942") == tables / "gfx942.yaml"
    assert tuned.load_table("sm_100a") == {}  # no table: every shape runs its family default


def test_tuned_config_is_the_tables_for_a_listed_shape_else_the_family_default(tables):
    tuned.write_table("sm_90a", "hopper", [tuned.Entry(SHAPE, TUNED_HOPPER, MEASURED)])
    assert (tables / "sm_90.yaml").exists()
    assert tuned.tuned_config("hopper", SHAPE, "sm_90a") == TUNED_HOPPER
    assert tuned.tuned_config("hopper", SHAPE, "sm_90").operands_in_shared is True
    assert tuned.tuned_config("hopper", OTHER, "sm_90a") == m.HOPPER
    assert tuned.tuned_config("hopper", m.Shape(64, 4096, 16, "bfloat16"), "sm_90a") == m.HOPPER
    assert tuned.tuned_config("cdna3", SHAPE, "sm_90a") == m.CDNA3
    assert tuned.tuned_config("hopper", SHAPE, "gfx942") == m.HOPPER  # another architecture's table
    with pytest.raises(ValueError, match="unknown family 'volta'"):
        tuned.tuned_config("volta", SHAPE, "sm_90a")


def test_the_committed_tables_load():
    assert sorted(p.name for p in tuned.TABLE_DIR.glob("*.yaml")) == ["gfx942.yaml", "sm_90.yaml"]
    assert "hopper" in tuned.load_table("sm_90a")
    assert "cdna3" in tuned.load_table("gfx942:sramecc+:xnack-")
    # gfx942 starts from the seed's config: no MI300X numbers until `mlagate tune` runs on one.
    assert tuned.load_table("gfx942") == {"cdna3": {}}
    assert tuned.tuned_config("cdna3", SHAPE, "gfx942") == m.CDNA3


@pytest.mark.parametrize("config", [m.HOPPER, m.CDNA3, TUNED_HOPPER, m.CDNA3.with_(policy="Square", threads=64)])
def test_a_candidate_name_round_trips(config):
    impl = tuned.candidate_impl(config)
    assert impl.startswith(f"tilelang-{config.name}@") and not re.search(r"[\s/,]", impl)
    assert tuned.parse_candidate(impl) == config


def test_the_candidate_name_spells_every_tunable_field():
    assert tuned.candidate_impl(m.HOPPER) == "tilelang-hopper@N64.H64.split0.t256.stages2.FullCol"
    assert tuned.candidate_impl(m.CDNA3) == "tilelang-cdna3@N32.H64.split4.t128.stages0.FullRow"


@pytest.mark.parametrize("impl", ["tilelang-hopper", "tilelang-cdna3", "flash_mla", "torch"])
def test_a_plain_name_is_no_candidate(impl):
    assert tuned.parse_candidate(impl) is None


@pytest.mark.parametrize("impl, message", [
    ("tilelang-hopper@N64.H64.split0.t256.stages2", "a candidate name reads tilelang-<family>@N<block_N>"),
    ("tilelang-hopper@N64.H64.split0.t256.stages2.FullCol.x", "a candidate name reads"),
    ("hopper@N64.H64.split0.t256.stages2.FullCol", "a candidate name reads"),
    ("tilelang-volta@N64.H64.split0.t256.stages2.FullCol", "unknown family 'volta'"),
    ("tilelang-hopper@N064.H64.split0.t256.stages2.FullCol", "'N064' is not N<block_N>"),
    ("tilelang-hopper@H64.N64.split0.t256.stages2.FullCol", "'H64' is not N<block_N>"),
    ("tilelang-hopper@N64.H64.split-1.t256.stages2.FullCol", "'split-1' is not split<num_split>"),
    ("tilelang-hopper@N0.H64.split0.t256.stages2.FullCol", "block_N must be an integer >= 1"),
    ("tilelang-hopper@N64.H64.split0.t256.stages2.Diagonal", "policy must be FullRow, FullCol or Square"),
])
def test_a_malformed_candidate_name_is_refused_by_name(impl, message):
    with pytest.raises(ValueError) as info:
        tuned.parse_candidate(impl)
    assert f"implementation {impl!r}: " in str(info.value) and message in str(info.value)


def test_candidate_names_only_configs_of_a_family():
    with pytest.raises(ValueError, match="unknown family 'hopper-big'"):
        tuned.candidate_impl(m.HOPPER.with_(name="hopper-big"))
    with pytest.raises(ValueError, match="not a config of family hopper"):
        tuned.candidate_impl(m.HOPPER.with_(operands_in_shared=False))
    with pytest.raises(ValueError, match="num_stages must be >= 0"):
        tuned.candidate_impl(m.HOPPER.with_(num_stages=-1))


def test_a_tilelang_implementation_runs_a_candidates_config_or_the_tables(tables):
    tuned.write_table("sm_90", "hopper", [tuned.Entry(SHAPE, TUNED_HOPPER, MEASURED)])
    candidate = m.HOPPER.with_(block_N=32, threads=128)
    assert impls.tilelang_config(tuned.candidate_impl(candidate), SHAPE, "sm_90") == candidate
    assert impls.tilelang_config("tilelang-hopper", SHAPE, "sm_90") == TUNED_HOPPER
    assert impls.tilelang_config("tilelang-hopper", OTHER, "sm_90") == m.HOPPER
    assert impls.tilelang_config("tilelang-cdna3", SHAPE, "sm_90") == m.CDNA3


@pytest.fixture
def fake_gpu(monkeypatch):
    """The kernel module's device functions faked on CPU tensors; records the configs compiled."""
    compiled, arch = [], {"arch": "sm_90"}
    monkeypatch.setattr(m, "check_inputs", lambda q, q_pe, kv, k_pe, kv_scale=None: SHAPE)
    monkeypatch.setattr(m, "device_arch", lambda device: arch["arch"])

    def compile_(shape, config, device=None):
        compiled.append(config)
        return lambda q, q_pe, kv, k_pe, out, lse, kv_scale=None: (out, lse)

    monkeypatch.setattr(m, "compiled", compile_)
    inputs = (torch.zeros(1, 16, 512), torch.zeros(1, 16, 64), torch.zeros(1, 8, 1, 512), torch.zeros(1, 8, 1, 64))
    return compiled, arch, inputs


def test_prepare_runs_a_candidate_with_its_familys_arch_requirement(fake_gpu, tables):
    compiled, arch, inputs = fake_gpu
    candidate = m.HOPPER.with_(block_N=32, num_split=4)
    impls.prepare(tuned.candidate_impl(candidate), inputs, "cpu")()
    tuned.write_table("sm_90", "hopper", [tuned.Entry(SHAPE, TUNED_HOPPER, MEASURED)])
    impls.prepare("tilelang-hopper", inputs, "cpu")()
    assert compiled == [candidate, TUNED_HOPPER]
    arch["arch"] = "gfx942"
    with pytest.raises(impls.Unavailable, match="needs a sm_9 or sm_10 device, this one is gfx942"):
        impls.prepare(tuned.candidate_impl(candidate), inputs, "cpu")
    with pytest.raises(ValueError, match="unknown family 'volta'"):
        impls.prepare("tilelang-volta@N64.H64.split0.t256.stages2.FullCol", inputs, "cpu")


def test_mla_decode_defaults_to_the_tuned_config_of_the_device(fake_gpu, tables):
    compiled, _, inputs = fake_gpu
    m.mla_decode(*inputs)
    tuned.write_table("sm_90", "hopper", [tuned.Entry(SHAPE, TUNED_HOPPER, MEASURED)])
    m.mla_decode(*inputs)
    m.mla_decode(*inputs, config=m.CDNA3)
    assert compiled == [m.HOPPER, TUNED_HOPPER, m.CDNA3]


def test_the_build_lowers_the_config_the_table_runs(tables):
    tuned.write_table("sm_90", "hopper", [tuned.Entry(SHAPE, TUNED_HOPPER, MEASURED)])
    jobs = plan.plan_jobs("cuda:sm_90a", [m.HOPPER], [SHAPE, OTHER])
    configs = {(j.shape, j.config.with_(num_split=0)) for j in jobs}
    assert configs == {(SHAPE, TUNED_HOPPER.with_(num_split=0)), (OTHER, m.HOPPER)}
    tuned_jobs = [j for j in jobs if j.shape == SHAPE]
    assert [(j.plan().num_split, j.forced) for j in tuned_jobs] == [(2, False), (1, True)]  # the table's split
    own = m.HOPPER.with_(name="hopper-own")  # a config that is no family's runs as given
    assert {j.config.with_(num_split=0) for j in plan.plan_jobs("cuda:sm_90a", [own], [SHAPE])} == {own}
    assert {j.config for j in plan.plan_jobs("hip:gfx942", [m.CDNA3], [SHAPE])} <= {
        m.CDNA3, m.CDNA3.with_(num_split=1)}  # sm_90's table is not gfx942's


# -- the gate's interleaved re-measure runs each commit's own table ------------------------------

def test_the_re_measure_takes_each_commits_table(tmp_path):
    import subprocess

    from mlagate.measure import interleaved

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    def commit(message):
        git("add", "-A")
        git("-c", "user.name=t", "-c", "user.email=t@localhost", "-c", "commit.gpgsign=false", "commit", "-qm", message)
        return subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()

    git("init", "-q")
    (tmp_path / "README.md").write_text("no table yet\n")
    without = commit("no table")
    shape = m.Shape(batch=64, seqlen=4096, heads=16)
    winner = m.HOPPER.with_(block_N=32, num_split=2, num_stages=1)
    table = tmp_path / "kernels" / "tuned" / "sm_90.yaml"
    table.parent.mkdir(parents=True)
    tuned.write_table("sm_90a", "hopper", [tuned.Entry(shape, winner, {"tflops": 1.0})], path=table)
    with_table = commit("a table")
    table.write_text(table.read_text().replace("block_N: 32", "block_N: -32"))
    broken = commit("a broken table")

    at = lambda rev, s=shape: interleaved.config_at(tmp_path, rev, m, "hopper", s, "sm_90a")  # noqa: E731
    assert at(without) == m.HOPPER
    assert at(with_table) == winner
    assert at(with_table, m.Shape(batch=128, seqlen=4096, heads=16)) == m.HOPPER
    with pytest.raises(interleaved.ConfirmError, match=rf"kernels/tuned/sm_90.yaml at {broken[:12]}: .*block_N"):
        at(broken)
    with pytest.raises(interleaved.ConfirmError, match="cannot read kernels/tuned/sm_90.yaml at 0{40}"):
        at("0" * 40)  # a commit git does not have is an error, never "no table"

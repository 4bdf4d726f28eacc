import copy
import math

import pytest
import yaml

from mlagate import config
from mlagate.config import platforms as config_platforms
from mlagate.config import tune as config_tune
from mlagate.config.confirm import Confirm, parse_confirm
from mlagate.config.platforms import Platform, Vendor
from mlagate.config.reader import KeyReader, UniqueKeyLoader

RAW = yaml.safe_load(config.DEFAULT_PATH.read_text())


def parse_with(change):
    raw = copy.deepcopy(RAW)
    change(raw)
    return config.parse(raw)


def test_repository_config_loads():
    cfg = config.load()
    assert cfg.platform("cuda").vendor == "flash_mla"
    assert cfg.platform("rocm").vendor == "aiter"
    # points x heads x q_len, at one (query, cache) format
    assert len(cfg.grid.cases("full", ["tilelang-hopper"], [("float16", "float16")])) == 10 * 4 * 3
    assert {c.heads for c in cfg.grid.cases("full", ["torch"], [("float16", "float16")])} == {16, 32, 64, 128}
    assert cfg.platform("rocm").dtypes == ("bfloat16",)  # what aiter's mla_decode_fwd takes
    assert len(cfg.digest) == 16


@pytest.mark.parametrize("change,message", [
    (lambda r: r["gate"]["latency"].update(treshold=0.1), "gate.latency.treshold: unknown key"),
    (lambda r: r.update(extra=1), "extra: unknown key"),
    (lambda r: r.update({1: "x"}), r"^1: unknown key \(keys are names, got int\)$"),
    # s_q: the kernels take 1..8, so 8 loads (test below) and 9 is refused, in the grid and in a workload
    (lambda r: r["grid"]["full"].update(q_len=[9]), "^grid.full.q_len: 9 is not one of 1, 2, 3, 4, 5, 6, 7, 8$"),
    (lambda r: r["workloads"]["uniform-paged"].update(q_len=[9]),
     "^workloads.uniform-paged.q_len: 9 is not one of 1, 2, 3, 4, 5, 6, 7, 8$"),
    (lambda r: r["timing"].update(window_ms=0), r"timing.window_ms: must be > 0, got 0.0"),
    (lambda r: r["timing"].update(min_samples="many"), "timing.min_samples: must be int, got 'many'"),
    (lambda r: r["timing"].update(max_clock_drop=1.5), "timing.max_clock_drop: must be <= 1"),
    (lambda r: r["timing"].update(record_s=-1), "timing.record_s: must be > 0"),
    (lambda r: r["timing"]["budgets"]["record"].update(windows=0), "timing.budgets.record.windows: must be >= 1"),
    (lambda r: r["timing"]["budgets"].pop("confirm"), "timing.budgets.confirm: must be a mapping"),
    (lambda r: r["timing"]["budgets"].update(nightly={}), "timing.budgets.nightly: unknown key"),
    (lambda r: r["timing"].update(rep_ms=1000), "timing.rep_ms: unknown key"),
    (lambda r: r["grid"]["full"].update(seqlen=[0]), "grid.full.seqlen: every entry must be an integer >= 1"),
    (lambda r: r["platforms"]["rocm"].update(dtypes=["float8"]), "platforms.rocm.dtypes: 'float8' is not one of"),
    (lambda r: r["platforms"]["cuda"].pop("dtypes"), "platforms.cuda.dtypes: must be a non-empty list"),
    (lambda r: r["grid"]["full"].update(heads=[24]), "grid.full.heads: 24 is not one of 16, 32, 64, 128"),
    (lambda r: r["grid"]["quick"].update(heads=[16, 16]), "grid.quick.heads: entries must be unique"),
    (lambda r: r["grid"].update(heads=128), "grid.heads: unknown key"),
    (lambda r: r["platforms"]["cuda"].update(vendor="cudnn"), "platforms.cuda.vendor: 'cudnn' is not in"),
    (lambda r: r["gate"]["latency"].update(screen=0.5), "gate.latency.screen: must be <= gate.latency.threshold"),
    (lambda r: r["gate"]["vendor_ratio"]["rocm"].pop("floor"), "gate.vendor_ratio.rocm.floor: missing"),
    (lambda r: r["gate"]["latency"].update(alpha=-3), r"gate.latency.alpha: must be > 0"),
    (lambda r: r["roofline"]["sm_90"].update(tflops=True), "roofline.sm_90.tflops: must be float"),
])
def test_invalid_values_name_the_key(change, message):
    with pytest.raises(config.ConfigError, match=message):
        parse_with(change)


def test_eight_query_tokens_load():
    assert parse_with(lambda r: r["grid"]["full"].update(q_len=[8])).grid.sizes["full"][3] == (8,)


def test_load_reports_the_file(tmp_path):
    with pytest.raises(config.ConfigError, match="cannot read"):
        config.load(tmp_path / "absent.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("grid: [unclosed")
    with pytest.raises(config.ConfigError, match=f"{bad}: not valid YAML"):
        config.load(bad)


def test_unknown_grid_name():
    with pytest.raises(config.ConfigError, match="grid.huge: no such grid"):
        config.load().grid.cases("huge", ["torch"], ["float16"])


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("section,key", [
    (("gate", "latency"), "threshold"), (("gate", "latency"), "screen"), (("gate", "latency"), "alpha"),
    (("gate", "drift"), "max_slowdown"), (("gate", "vendor_ratio", "cuda"), "floor"),
    (("roofline", "sm_90"), "tflops"), (("timing",), "warmup_ms"), (("timing", "budgets", "record"), "warmup_ms"),
])
def test_nan_and_inf_are_not_numbers_here(section, key, value):
    """NaN passes every range check (all comparisons are false), so it is refused first."""
    def change(raw):
        node = raw
        for name in section:
            node = node[name]
        node[key] = value

    with pytest.raises(config.ConfigError, match=rf"{'.'.join(section)}.{key}: must be a finite number"):
        parse_with(change)


def test_an_integer_too_large_for_a_float_names_the_key():
    with pytest.raises(config.ConfigError) as refused:
        parse_with(lambda r: r["gate"]["latency"].update(threshold=10 ** 400))
    assert str(refused.value) == ("gate.latency.threshold: must be a finite number, got an integer too large for "
                                  "a float")


def test_arch_names_must_be_strings():
    with pytest.raises(config.ConfigError) as refused:
        parse_with(lambda r: r["roofline"].update({90: {"tflops": 1.0, "tbps": 1.0}}))
    assert str(refused.value) == "roofline.90: keys must be names (strings), got int"


def test_a_section_under_a_value_that_is_no_mapping_reads_as_missing():
    with pytest.raises(config.ConfigError) as refused:
        KeyReader([1, 2], "grid").section("quick", ())
    assert str(refused.value) == "grid.quick: must be a mapping, got NoneType"


def test_a_mapping_names_its_first_missing_required_key():
    """kernels/tuned.py reads its entries so."""
    with pytest.raises(config.ConfigError) as refused:
        KeyReader.mapping({"a": 1}, "entry", ("a", "b", "c"), required=("a", "b", "c"))
    assert str(refused.value) == "entry.b: missing"


def test_an_int_list_takes_its_maximum_and_refuses_one_over():
    assert KeyReader({"n": [0, 4]}).int_list("n", minimum=0, maximum=4) == (0, 4)
    with pytest.raises(config.ConfigError) as refused:
        KeyReader({"n": [4, 5]}).int_list("n", maximum=4)
    assert str(refused.value) == "n: every entry must be <= 4, got 5"


def test_a_duplicate_key_names_the_key_and_its_line(tmp_path):
    text = config.DEFAULT_PATH.read_text().replace("    alpha: 0.01\n", "    alpha: 0.01\n    alpha: 0.5\n")
    line = text.splitlines().index("    alpha: 0.5") + 1
    path = tmp_path / "perf.yml"
    path.write_text(text)
    with pytest.raises(config.ConfigError, match=rf"{path}: gate.latency.alpha: duplicate key at line {line} "
                                                 rf"\(first at line {line - 1}\)"):
        config.load(path)


def test_yaml_reads_as_safe_load_otherwise():
    text = "a: &x {p: 1, q: [1, 2]}\nb: {<<: *x, p: 2}\nc: .nan\nd: 2024-01-02\n"
    loaded = yaml.load(text, Loader=UniqueKeyLoader)
    expected = yaml.safe_load(text)
    assert math.isnan(loaded.pop("c")) and math.isnan(expected.pop("c"))
    assert loaded == expected and loaded["b"] == {"p": 2, "q": [1, 2]}
    assert yaml.load(config.DEFAULT_PATH.read_text(), Loader=UniqueKeyLoader) == RAW


def test_recursive_aliases_load_as_with_safe_load():
    """An alias is checked once, where its anchor is: a node holding itself must not recurse forever."""
    loaded = yaml.load("a: &x [*x]\nb: &y {c: *y}\n", Loader=UniqueKeyLoader)
    assert loaded["a"] == [loaded["a"]] and loaded["a"][0] is loaded["a"]
    assert loaded["b"]["c"] is loaded["b"]


@pytest.mark.parametrize("text,message", [
    ("a:\n  - b: 1\n    b: 2\n", "a.b: duplicate key at line 3 (first at line 2)"),  # in a list's entry
    ("x: &x {p: 1}\ny:\n  <<: *x\n  q: 1\n  q: 2\n", "y.q: duplicate key at line 5 (first at line 4)"),  # after <<
])
def test_a_duplicate_key_is_found_inside_lists_and_after_a_merge(text, message):
    with pytest.raises(config.ConfigError) as refused:
        yaml.load(text, Loader=UniqueKeyLoader)
    assert str(refused.value) == message


@pytest.mark.parametrize("text,problem", [
    ("? [1, 2]\n: v\n", "found unhashable key"),  # a list as a key
    ("? !!seq k\n: v\n", "expected a sequence node, but found scalar"),  # a scalar tagged as a list
])
def test_a_key_that_cannot_be_built_is_yamls_error(text, problem):
    """The duplicate check reads keys before the document is built: a key that cannot be one is a YAML error
    (config.load: "not valid YAML"), as yaml.safe_load's, never a crash in the check."""
    with pytest.raises(yaml.constructor.ConstructorError):
        yaml.safe_load(text)
    with pytest.raises(yaml.constructor.ConstructorError) as refused:
        yaml.load(text, Loader=UniqueKeyLoader)
    assert refused.value.problem == problem


def test_a_platforms_vendor_impls_are_its_vendor_then_its_fp8_caches_each_once():
    cfg = config.load()
    assert cfg.platform("cuda").vendor_impls() == ("flash_mla", "flashinfer")
    assert cfg.platform("rocm").vendor_impls() == ("aiter",)  # a16w8 is aiter's too

    def no_fp8(raw):
        raw["platforms"]["cuda"]["kv_dtypes"] = ["float16"]
        del raw["platforms"]["cuda"]["fp8_vendor"]

    assert parse_with(no_fp8).platform("cuda").vendor_impls() == ("flash_mla",)


def test_a_stored_workload_key_reads_back_as_its_case_at_every_cache_format():
    """An fp8 cache's workload case keeps its kv_dtype (and lengths) through Config.case."""
    cfg = config.load()
    cases = [c for c in cfg.cases("quick", ["tilelang-seesaw"], "cuda", ["bfloat16"]) if c.paged]
    assert {c.kv_dtype for c in cases} == {"bfloat16", "float8_e4m3fn"}
    for c in cases:
        back = cfg.case(c.key, "cuda")
        assert back == c and back.lengths == c.lengths and back.kv_dtype == c.kv_dtype


def test_a_recorded_workload_perf_yml_no_longer_lists_is_refused_naming_it_with_its_digest():
    from mlagate.case import Case

    key = ("tilelang-seesaw", 64, 4096, "float16", 16, 1, "float16", "gone-4k@0123abcd")
    with pytest.raises(config.ConfigError) as refused:
        config.load().case(key, "cuda")
    assert str(refused.value) == (f"workloads.gone-4k: not in perf.yml, but {Case(*key).label(tag=True)} was "
                                  "recorded")
    assert "@0123abcd" in str(refused.value)


def confirm_with(**values):
    section = {"min_rounds": 2, "max_rounds": 2, "budget_s": 60, "unsure": "pass", **values}
    return parse_confirm(KeyReader(section, "gate.confirm"))


def test_confirm_max_rounds_may_be_two_the_least_an_interval_needs():
    assert confirm_with(min_rounds=2, max_rounds=2) == Confirm(2, 2, 60.0, False)


def test_confirm_max_rounds_below_two_is_refused_by_its_own_floor_before_min_rounds():
    with pytest.raises(config.ConfigError) as refused:
        confirm_with(max_rounds=1)
    assert str(refused.value) == "gate.confirm.max_rounds: must be >= 2, got 1"


SMEM = {"sm_90": 232448, "gfx942": 65536}


def tune_of(section):
    return config_tune.parse(KeyReader({"tune": section}), config.TILELANG_FAMILIES, SMEM)


@pytest.mark.parametrize("section,message", [
    ({"ampere": {"arch": "sm_80", "space": {"threads": [128]}}},
     "tune.ampere: unknown config family (known: hopper, seesaw, cdna3)"),
    ({"hopper": {"arch": "sm_80", "space": {"threads": [128]}}},
     "tune.hopper.arch: 'sm_80' has no gate.build.shared_memory_limit (known: sm_90, gfx942)"),
    ({"hopper": {"arch": "sm_90", "space": {}}},
     "tune.hopper.space: must list at least one of block_N, block_H, num_split, threads, num_stages, policy"),
])
def test_a_bad_tune_entry_lists_what_is_known_in_full(section, message):
    with pytest.raises(config.ConfigError) as refused:
        tune_of(section)
    assert str(refused.value) == message


ROCM = {"vendor": "aiter", "tilelang": "tilelang-cdna3", "dtypes": ["bfloat16"], "vendor_heads": [16],
        "vendor_q_len_heads": [16], "page_size": 1}
CUDA = {"vendor": "flash_mla", "tilelang": "tilelang-seesaw", "dtypes": ["float16"], "vendor_heads": [16, 128],
        "vendor_q_len_heads": [16], "page_size": 64, "kv_dtypes": ["float16", "float8_e4m3fn"],
        "fp8_vendor": {"impl": "flashinfer", "heads": [16, 64], "q_len_heads": [16]}}


def cuda_with(**values):
    """The platforms section with cuda's keys changed (None drops a key), cuda's Platform read from it."""
    cuda = {k: v for k, v in {**CUDA, **values}.items() if v is not None}
    return config_platforms.parse(KeyReader({"platforms": {"rocm": ROCM, "cuda": cuda}}), config.KNOWN_IMPLS)["cuda"]


def refusal(**values) -> str:
    with pytest.raises(config.ConfigError) as refused:
        cuda_with(**values)
    return str(refused.value)


def test_a_page_size_below_one_token_is_refused():
    assert refusal(page_size=0) == "platforms.cuda.page_size: must be >= 1, got 0"


def test_vendor_q_len_heads_are_among_vendor_heads():
    assert refusal(vendor_q_len_heads=[64]) == "platforms.cuda.vendor_q_len_heads: 64 is not one of 16, 128"


def test_an_fp8_cache_without_its_vendor_says_why_it_needs_one():
    assert refusal(fp8_vendor=None) == ("platforms.cuda.fp8_vendor: missing (kv_dtypes holds an fp8 cache, whose "
                                        "ratio needs its vendor kernel)")


def test_an_fp8_vendors_heads_are_query_head_counts():
    assert refusal(fp8_vendor={"impl": "flashinfer", "heads": [24]}) == \
        "platforms.cuda.fp8_vendor.heads: 24 is not one of 16, 32, 64, 128"


def test_an_fp8_vendor_without_q_len_heads_takes_q_len_1_only():
    assert cuda_with(fp8_vendor={"impl": "flashinfer", "heads": [16, 64]}).fp8_vendor == \
        Vendor("flashinfer", (16, 64), ())


# flash_mla at 16 and 128 heads, q_len > 1 at 16 only; its fp8 cache held to flashinfer at 16 and 64, q_len > 1 at 16
HOPPER = Platform("flash_mla", "tilelang-seesaw", ("float16",), (16, 128), 64, (16,), ("float16", "float8_e4m3fn"),
                  Vendor("flashinfer", (16, 64), (16,)))


@pytest.mark.parametrize("heads,q_len,kv_dtype,has", [
    (128, 1, None, True), (128, 2, None, False), (16, 2, None, True),  # q_len 1 needs no q_len head
    (128, 1, "float8_e4m3fn", False), (64, 1, "float8_e4m3fn", True), (64, 2, "float8_e4m3fn", False),
])
def test_has_vendor_kernel_reads_the_vendor_of_the_cache(heads, q_len, kv_dtype, has):
    assert HOPPER.has_vendor_kernel(heads, q_len, kv_dtype) is has


def config_on(platform, impls=("flash_mla",)):
    """A Config of one dense grid on cuda: all that cases and listed_keys read."""
    grid = config.Grid({"g": ((8,), (256,), (16, 64, 128), (1, 2))}, {"g": ()})
    return config.Config(grid, impls, {"cuda": platform}, None, {}, None, {}, {}, "")


def test_a_vendor_kernel_is_measured_only_where_the_vendor_of_its_cache_has_one():
    cases = config_on(HOPPER).cases("g", ["flash_mla", "flashinfer"], "cuda")
    points = {}
    for c in cases:
        points.setdefault((c.impl, c.kv_dtype), []).append((c.heads, c.q_len))
    every = [(16, 1), (16, 2), (64, 1), (64, 2), (128, 1), (128, 2)]
    assert points == {
        ("flash_mla", "float16"): [(16, 1), (16, 2), (128, 1)],
        ("flash_mla", "float8_e4m3fn"): every,  # not the fp8 cache's vendor: measured as any other kernel
        ("flashinfer", "float16"): every,
        ("flashinfer", "float8_e4m3fn"): [(16, 1), (16, 2), (64, 1)],
    }


def test_listed_keys_hold_every_query_dtype_not_only_the_platforms():
    keys = config_on(HOPPER).listed_keys("cuda")
    assert {(k[3], k[6]) for k in keys} == {("float16", "float16"), ("bfloat16", "bfloat16"),
                                            ("bfloat16", "float8_e4m3fn")}

"""The q_len axis (s_q query tokens per sequence, MTP decode) on a CPU: perf.yml's checks, case keys and
labels, results stored before the axis reading as one token, TFLOPs over s_q x heads rows, the build and tune
shapes, and what every implementation is handed at s_q > 1 (the vendors' real call shapes, stand-in modules
recording the call: their kernels need a GPU, tests/test_impls_gpu.py runs them)."""

import copy
import importlib.machinery
import json
import sys
import types

import pytest
import torch
import yaml

from mlagate import config
from mlagate.case import DENSE, Case, case_label
from mlagate.config.reader import ConfigError
from mlagate.measure import impls, metrics, shards
from mlagate.store.results import Store
from mlagate.store.results_file import BENCH_TIME, case_keys, parse_results_file

RAW = yaml.safe_load(config.DEFAULT_PATH.read_text())
FIXTURES = config.ROOT / "tests" / "fixtures" / "h200"
DEMO = config.ROOT / "demo" / "results"


def parse_with(edit):
    raw = copy.deepcopy(RAW)
    edit(raw)
    return config.parse(raw)


# -- perf.yml ---------------------------------------------------------------------------------------

def test_the_grids_measure_mtp_at_16_heads_in_quick_and_1_2_4_in_full():
    cfg = config.load()
    assert cfg.grid.sizes["quick"][3] == (1, 2) and cfg.grid.sizes["full"][3] == (1, 2, 4)
    assert {w.q_len for w in cfg.workloads.values()} == {(1, 2)} and len(cfg.workloads) == 4
    quick = cfg.cases("quick", ["tilelang-seesaw"], "cuda")
    assert sorted({(c.heads, c.q_len) for c in quick}) == [(16, 1), (16, 2)]
    assert "tilelang-seesaw h=16 s_q=2 b=64 s=4096 float16" in [c.label() for c in quick]


@pytest.mark.parametrize("value, message", [
    ([0], r"grid.quick.q_len: every entry must be an integer >= 1, got 0"),
    ([9], r"grid.quick.q_len: 9 is not one of 1, 2, 3, 4, 5, 6, 7, 8"),
    ([1, 1], r"grid.quick.q_len: entries must be unique, got \[1, 1\]"),
    (["2"], r"grid.quick.q_len: every entry must be an integer >= 1, got '2'"),
    ([True], r"grid.quick.q_len: every entry must be an integer >= 1, got True"),
    ([], r"grid.quick.q_len: must be a non-empty list, got \[\]"),
])
def test_a_bad_q_len_is_refused_naming_the_key(value, message):
    with pytest.raises(ConfigError, match=message):
        parse_with(lambda raw: raw["grid"]["quick"].update(q_len=value))


def test_a_grid_without_q_len_names_the_missing_key():
    with pytest.raises(ConfigError, match=r"^grid.full.q_len: must be a non-empty list, got None$"):
        parse_with(lambda raw: raw["grid"]["full"].pop("q_len"))


def test_a_workload_with_a_sequence_shorter_than_its_query_tokens_is_refused():
    def edit(raw):
        raw["workloads"]["ragged-4k"].update(q_len=[1, 8], sigma=3.0)  # a tail of 1-token sequences
    with pytest.raises(ConfigError, match=r"^workloads.ragged-4k.q_len: 8 query tokens, but batch 64 holds a "
                                          r"sequence of 1 \(the kernels refuse a cache shorter"):
        parse_with(edit)


def test_a_workloads_key_does_not_move_with_its_q_len():
    cfg = config.load()
    before = parse_with(lambda raw: raw["workloads"]["ragged-4k"].update(q_len=[1]))
    assert before.workloads["ragged-4k"].q_len == (1,) and cfg.workloads["ragged-4k"].q_len == (1, 2)
    assert before.workloads["ragged-4k"].tag(64) == cfg.workloads["ragged-4k"].tag(64)
    with pytest.raises(ConfigError, match=r"^workloads.ragged-4k.q_len: missing$"):
        parse_with(lambda raw: raw["workloads"]["ragged-4k"].pop("q_len"))


def test_the_vendor_is_measured_only_where_it_has_a_kernel_for_the_query_tokens():
    def edit(raw):
        raw["grid"]["quick"].update(heads=[16, 128])
    cfg = parse_with(edit)
    aiter = {(c.heads, c.q_len) for c in cfg.cases("quick", ["aiter"], "rocm") if not c.paged}
    assert aiter == {(16, 1), (16, 2), (128, 1)}  # vendor_q_len_heads [16]
    flash = {(c.heads, c.q_len) for c in cfg.cases("quick", ["flash_mla"], "cuda") if not c.paged}
    assert flash == {(16, 1), (16, 2), (128, 1), (128, 2)}
    with pytest.raises(ConfigError, match=r"^platforms.rocm.vendor_q_len_heads: 64 is not one of 16, 128$"):
        parse_with(lambda raw: raw["platforms"]["rocm"].update(vendor_q_len_heads=[64]))


# -- keys, labels, stored results --------------------------------------------------------------------

def test_a_case_key_holds_q_len_before_the_workload_and_the_label_says_s_q():
    case = Case("flash_mla", 64, 4096, "float16", 16, 2)
    assert case.key == ("flash_mla", 64, 4096, "float16", 16, 2, "float16", DENSE)
    assert case.label() == "flash_mla h=16 s_q=2 b=64 s=4096 float16"
    assert Case("flash_mla", 64, 4096, "float16", 16).label() == "flash_mla h=16 b=64 s=4096 float16"  # as before
    assert case_label(("tilelang-seesaw", 64, 4096, "float16", 16, 4, "float16", "ragged-4k@1234abcd")) == \
        "tilelang-seesaw h=16 s_q=4 b=64 s=4096 float16 ragged-4k"


def test_parameters_recorded_before_q_len_read_as_one_token():
    dense = [["'flash_mla'"], ["64"], ["4096"], ["'float16'"], ["16"]]
    assert case_keys(dense) == [("flash_mla", 64, 4096, "float16", 16, 1, "float16", DENSE)]
    assert case_keys([*dense, ["1", "2"]]) == [("flash_mla", 64, 4096, "float16", 16, q, "float16", DENSE)
                                                for q in (1, 2)]
    assert case_keys([*dense, ["'ragged-4k@ab'"]]) == [("flash_mla", 64, 4096, "float16", 16, 1, "float16",
                                                         "ragged-4k@ab")]
    assert case_keys([*dense, ["2"], ["'ragged-4k@ab'"]]) == [("flash_mla", 64, 4096, "float16", 16, 2,
                                                                "float16", "ragged-4k@ab")]
    with pytest.raises(ValueError, match=r"parameter q_len: '0' is not a positive integer"):
        case_keys([*dense, ["0"]])


@pytest.mark.parametrize("root", [FIXTURES / "results", FIXTURES / "results-full", DEMO], ids=lambda p: p.name)
def test_every_committed_result_reads_as_one_query_token(root):
    files = [p for p in root.rglob("*.json") if p.name not in ("machine.json", "benchmarks.json")]
    assert files
    keys = set()
    for path in files:
        _, _, benchmarks = parse_results_file(path)  # the TFLOPs/latency agreement holds at q_len 1
        keys |= {k for entries in benchmarks.values() for k in entries}
    assert keys and {k[5] for k in keys} == {1}
    if root == DEMO:  # its dense benchmarks have 5 parameters, its workload ones 6 (the workload last)
        assert sum(k[-1] != DENSE for k in keys) == 32 and len(keys) == 48


def test_a_store_of_old_results_gates_under_todays_keys():
    machine = next(p.name for p in (FIXTURES / "results").iterdir() if p.is_dir())
    store = Store(FIXTURES / "results")
    history = store.load_all(machine)
    assert history and all(k[5] == 1 for r in history.values() for k in r.entries(BENCH_TIME))


def test_tflops_count_s_q_times_heads_rows_and_the_cache_once():
    assert metrics.flops(64, 16, 4096, 2) == 2 * metrics.flops(64, 16, 4096) == metrics.flops(64, 32, 4096)
    one, two = metrics.bytes_moved(64, 16, 4096, "float16"), metrics.bytes_moved(64, 16, 4096, "float16", 2)
    assert two - one == 64 * 16 * (576 + 512) * 2  # the cache is read once for both tokens: only q and out grow
    assert metrics.bytes_moved(64, 32, 4096, "float16") == two


def test_a_grid_point_of_one_token_keeps_its_shard():
    old = Case("tilelang-seesaw", 64, 4096, "float16", 16)
    text = "64,4096,float16,16"  # how runner_shard hashed this point before q_len
    import hashlib
    assert shards.runner_shard(old, 7) == int(hashlib.sha1(text.encode()).hexdigest(), 16) % 7
    assert shards.point(Case("tilelang-seesaw", 64, 4096, "float16", 16, 2)) != shards.point(old)


def test_the_asv_params_carry_q_len(monkeypatch):
    from mlagate.measure import asv_suite
    monkeypatch.setenv("MLAGATE_GRID", "quick")
    monkeypatch.setenv("MLAGATE_IMPLS", "tilelang-seesaw")
    monkeypatch.setattr(asv_suite, "platform", lambda: "cuda")
    params, names = asv_suite.params()
    assert names == ["impl", "batch", "seqlen", "dtype", "heads", "q_len", "kv_dtype"] and params[5] == [1, 2]
    params, names = asv_suite.params(workloads=True)
    assert names[5:] == ["q_len", "kv_dtype", "workload"] and params[5] == [1, 2]


# -- build and tune -------------------------------------------------------------------------------

def test_the_build_lowers_more_query_tokens_at_the_quick_grids_points_only():
    from mlagate.build.plan import build_shapes
    sizes = config.load().grid.sizes
    full = build_shapes(sizes, "full", ("float16", "bfloat16"))
    one = [s for s in full if s.s_q == 1]
    assert len(one) == 2 * 5 * 4 * 2 and sorted({(s.heads, s.s_q, s.seqlen) for s in full if s.s_q > 1}) == [
        (16, 2, 4096), (16, 4, 4096)]
    assert len(full) - len(one) == 8  # 10% more, not 3x
    quick = build_shapes(sizes, "quick", ("float16",))
    assert sorted((s.batch, s.s_q) for s in quick) == [(64, 1), (64, 2), (128, 1), (128, 2)]


def test_a_tuned_table_keys_s_q_and_reads_old_entries_as_one_token(tmp_path):
    from mlagate.kernels import mla_decode, tuned
    hopper = mla_decode.CONFIGS["hopper"]
    entries = [tuned.Entry(mla_decode.Shape(64, 4096, 16, "float16", s_q=q), hopper.with_(num_split=2), {"q": q})
               for q in (1, 2)]
    path = tuned.write_table("sm_90", "hopper", entries, tmp_path / "sm_90.yaml")
    text = path.read_text()
    assert text.count("s_q") == 1 and "s_q: 2" in text  # one token is left unsaid, as the committed tables are
    table = tuned.load_table("sm_90", path)["hopper"]
    assert set(table) == {(64, 4096, 16, "float16", 1), (64, 4096, 16, "float16", 2)}
    committed = tuned.load_table("sm_90")
    assert all(key[4] == 1 for rows in committed.values() for key in rows)


def test_a_tune_shape_names_its_folder_and_case_by_s_q():
    from mlagate.kernels import mla_decode
    from mlagate.tune.report import _label
    from mlagate.tune.rules import ShapePlan
    plan = ShapePlan(mla_decode.Shape(64, 4096, 16, "float16", s_q=2), {}, {}, {}, "d", "d")
    assert plan.folder == "b64-s4096-h16-sq2-float16" and plan.case("tilelang-hopper").q_len == 2
    assert _label((64, 4096, 16, "float16", 2)) == "h=16 s_q=2 b=64 s=4096 float16"


# -- implementations at s_q > 1 --------------------------------------------------------------------

def dense_inputs(s_q=2, batch=2, heads=16, seqlen=128):
    q, q_pe = torch.randn(batch, s_q, heads, 512), torch.randn(batch, s_q, heads, 64)
    return q, q_pe, torch.randn(batch, seqlen, 1, 512), torch.randn(batch, seqlen, 1, 64)


def stand_in(monkeypatch, name, **attrs):
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    module.__dict__.update(attrs)
    monkeypatch.setitem(sys.modules, name, module)
    return module


def test_flash_mla_gets_q_with_its_s_q_axis_and_causal(monkeypatch):
    calls = []

    def flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v, meta, **kw):
        calls.append((q.shape, k_cache.shape, cache_seqlens.tolist(), head_dim_v, kw))
        return torch.zeros(*q.shape[:-1], head_dim_v), None

    stand_in(monkeypatch, "flash_mla", flash_mla_with_kvcache=flash_mla_with_kvcache,
             get_mla_metadata=lambda: (object(), None))
    monkeypatch.setattr(impls.mla_decode, "device_arch", lambda device: "sm_90a")
    for s_q, causal in ((2, True), (1, False)):
        inputs = dense_inputs(s_q) if s_q > 1 else tuple(t.squeeze(1) if i < 2 else t
                                                         for i, t in enumerate(dense_inputs(1)))
        out = impls.prepare("flash_mla", inputs, "cpu")()
        shape, cache, lengths, dim, kw = calls[-1]
        assert shape == (2, s_q, 16, 576) and cache == (4, 64, 1, 576) and lengths == [128, 128] and dim == 512
        assert kw["causal"] is causal and kw["use_legacy"] is True and out.shape == (2, s_q, 16, 512)


def fake_flashinfer(monkeypatch) -> tuple:
    """A FlashInfer MLA wrapper stand-in on sm_90a: (what plan() was given, what run() was given: the query's
    shapes, the cache's dtypes and its keywords, e.g. flashinfer-python 0.7.2.post1's ckv_scale and kpe_scale)."""
    planned, ran = {}, {}

    class Wrapper:
        def __init__(self, workspace, backend):
            planned["backend"] = backend

        def plan(self, **kw):
            planned.update(kw)

        def run(self, query, kv_cache, **kw):
            ran.update(kw, q=[t.shape for t in query], cache=[t.dtype for t in kv_cache])
            return torch.zeros(query[0].shape)

    class Meta:
        @staticmethod
        def csr(qo_indptr, kv_indptr, kv_indices, kv_len_arr):
            return {"qo_indptr": qo_indptr.tolist(), "kv_indptr": kv_indptr.tolist(), "kv_len": kv_len_arr.tolist()}

    stand_in(monkeypatch, "flashinfer")
    stand_in(monkeypatch, "flashinfer.mla", BatchMLAPagedAttentionWrapper=Wrapper, MLAPlanMetadata=Meta)
    monkeypatch.setattr(impls.mla_decode, "device_arch", lambda device: "sm_90a")
    return planned, ran


def test_flashinfer_is_planned_with_qo_indptr_of_s_q_rows_per_sequence(monkeypatch):
    planned, ran = fake_flashinfer(monkeypatch)
    out = impls.prepare("flashinfer", dense_inputs(2, batch=3), "cpu")()
    assert planned["metadata"] == {"qo_indptr": [0, 2, 4, 6], "kv_indptr": [0, 2, 4, 6], "kv_len": [128] * 3}
    assert planned["causal"] is True and planned["num_heads"] == 16 and planned["query_layout"] == "split"
    assert ran["q"] == [(6, 16, 512), (6, 16, 64)] and out.reshape(3, 2, 16, 512).shape == (3, 2, 16, 512)


def test_aiter_gets_qo_indptr_and_max_seqlen_q(monkeypatch):
    calls = []

    def mla_decode_fwd(q, kv, o, qo_indptr, kv_indptr, kv_indices, last_page_lens, max_seqlen_q, sm_scale):
        calls.append((q.shape, o.shape, qo_indptr.tolist(), kv_indptr.tolist(), max_seqlen_q))

    stand_in(monkeypatch, "aiter")
    stand_in(monkeypatch, "aiter.mla", mla_decode_fwd=mla_decode_fwd)
    monkeypatch.setattr(impls.mla_decode, "device_arch", lambda device: "gfx942")
    inputs = tuple(t.to(torch.bfloat16) for t in dense_inputs(2, batch=2, seqlen=8))
    impls.prepare("aiter", inputs, "cpu")()
    assert calls == [((4, 16, 576), (4, 16, 512), [0, 2, 4], [0, 8, 16], 2)]
    # where aiter's dispatch has no code object the case is not runnable, with its reason: the pinned aiter's
    # fp8 decode stops at 4 query tokens (the dispatch asked as for an fp8 query, the harness feeds bf16)
    from mlagate.measure import aiter_dispatch
    real = aiter_dispatch.decode_kernel
    monkeypatch.setattr(aiter_dispatch, "decode_kernel", lambda dtype, heads, **kw: real("float8_e4m3fnuz", heads,
                                                                                         **kw))
    inputs = tuple(t.to(torch.bfloat16) for t in dense_inputs(5, seqlen=8))
    with pytest.raises(impls.Unavailable, match=r"^aiter: TORCH_CHECK.*qo_len <= 4"):
        impls.prepare("aiter", inputs, "cpu")


def test_triton_is_not_runnable_past_one_token_and_says_why():
    with pytest.raises(impls.Unavailable, match=r"^triton: this Triton kernel \(the seed's\) takes one query token "
                                                r"per sequence, not 2"):
        impls.prepare("triton", dense_inputs(2), "cpu")


def test_the_bench_file_and_csv_carry_q_len(tmp_path):
    from mlagate.case import CaseResult, RunStatus
    from mlagate.measure import grid
    result = CaseResult(Case("flash_mla", 64, 4096, "float16", 16, 2), RunStatus.SKIPPED, "no GPU")
    grid.write_outputs(tmp_path / "bench.json", [result], {})
    back, _ = grid.read_outputs(tmp_path / "bench.json")
    assert back[0].case.q_len == 2
    header = (tmp_path / "bench.csv").read_text().splitlines()[0].split(",")
    assert header[4:8] == ["heads", "q_len", "kv_dtype", "workload"]
    old = json.loads((tmp_path / "bench.json").read_text())
    del old["results"][0]["q_len"]
    assert CaseResult.from_dict(old["results"][0]).case.q_len == 1  # a bench file from before the axis

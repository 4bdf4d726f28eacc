"""The kv_dtype axis (an fp8 KV cache, issue 44) on a CPU: perf.yml's checks (the arch's fp8 format, the vendor an
fp8 cache is held to), case keys and labels, records from before the axis reading as a cache in the query's dtype,
the bytes an fp8 cache reads, ratios only within one (query, cache) format, and what each vendor is handed at
fp8 (stand-in modules recording the call: the kernels need a GPU, tests/test_impls_gpu.py runs FlashInfer's)."""

import copy
import hashlib
import json

import pytest
import torch
import yaml

from mlagate import config
from mlagate.case import DENSE, Case, CaseResult, RunStatus
from mlagate.config.reader import ConfigError
from mlagate.decide.vendor_ratio import judge_ratio
from mlagate.decide.verdict import CaseVerdict
from mlagate.decide.vocabulary import Kind, Status
from mlagate.kernels import mla_decode
from mlagate.measure import grid, impls, metrics, shards
from mlagate.measure.layouts import Paged, as_pages, split_scale
from test_q_len import dense_inputs, fake_flashinfer, stand_in

RAW = yaml.safe_load(config.DEFAULT_PATH.read_text())
CFG = config.load()
FN, FNUZ = "float8_e4m3fn", "float8_e4m3fnuz"


def parse_with(edit):
    raw = copy.deepcopy(RAW)
    edit(raw)
    return config.parse(raw)


# -- perf.yml ---------------------------------------------------------------------------------------

def test_each_platform_measures_its_archs_fp8_format_with_a_bf16_query():
    rocm, cuda = CFG.platform("rocm"), CFG.platform("cuda")
    assert rocm.formats() == [("bfloat16", "bfloat16"), ("bfloat16", FNUZ)]
    assert cuda.formats() == [("float16", "float16"), ("bfloat16", FN)]
    assert (rocm.vendor_impl(FNUZ), cuda.vendor_impl(FN), cuda.vendor_impl("float16")) == ("aiter", "flashinfer",
                                                                                           "flash_mla")
    # every grid point of the platform at each format: the quick grid's cost doubles, no more
    quick = [c for c in CFG.cases("quick", ["tilelang-seesaw"], "cuda")]
    assert sum(c.kv_dtype == FN for c in quick) == sum(c.kv_dtype == "float16" for c in quick) > 0
    assert {c.dtype for c in quick if c.kv_dtype == FN} == {"bfloat16"}


@pytest.mark.parametrize("edit, message", [
    (lambda r: r["platforms"]["rocm"].update(kv_dtypes=["bfloat16", FN]),
     r"^platforms.rocm.kv_dtypes: float8_e4m3fn is not rocm's fp8 format \(its arch computes in float8_e4m3fnuz\)$"),
    (lambda r: r["platforms"]["cuda"].update(kv_dtypes=["float16", FNUZ]),
     r"^platforms.cuda.kv_dtypes: float8_e4m3fnuz is not cuda's fp8 format"),
    (lambda r: r["platforms"]["cuda"].update(kv_dtypes=["float16", "int4"]),
     r"^platforms.cuda.kv_dtypes: 'int4' is not one of float16, bfloat16, float8_e4m3fn, float8_e4m3fnuz$"),
    (lambda r: r["platforms"]["cuda"].update(kv_dtypes=["bfloat16", FN]),
     r"^platforms.cuda.kv_dtypes: a bfloat16 cache is read in its query's dtype, but bfloat16 is not in "
     r"platforms.cuda.dtypes \['float16'\]$"),
    (lambda r: r["platforms"]["cuda"].pop("fp8_vendor"), r"^platforms.cuda.fp8_vendor: missing"),
    (lambda r: r["platforms"]["cuda"].update(kv_dtypes=["float16"]),
     r"^platforms.cuda.fp8_vendor: no fp8 cache in platforms.cuda.kv_dtypes to hold to it$"),
    (lambda r: r["platforms"]["cuda"]["fp8_vendor"].update(impl="flashmla"),
     r"^platforms.cuda.fp8_vendor.impl: 'flashmla' is not in implementations$"),
    (lambda r: r["platforms"]["cuda"]["fp8_vendor"].update(q_len_heads=[8]),
     r"^platforms.cuda.fp8_vendor.q_len_heads: 8 is not one of 16, 32, 64$"),
    (lambda r: r["platforms"]["cuda"]["fp8_vendor"].update(extra=1), r"^platforms.cuda.fp8_vendor.extra: unknown key"),
])
def test_a_bad_cache_format_or_fp8_vendor_is_refused_naming_the_key(edit, message):
    with pytest.raises(ConfigError, match=message):
        parse_with(edit)


def test_without_kv_dtypes_a_platform_measures_its_16_bit_caches_as_before():
    def edit(raw):
        for p in raw["platforms"].values():
            p.pop("kv_dtypes"), p.pop("fp8_vendor")
    cfg = parse_with(edit)
    assert {c.kv_dtype for c in cfg.cases("quick", ["tilelang-seesaw"], "cuda")} == {"float16"}
    assert cfg.platform("cuda").formats() == [("float16", "float16")]


# -- keys, labels, records from before the axis -------------------------------------------------------

def test_a_case_key_holds_the_cache_dtype_and_the_label_says_it_only_when_it_is_not_the_querys():
    fp8 = Case("tilelang-seesaw", 64, 4096, "bfloat16", 16, 2, FN)
    assert fp8.key == ("tilelang-seesaw", 64, 4096, "bfloat16", 16, 2, FN, DENSE)
    # the seesaw has no fp8 cache: its fp8 cases run the hopper family's kernel, and say so
    assert fp8.label() == \
        "tilelang-seesaw h=16 s_q=2 b=64 s=4096 bfloat16 kv=float8_e4m3fn (runs tilelang-hopper's kernel)"
    assert Case("tilelang-hopper", 64, 4096, "bfloat16", 16, 2, FN).label() == \
        "tilelang-hopper h=16 s_q=2 b=64 s=4096 bfloat16 kv=float8_e4m3fn"
    old = Case("tilelang-seesaw", 64, 4096, "float16", 16)
    assert old.kv_dtype == "float16" and old.label() == "tilelang-seesaw h=16 b=64 s=4096 float16"
    with pytest.raises(ValueError, match="kv_dtype 'ragged-4k@ab' is not a dtype"):  # a positional workload
        Case("tilelang-seesaw", 64, 4096, "float16", 16, 1, "ragged-4k@ab")


def test_a_bench_file_from_before_the_axis_reads_as_a_cache_in_the_querys_dtype(tmp_path):
    result = CaseResult(Case("flash_mla", 64, 4096, "float16", 16), RunStatus.SKIPPED, "no GPU")
    grid.write_outputs(tmp_path / "bench.json", [result], {})
    old = json.loads((tmp_path / "bench.json").read_text())
    del old["results"][0]["kv_dtype"]
    (tmp_path / "bench.json").write_text(json.dumps(old))
    back, _ = grid.read_outputs(tmp_path / "bench.json")
    assert back[0].case == result.case and back[0].case.kv_dtype == "float16"


def test_a_16_bit_point_keeps_its_shard_and_an_fp8_one_is_its_own_point():
    bf16 = Case("tilelang-cdna3", 64, 4096, "bfloat16", 16)
    fp8 = Case("tilelang-cdna3", 64, 4096, "bfloat16", 16, 1, FNUZ)
    assert shards.point(bf16) != shards.point(fp8)
    before = int(hashlib.sha1(b"64,4096,bfloat16,16").hexdigest(), 16)  # its point's text before the axis
    assert [shards.runner_shard(bf16, n) for n in (2, 3, 5, 7)] == [before % n for n in (2, 3, 5, 7)]


# -- bytes and ratios --------------------------------------------------------------------------------

def test_an_fp8_cache_reads_one_byte_an_element():
    b, h, s = 64, 16, 4096
    cache, rows = b * s * 576, b * h * (576 + 512)
    assert metrics.bytes_moved(b, h, s, "bfloat16") == (cache + rows) * 2
    assert metrics.bytes_moved(b, h, s, "bfloat16", kv_dtype=FN) == cache + rows * 2
    assert metrics.bytes_moved(b, h, s, "bfloat16", kv_dtype=FNUZ) == metrics.bytes_moved(b, h, s, "bfloat16",
                                                                                          kv_dtype=FN)


def _ok(case, ms):
    from mlagate.case import Samples

    samples = Samples(times_ms=(ms,) * 20, backend="cuda-event", flush_bytes=0, warmup_calls=1, device="x")
    return CaseResult(case, RunStatus.OK, samples=samples, gpu=0)


def test_a_ratio_is_taken_only_against_the_vendor_of_the_same_query_and_cache_formats():
    point = dict(batch=64, seqlen=4096, dtype="bfloat16", heads=16)
    rows = [_ok(Case("tilelang-seesaw", **point, kv_dtype=FN), 0.10),
            _ok(Case("flashinfer", **point, kv_dtype=FN), 0.08),
            _ok(Case("flash_mla", **point, kv_dtype=FN), 0.05),  # not the fp8 vendor: never a denominator
            _ok(Case("tilelang-seesaw", 64, 4096, "float16", 16), 0.2),
            _ok(Case("flash_mla", 64, 4096, "float16", 16), 0.1)]
    vendor = CFG.platform("cuda").vendor_impl
    out = {(r.case.impl, r.case.kv_dtype): r for r in metrics.add_metrics(rows, vendor=vendor)}
    assert out[("tilelang-seesaw", FN)].vendor_ratio == pytest.approx(0.8)  # over FlashInfer's e4m3 path
    assert out[("tilelang-seesaw", "float16")].vendor_ratio == pytest.approx(0.5)  # over FlashMLA's fp16
    # an fp8 TileLang case with only a 16-bit vendor measured has no ratio: never across formats
    alone = metrics.add_metrics([rows[0], rows[4]], vendor=CFG.platform("cuda").vendor_impl)
    assert alone[0].vendor_ratio is None


def test_the_ratio_rule_holds_an_fp8_cache_to_its_own_vendors_heads():
    rocm, rule = CFG.platform("rocm"), CFG.gate.ratio["rocm"]
    at_128 = CaseVerdict(("tilelang-cdna3", 64, 4096, "bfloat16", 128, 1, FNUZ, DENSE), Status.PASS)
    judge_ratio(at_128, None, None, rule, rocm)  # aiter has a 128-head bf16 kernel, but no 128-head a16w8
    assert [(n.kind, n.text) for n in at_128.warnings] == [(Kind.NO_VENDOR_KERNEL, (
        "no vendor ratio: aiter has no 128-head kernel for a float8_e4m3fnuz cache (perf.yml fp8_vendor.heads [16]); "
        "gated on latency alone"))]
    at_16 = CaseVerdict(("tilelang-cdna3", 64, 4096, "bfloat16", 16, 1, FNUZ, DENSE), Status.PASS)
    judge_ratio(at_16, 0.9, None, rule, rocm)
    assert at_16.status == Status.ERROR and at_16.reasons[0].kind == Kind.NO_RATIO


def test_a_failing_fp8_case_is_reproduced_beside_its_own_vendor():
    from mlagate.decide.verdict import Verdict
    from mlagate.decide.vocabulary import Outcome
    from mlagate.report.review import Review, reproduce

    fp8 = CaseVerdict(("tilelang-seesaw", 64, 4096, "bfloat16", 16, 1, FN, DENSE), Status.REGRESSION)
    fp16 = CaseVerdict(("tilelang-seesaw", 64, 4096, "float16", 16, 1, "float16", DENSE), Status.REGRESSION)
    lines = [command for command, _ in reproduce(Verdict(Outcome.REGRESSION, [fp8, fp16], base="b" * 40,
                                                         head="h" * 40),
                                                 Review(vendor_of=CFG.platform("cuda").vendor_impl))]
    assert "--impl tilelang-seesaw --impl flashinfer --dtype bfloat16" in lines[0]
    assert "--impl tilelang-seesaw --impl flash_mla --dtype float16" in lines[1]


# -- the vendors at fp8 --------------------------------------------------------------------------------

def fp8_inputs(fmt=FN, batch=2, seqlen=128, s_q=1, heads=16, scale=0.5):
    q, q_pe, kv, k_pe = dense_inputs(max(s_q, 2), batch=batch, heads=heads, seqlen=seqlen)
    q, q_pe = (t[:, :s_q].squeeze(1) if s_q == 1 else t[:, :s_q] for t in (q, q_pe))
    to = getattr(torch, fmt)
    return q.to(torch.bfloat16), q_pe.to(torch.bfloat16), kv.to(to), k_pe.to(to), scale


def test_the_fp8_inputs_carry_their_scale_to_every_layout():
    inputs = fp8_inputs()
    tensors, scale = split_scale(inputs)
    assert len(tensors) == 4 and scale == 0.5 and split_scale(inputs[:4])[1] is None
    paged = as_pages(inputs, "x", 64)
    assert isinstance(paged, Paged) and paged.kv_scale == 0.5 and paged.kv_cache.dtype == torch.float8_e4m3fn
    kv, k_pe = mla_decode.dequantized(inputs[2], inputs[3], 0.5)  # what the harness's reference reads
    assert torch.equal(kv, inputs[2].double() * 0.5) and torch.equal(k_pe, inputs[3].double() * 0.5)


def test_flashinfer_plans_an_e4m3_cache_with_a_bf16_query_and_runs_it_with_the_scale(monkeypatch):
    planned, ran = fake_flashinfer(monkeypatch)
    impls.prepare("flashinfer", fp8_inputs(), "cpu")()
    assert (planned["q_data_type"], planned["kv_data_type"]) == (torch.bfloat16, torch.float8_e4m3fn)
    assert {k: ran[k] for k in ran if k != "q"} == {"ckv_scale": 0.5, "kpe_scale": 0.5,
                                                     "cache": [torch.float8_e4m3fn] * 2}
    impls.prepare("flashinfer", tuple(t.to(torch.bfloat16) for t in fp8_inputs()[:4]), "cpu")()
    assert ran["cache"] == [torch.bfloat16] * 2 and "ckv_scale" not in planned  # 16 bits: no scale passed


def test_flash_mla_refuses_an_fp8_cache_with_the_reason_measured_on_the_h200(monkeypatch):
    stand_in(monkeypatch, "flash_mla", flash_mla_with_kvcache=None, get_mla_metadata=None)
    monkeypatch.setattr(impls.mla_decode, "device_arch", lambda device: "sm_90a")
    with pytest.raises(impls.Unavailable, match=r"^flash_mla: sgl-flash-mla 1.0.0's dense decode refuses a "
                                                r"torch.float8_e4m3fn cache with a torch.bfloat16 query"):
        impls.prepare("flash_mla", fp8_inputs(), "cpu")


def test_aiter_runs_a16w8_persistent_with_its_work_lists_and_the_kv_scale(monkeypatch):
    calls, planned = [], []

    def get_mla_metadata_info_v1(batch, s_q, heads, q_dtype, kv_dtype, is_sparse, fast_mode=True):
        planned.append(("info", batch, s_q, heads, q_dtype, kv_dtype, is_sparse))
        return [((2,), torch.uint64), ((5,), torch.int32), ((9, 8), torch.int32), ((3,), torch.int32),
                ((2, 2), torch.int32), ((7,), torch.int32)]

    def get_mla_metadata_v1(qo_indptr, kv_indptr, heads_per_k, heads_k, causal, *buffers, **kw):
        planned.append(("plan", qo_indptr.tolist(), kv_indptr.tolist(), heads_per_k, heads_k, causal, len(buffers),
                        kw["max_seqlen_qo"]))

    def mla_decode_fwd(q, kv, o, qo_indptr, kv_indptr, kv_indices, last_page_lens, max_seqlen_q, sm_scale, **kw):
        calls.append((q.dtype, kv.dtype, kv.shape, max_seqlen_q, sorted(kw), kw["kv_scale"].tolist(),
                      kw["kv_scale"].dtype))

    stand_in(monkeypatch, "aiter", get_mla_metadata_info_v1=get_mla_metadata_info_v1,
             get_mla_metadata_v1=get_mla_metadata_v1)
    stand_in(monkeypatch, "aiter.mla", mla_decode_fwd=mla_decode_fwd)
    monkeypatch.setattr(impls.mla_decode, "device_arch", lambda device: "gfx942")
    impls.prepare("aiter", fp8_inputs(FNUZ, seqlen=8, s_q=2), "cpu")()
    assert planned == [("info", 2, 2, 16, torch.bfloat16, torch.float8_e4m3fnuz, False),
                       ("plan", [0, 2, 4], [0, 8, 16], 16, 1, True, 6, 2)]
    assert calls == [(torch.bfloat16, torch.float8_e4m3fnuz, (16, 1, 1, 576), 2,
                      ["kv_scale", "reduce_final_map", "reduce_indptr", "reduce_partial_map", "work_indptr",
                       "work_info_set", "work_meta_data"], [0.5], torch.float32)]
    # aiter's one a16w8 object is 16 heads: a 128-head fp8 case is not runnable, with the dispatch's reason
    with pytest.raises(impls.Unavailable, match=r"^aiter: mla_decode_stage1_asm_fwd: no code object for q bfloat16, "
                                                r"kv float8_e4m3fnuz, 128 heads, max_seqlen_q 1, persistent"):
        impls.prepare("aiter", fp8_inputs(FNUZ, seqlen=8, heads=128), "cpu")


def test_triton_and_the_eager_reference_refuse_an_fp8_cache():
    for impl in ("triton", "torch"):
        with pytest.raises(impls.Unavailable, match=rf"^{impl}: .* reads a 16-bit cache, not torch.float8_e4m3fn"):
            impls.prepare(impl, fp8_inputs(), "cpu")

"""A vendor dispatch change is a named event: base and head ran different vendor kernels (or versions), so
the vendor ratio moved with the vendor and the gate does not blame TileLang. On the H200 records, with the
env sidecars edited to name the vendor kernels each side ran."""

import json

import pytest

import gate_fixtures as fx
from mlagate.decide.vendor_ratio import vendor_kernel
from mlagate.decide.verdict import Kind, Status
from mlagate.store.env import parse_env
from mlagate.store.results import Store
from mlagate.store.results_file import BENCH_RATIO

HOPPER_128 = ("tilelang-hopper", 128, 4096, "float16", 128, 1, "float16", "dense")


@pytest.fixture
def root(tmp_path):
    return fx.copy_store(tmp_path)


def name_vendor(root, commit, version, kernels=None):
    """The env sidecar of ``commit`` as a record of today writes it: the vendor kernels it ran."""
    path = Store(root).sidecar_path(fx.MACHINE, commit, "env")
    env = json.loads(path.read_text())
    env["start"]["vendors"] = {"flash_mla": {"distribution": "sgl-flash-mla", "version": version,
                                             "kernels": kernels or {}}}
    path.write_text(json.dumps(env))


def envs(root, base=fx.BASE, head=fx.DOCS):
    store = Store(root)
    return tuple(store.read_env(fx.MACHINE, c) for c in (base, head))


def drop_ratio(root, case, factor=0.9):
    fx.edit(root, fx.DOCS, BENCH_RATIO, case, lambda v, s: (v * factor, s))


def test_a_vendor_version_change_names_the_event_and_re_baselines_the_ratio(root):
    drop_ratio(root, fx.HOPPER_64)  # the 10.7% drop test_gate's ratio-drop test fails on
    name_vendor(root, fx.BASE, "1.0.0")
    name_vendor(root, fx.DOCS, "1.0.1")
    cases = {c.case: c for c in fx.evaluate(root, head=fx.DOCS, envs=envs(root)).cases}
    cv = cases[fx.HOPPER_64]
    assert cv.status == Status.PASS and not cv.ratio_dropped and not cv.reasons
    (note,) = [w for w in cv.warnings if w.kind is Kind.VENDOR_CHANGED]
    assert "flash_mla 1.0.0" in note.text and "1.0.1" in note.text and "re-baselined" in note.text
    assert any(w.kind is Kind.VENDOR_CHANGED for w in cases[HOPPER_128].warnings)  # a version moves every ratio


def test_a_kernel_change_is_named_for_the_ratios_it_touches_only(root):
    drop_ratio(root, fx.HOPPER_64)
    drop_ratio(root, HOPPER_128)
    name_vendor(root, fx.BASE, "1.0.0", {"float16/128": {"kernel": "decode_a"}})
    name_vendor(root, fx.DOCS, "1.0.0", {"float16/128": {"kernel": "decode_b"}, "float16/16": {"kernel": "x"}})
    cases = {c.case: c for c in fx.evaluate(root, head=fx.DOCS, envs=envs(root)).cases}
    # both cases have 128 heads: each names the move from decode_a to decode_b and neither fails
    for case in (fx.HOPPER_64, HOPPER_128):
        assert cases[case].status == Status.PASS
        (note,) = [w for w in cases[case].warnings if w.kind is Kind.VENDOR_CHANGED]
        assert "decode_a in base" in note.text and "decode_b in head" in note.text


def test_the_same_vendor_kernel_keeps_the_ratio_drop_rule(root):
    drop_ratio(root, fx.HOPPER_64)
    for commit in (fx.BASE, fx.DOCS):
        name_vendor(root, commit, "1.0.0", {"float16/128": {"kernel": "decode_a"}})
    cv = {c.case: c for c in fx.evaluate(root, head=fx.DOCS, envs=envs(root)).cases}[fx.HOPPER_64]
    assert cv.status == Status.REGRESSION and cv.reasons[0].kind is Kind.RATIO_DROP
    assert not any(w.kind is Kind.VENDOR_CHANGED for w in cv.warnings)


def test_records_that_name_no_vendor_are_judged_as_before(root):
    drop_ratio(root, fx.HOPPER_64)
    name_vendor(root, fx.DOCS, "1.0.1")  # base is a record from before vendors were named
    cv = {c.case: c for c in fx.evaluate(root, head=fx.DOCS, envs=envs(root)).cases}[fx.HOPPER_64]
    assert cv.status == Status.REGRESSION and cv.reasons[0].kind is Kind.RATIO_DROP
    assert vendor_kernel(envs(root)[0], "flash_mla", fx.HOPPER_64) is None


def test_a_record_that_names_no_kernel_is_compared_by_version_alone(root):
    """The first record that names its kernels (profiled) against one from before: same version, no event."""
    drop_ratio(root, fx.HOPPER_64)
    name_vendor(root, fx.BASE, "1.0.0")
    name_vendor(root, fx.DOCS, "1.0.0", {"float16/128": {"kernel": "decode_a"}})
    cv = {c.case: c for c in fx.evaluate(root, head=fx.DOCS, envs=envs(root)).cases}[fx.HOPPER_64]
    assert cv.status == Status.REGRESSION and cv.reasons[0].kind is Kind.RATIO_DROP
    assert not any(w.kind is Kind.VENDOR_CHANGED for w in cv.warnings)


def test_the_kernels_that_ran_are_folded_per_row_beside_the_dispatch_table():
    from mlagate.measure.kernels_run import by_row, short_name

    rows = [{"impl": "flash_mla", "dtype": "float16", "heads": 16, "q_len": 1, "kernels": ["split", "combine"]},
            {"impl": "flash_mla", "dtype": "float16", "heads": 16, "q_len": 1, "kernels": ["split", "other"]},
            {"impl": "flash_mla", "dtype": "float16", "heads": 16, "q_len": 2, "kernels": ["split2"]},
            {"impl": "tilelang-seesaw", "dtype": "float16", "heads": 16, "kernels": ["mine"]},
            {"impl": "aiter", "dtype": "bfloat16", "heads": 16, "kernels": ["_ZN5aiter_k"]},
            {"impl": "flashinfer", "dtype": "float16", "heads": 16}]  # skipped: named nothing
    vendors = {"flash_mla": {"version": "1.0.0"}, "flashinfer": {"version": "0.7"},
               "aiter": {"version": "0.1.7", "kernels": {"bfloat16/16": {"kernel": "_ZN5aiter_k", "vgprs": 128}}}}
    out = by_row(rows, vendors)
    assert out["flash_mla"]["kernels"] == {
        "float16/16": {"ran": ["split", "combine", "other"],
                       "kernel": " + ".join(short_name(n) for n in ("split", "combine", "other"))},
        "float16/16/s_q=2": {"ran": ["split2"], "kernel": short_name("split2")}}
    assert out["aiter"]["kernels"]["bfloat16/16"] == {"kernel": "_ZN5aiter_k", "vgprs": 128, "ran": ["_ZN5aiter_k"]}
    assert "kernels" not in out["flashinfer"] and "tilelang-seesaw" not in out
    assert "ran" not in vendors["aiter"]["kernels"]["bfloat16/16"]  # the env it was given is left as it was
    key = ("flash_mla", 64, 4096, "float16", 16, 1, "float16", "dense")
    assert vendor_kernel(parse_env({"start": {"vendors": out}}), "flash_mla", key) == (
        "1.0.0", out["flash_mla"]["kernels"]["float16/16"]["kernel"])


@pytest.mark.parametrize("name,short", [
    ("void ns::dense::flash_fwd_splitkv_mla_kernel<ns::Traits<cutlass::half_t, 576>, X>(Params, Y)",
     "flash_fwd_splitkv_mla_kernel"),
    ("void flashinfer::mla::hopper::BatchMLAPageAttentionHopperKernel<T<false, 2u>, P>(P)",
     "BatchMLAPageAttentionHopperKernel"),
    ("main_kernel", "main_kernel"), ("void foo(int)", "foo")])
def test_a_kernel_reads_by_its_function_name_and_a_digest_of_its_whole_name(name, short):
    from mlagate.measure.kernels_run import short_name

    assert short_name(name).partition("#")[0] == short
    assert short_name(name) != short_name(name + " ")  # another instantiation: another kernel


def test_a_case_result_keeps_the_kernels_that_ran_through_its_file():
    from mlagate.case import Case, CaseResult, RunStatus

    r = CaseResult(Case("flash_mla", 64, 4096, "float16", 16), RunStatus.OK, kernels=("a", "b"))
    d = r.to_dict()
    assert d["kernels"] == ["a", "b"] and CaseResult.from_dict(json.loads(json.dumps(d))).kernels == ("a", "b")
    assert "kernels" not in CaseResult(r.case, RunStatus.OK).to_dict()


def test_a_torch_that_cannot_watch_gpu_kernels_names_none_and_launches_nothing_extra(monkeypatch):
    """The MI300X rehearsal's CPU torch has no CUDA profiler activity: the vendor case keeps its samples, no names."""
    import torch.profiler

    from mlagate.measure.kernels_run import kernels_run

    monkeypatch.setattr(torch.profiler, "supported_activities", lambda: {torch.profiler.ProfilerActivity.CPU})
    calls = []
    assert kernels_run(lambda: calls.append(1)) == () and calls == []


def test_an_fp8_cache_reads_its_own_row_of_the_vendor_kernels():
    """A bf16 query over an e4m3 cache ran another vendor kernel than over a bf16 cache: its row is "/kv=F"."""
    env = parse_env({"start": {"vendors": {"flashinfer": {"version": "0.7", "kernels": {
        "bfloat16/16": {"kernel": "bf16_cache"}, "bfloat16/16/kv=float8_e4m3fn": {"kernel": "e4m3_cache"}}}}}})
    fp8 = ("tilelang-hopper", 64, 4096, "bfloat16", 16, 1, "float8_e4m3fn", "dense")
    assert vendor_kernel(env, "flashinfer", fp8) == ("0.7", "e4m3_cache")
    assert vendor_kernel(env, "flashinfer", fp8[:6] + ("bfloat16", "dense")) == ("0.7", "bf16_cache")


def test_a_version_change_on_a_side_that_names_no_kernel_says_its_kernel(root):
    drop_ratio(root, fx.HOPPER_64)
    name_vendor(root, fx.BASE, "1.0.0")
    name_vendor(root, fx.DOCS, "1.0.1", {"float16/128": {"kernel": "decode_b"}})
    cv = {c.case: c for c in fx.evaluate(root, head=fx.DOCS, envs=envs(root)).cases}[fx.HOPPER_64]
    (note,) = [w for w in cv.warnings if w.kind is Kind.VENDOR_CHANGED]
    assert note.text.startswith("vendor kernel changed: flash_mla 1.0.0 ran its kernel in base, 1.0.1 decode_b in "
                                "head; the ratio")
    name_vendor(root, fx.BASE, "1.0.0", {"float16/128": {"kernel": "decode_a"}})
    name_vendor(root, fx.DOCS, "1.0.1")
    cv = {c.case: c for c in fx.evaluate(root, head=fx.DOCS, envs=envs(root)).cases}[fx.HOPPER_64]
    (note,) = [w for w in cv.warnings if w.kind is Kind.VENDOR_CHANGED]
    assert "flash_mla 1.0.0 ran decode_a in base, 1.0.1 its kernel in head;" in note.text

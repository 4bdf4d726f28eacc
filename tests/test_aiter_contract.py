"""The aiter contract from aiter's own code, on a CPU: the pinned amd-aiter wheel (pyproject's test extra,
the image's aiter) is installed; its ``mla_decode_fwd`` signature and its decode kernel table (replayed from
its asm_mla.cu, resources from the code objects' AMDGPU notes) are what impls._aiter and perf.yml rely on.
A pin bump that changes either fails here; the patched-copy tests show it. docs/aiter-contract-0.1.7.md."""

import ast
import itertools
import shutil
from pathlib import Path

import pytest

from mlagate import config
from mlagate.measure import aiter_dispatch as dispatch

PINNED = "0.1.7.post2.dev18"
ROOT = dispatch.meta_root()
# no skip: without the pinned wheel (pip install -e '.[aiter]') these fail, naming it

# impls._aiter: eight positional arguments, then sm_scale by keyword
CALLED = ("q", "kv_buffer", "o", "qo_indptr", "kv_indptr", "kv_indices", "kv_last_page_lens", "max_seqlen_q")
# the persistent call of a bf16 query over an fp8 cache (impls._aiter_a16w8) passes these by keyword
PERSISTENT = ("work_meta_data", "work_indptr", "work_info_set", "reduce_indptr", "reduce_final_map",
              "reduce_partial_map", "q_scale", "kv_scale")
# (query dtype, cache dtype, heads, q_len) -> the code object aiter's decode runs at max_seqlen_q = q_len as
# mlagate calls it (dispatch.persistent_call: non-persistent, but persistent for a16w8); every other head count
# none. bf16 at 16 heads has a causal-masked object (mask1) past one token; at 128 heads the chain never looks at
# max_seqlen_q: the one-token object, unmasked, at every q_len (its grid grows by q_len). a16w8 (bf16 query, fp8
# cache) has one object, persistent, at 16 heads and up to 4 tokens; a8w8 (fp8 query and cache) 16 and 128 heads.
BF16_16, BF16_128 = "mla/mla_dec_stage1_bf16_a16w16_subQ16_mqa16.co", "mla/mla_dec_stage1_bf16_a16w16_subQ128_mqa128.co"
BF16_16_MTP = "mla/mla_a16w16_qh16_m16x4_n16x1_coex0_mask1.co"  # 2 to 4 tokens (m32x4 from 5)
A16W8_16 = "mla/mla_a16w8_qh16_m16x4_n16x1_coex0_mask1_ps.co"
FP8_128 = "mla/mla_a8w8_qh128_m32x4_n16x2_msk1.co"
BF16, FNUZ = "bfloat16", "float8_e4m3fnuz"
KERNELS = {(BF16, BF16, 16, 1): BF16_16, (BF16, BF16, 16, 2): BF16_16_MTP, (BF16, BF16, 16, 4): BF16_16_MTP,
           **{(BF16, BF16, 128, q): BF16_128 for q in (1, 2, 4)},
           **{(BF16, FNUZ, 16, q): A16W8_16 for q in (1, 2, 4)},
           **{(FNUZ, FNUZ, 16, q): f"mla/mla_a8w8_qh16_qseqlen{q}_gqaratio16.co" for q in (1, 2, 4)},
           **{(FNUZ, FNUZ, 128, q): FP8_128 for q in (1, 2, 4)}}
MASKED = "mask1"  # in the name of a code object that masks causally among the query tokens


def python_dir(root: Path) -> Path:
    return root.parent / "aiter" if root.name == "aiter_meta" else root / "aiter"


def signature(mla_py: Path) -> list:
    """mla_decode_fwd's parameter names, read from the source (importing aiter needs ROCm)."""
    tree = ast.parse(mla_py.read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "mla_decode_fwd")
    return [a.arg for a in fn.args.args]


def contract_problems(root: Path) -> list:
    """What of the contract this aiter breaks; [] for the pinned one."""
    problems = []
    params = signature(python_dir(root) / "mla.py")
    if tuple(params[:len(CALLED)]) != CALLED or "sm_scale" not in params:
        problems.append(f"mla_decode_fwd's parameters are {params}: impls._aiter passes {CALLED} + sm_scale")
    if "page_size" in params or "nhead_kv" in params:  # c16d44b9's: then KV shape and keywords disagree
        problems.append("mla_decode_fwd takes page_size/nhead_kv: impls._aiter must pass them")
    missing = [name for name in PERSISTENT if name not in params]
    if missing:
        problems.append(f"mla_decode_fwd takes no {', '.join(missing)}: impls._aiter's fp8 call passes them")
    try:
        for (dtype, kv), heads, q_len in itertools.product(dispatch.TABLE_FORMATS, dispatch.TABLE_HEADS,
                                                           dispatch.TABLE_Q_LENS):
            try:
                found = dispatch.decode_kernel(dtype, heads, kv_dtype=kv, max_seqlen_q=q_len, root=root,
                                               persistent=dispatch.persistent_call(dtype, kv)).code_object
            except dispatch.NoKernel:
                found = None
            if found != KERNELS.get((dtype, kv, heads, q_len)):
                problems.append(f"{dtype} query, {kv} cache, {heads} heads, {q_len} query tokens: aiter runs "
                                f"{found}, the contract says {KERNELS.get((dtype, kv, heads, q_len))}")
    except dispatch.ContractError as e:
        problems.append(str(e))
    return problems


def test_the_installed_aiter_is_the_pinned_one():
    assert ROOT is not None and dispatch.version() == PINNED, "pip install -e '.[aiter]'"
    pyproject = (Path(__file__).parent.parent / "pyproject.toml").read_text()
    assert f'"amd-aiter=={PINNED}"' in pyproject


def test_the_pinned_aiter_keeps_the_contract():
    assert contract_problems(ROOT) == []


def test_perf_yml_declares_the_head_counts_aiter_has_a_bf16_kernel_for():
    rocm = config.load().platform("rocm")
    assert sorted(rocm.vendor_heads) == sorted({h for (d, kv, h, q) in KERNELS if d == kv == BF16})


def test_perf_yml_declares_more_query_tokens_only_where_aiter_has_a_causal_bf16_kernel():
    rocm = config.load().platform("rocm")
    causal = {h for (d, kv, h, q), co in KERNELS.items() if d == kv == BF16 and q > 1 and MASKED in co}
    assert sorted(rocm.vendor_q_len_heads) == sorted(causal) == [16]
    assert [rocm.has_vendor_kernel(h, q) for h, q in ((16, 2), (16, 4), (128, 1), (128, 2))] == [True] * 3 + [False]


def test_the_query_tokens_past_what_aiter_has_are_refused_by_name():
    with pytest.raises(dispatch.NoKernel, match="qo_len <= 4"):
        dispatch.decode_kernel("float8_e4m3fnuz", 16, max_seqlen_q=5, root=ROOT)
    assert dispatch.decode_kernel("bfloat16", 16, max_seqlen_q=8, root=ROOT).code_object == \
        "mla/mla_a16w16_qh16_m32x4_n16x1_coex0_mask1.co"


def test_every_kernel_names_its_resources_from_the_code_object():
    if shutil.which("llvm-readelf") is None:
        pytest.fail("llvm-readelf is missing: apt-get install llvm (.ci/run installs it)")
    table = dispatch.table("gfx942")
    row = table["bfloat16/16"]
    assert row["code_object"] == BF16_16 and row["kernel"].endswith("subQ16_mqa16E")
    # gfx942: 512 VGPRs (arch + acc), 64 KiB LDS, wave64; no scratch
    assert (row["vgpr_count"], row["lds_bytes"], row["wavefront_size"], row["scratch_bytes"]) == (512, 65536, 64, 0)
    assert table["bfloat16/64"]["kernel"] is None and "64 heads" in table["bfloat16/64"]["none"]
    mtp = table[dispatch.kernel_row("bfloat16", 16, 2)]
    assert dispatch.kernel_row("bfloat16", 16, 2) == "bfloat16/16/s_q=2"
    assert mtp["code_object"] == BF16_16_MTP and mtp["kernel"].endswith("mask1E") and mtp["vgpr_count"] > 0
    a16w8 = table[dispatch.kernel_row(BF16, 16, 1, FNUZ)]  # as mlagate calls it: persistent
    assert dispatch.kernel_row(BF16, 16, 1, FNUZ) == "bfloat16/16/kv=float8_e4m3fnuz"
    assert a16w8["code_object"] == A16W8_16 and a16w8["kernel"].endswith("mask1_psE") and a16w8["vgpr_count"] > 0
    assert table["float8_e4m3fnuz/16"]["code_object"] == "mla/mla_a8w8_qh16_qseqlen1_gqaratio16.co"  # a8w8, as before


@pytest.fixture
def patched(tmp_path):
    """A copy of the pinned aiter's two contract files, laid out as the wheel lays them out."""
    meta = tmp_path / "aiter_meta"
    for rel, base in ((dispatch.SOURCE, ROOT), ("mla.py", python_dir(ROOT))):
        dest = (meta if base == ROOT else tmp_path / "aiter") / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(base / rel, dest)
    return meta


def test_a_signature_change_breaks_the_contract(patched):
    mla = python_dir(patched) / "mla.py"
    c16d44b9 = "    max_seqlen_q,\n    page_size=1,\n    nhead_kv=1,\n    sm_scale=None,"  # its signature
    mla.write_text(mla.read_text().replace("    max_seqlen_q,\n    sm_scale=None,", c16d44b9, 1))
    assert contract_problems(patched) == ["mla_decode_fwd takes page_size/nhead_kv: impls._aiter must pass them"]


def test_a_kernel_table_change_breaks_the_contract(patched):
    cu = patched / dispatch.SOURCE
    cu.write_text(cu.read_text().replace("if(gqa_ratio == 128)\n            {\n                sub_Q = 128;",
                                         "if(gqa_ratio == 64)\n            {\n                sub_Q = 128;", 1))
    problems = contract_problems(patched)
    assert any("bfloat16 cache, 64 heads, 2 query tokens: aiter runs mla/mla_dec_stage1_bf16_a16w16_subQ128_mqa128"
               ".co" in p for p in problems) and any("bfloat16 cache, 128 heads, 1 query tokens: aiter runs None" in p
                                                     for p in problems)


def test_a_lost_causal_kernel_breaks_the_contract(patched):
    cu = patched / dispatch.SOURCE
    cu.write_text(cu.read_text().replace("else if(max_seqlen_q <= 4)", "else if(max_seqlen_q <= 1)", 1))
    assert any(p.startswith("bfloat16 query, bfloat16 cache, 16 heads, 2 query tokens: aiter runs "
                            "mla/mla_a16w16_qh16_m32x4")
               for p in contract_problems(patched))


def test_a_dispatch_this_reader_cannot_follow_is_an_error_not_a_guess(patched):
    cu = patched / dispatch.SOURCE
    cu.write_text(cu.read_text().replace("if(gqa_ratio == 16)", "if(gqa_ratio == 16 && use_new_path)", 1))
    assert any("cannot evaluate the condition" in p for p in contract_problems(patched))


def test_perf_yml_holds_an_fp8_cache_to_aiters_a16w8_where_it_has_one():
    rocm = config.load().platform("rocm")
    a16w8 = {(h, q) for (d, kv, h, q) in KERNELS if (d, kv) == (BF16, FNUZ)}
    assert rocm.fp8_vendor.impl == "aiter" and "float8_e4m3fnuz" in rocm.kv_dtypes
    assert sorted(rocm.fp8_vendor.heads) == sorted({h for h, q in a16w8}) == [16]
    assert sorted(rocm.fp8_vendor.q_len_heads) == sorted({h for h, q in a16w8 if q > 1}) == [16]
    assert MASKED in A16W8_16  # causal among its query tokens, as TileLang's
    # the grid's query lengths are all within what the one a16w8 object takes (max_seqlen_q <= 4)
    assert max(config.load().grid.sizes["full"][3]) <= 4


def test_a16w8_runs_persistent_only_and_to_four_query_tokens():
    assert dispatch.persistent_call(BF16, FNUZ) and not dispatch.persistent_call(BF16, BF16)
    assert not dispatch.persistent_call(FNUZ, FNUZ)  # a8w8 has non-persistent objects
    with pytest.raises(dispatch.NoKernel):  # non-persistent: no a16w8 object at all
        dispatch.decode_kernel(BF16, 16, kv_dtype=FNUZ, max_seqlen_q=1, root=ROOT)
    with pytest.raises(dispatch.NoKernel):
        dispatch.decode_kernel(BF16, 16, kv_dtype=FNUZ, max_seqlen_q=5, persistent=True, root=ROOT)
    with pytest.raises(dispatch.NoKernel):
        dispatch.decode_kernel(BF16, 128, kv_dtype=FNUZ, max_seqlen_q=1, persistent=True, root=ROOT)


def test_the_fp8_scales_are_what_asm_mla_cu_reads():
    """a16w8 reads kv_scale only, a8w8 q_scale and kv_scale: both as tensors (data_ptr), as impls passes them."""
    source = (ROOT / dispatch.SOURCE).read_text()
    a16w8 = source[source.index("KV.dtype() == at::ScalarType::Float8_e4m3fnuz"):source.index(A16W8_16.split("/")[1])]
    assert "args.ptr_KVSCALE = kv_scale.value().data_ptr()" in a16w8 and "QSCALE" not in a16w8
    a8w8 = source[source.index("Q.dtype() == at::ScalarType::Float8_e4m3fnuz"):]
    assert "args.ptr_QSCALE  = q_scale.value().data_ptr()" in a8w8 and "args.ptr_KVSCALE" in a8w8


def test_a_lost_a16w8_kernel_breaks_the_contract(patched):
    cu = patched / dispatch.SOURCE
    cu.write_text(cu.read_text().replace('"/mla/mla_a16w8_qh16_m16x4_n16x1_coex0_mask1_ps.co"',
                                         '"/mla/mla_a16w8_qh16_m16x4_n16x1_coex0_mask0_ps.co"', 1))
    assert any(p.startswith("bfloat16 query, float8_e4m3fnuz cache, 16 heads, 1 query tokens: aiter runs "
                            "mla/mla_a16w8_qh16_m16x4_n16x1_coex0_mask0_ps.co") for p in contract_problems(patched))


def test_a_lost_scale_parameter_breaks_the_contract(patched):
    mla = python_dir(patched) / "mla.py"
    mla.write_text(mla.read_text().replace("    kv_scale=None,\n):", "):", 1))
    assert "mla_decode_fwd takes no kv_scale: impls._aiter's fp8 call passes them" in contract_problems(patched)

"""Serving workloads (perf.yml `workloads:`) on a CPU: the lengths they draw, the cases they add, how
their results are stored and read back, and how a batch is handed to the paged kernels."""

import json

import pytest
import torch

from mlagate import config
from mlagate.case import DENSE, Case, CaseResult, RunStatus
from mlagate.config import workloads as config_workloads
from mlagate.config.reader import KeyReader
from mlagate.config.workloads import Workload
from mlagate.measure import impls
from mlagate.store.results_file import BENCH_TIME, parse_results_file

CFG = config.load()
RAGGED = CFG.workloads["ragged-4k"]


def test_lengths_are_the_same_on_every_call_and_sum_to_batch_times_mean():
    for batch in (64, 128):
        lengths = RAGGED.lengths(batch)
        assert lengths == RAGGED.lengths(batch)
        assert sum(lengths) == batch * RAGGED.mean  # TFLOPs count exactly the tokens of the case's seqlen
        assert RAGGED.minimum <= min(lengths) and max(lengths) <= RAGGED.maximum
    # Pinned: Python's random.Random(seed).random() is the stream Python keeps across versions; a change
    # here changes what every recorded ragged-4k case measured.
    assert RAGGED.lengths(128)[:6] == (6132, 4211, 1430, 837, 1881, 1363)
    assert (min(RAGGED.lengths(128)), max(RAGGED.lengths(128))) == (47, 32768)
    import hashlib

    assert {b: hashlib.sha256(str(RAGGED.lengths(b)).encode()).hexdigest()[:16] for b in (64, 128)} == {
        64: "027dd8ba9ac6eae6", 128: "4d60b04eff003469"}  # every length of both batches


def test_a_long_tail_is_a_long_tail_and_the_seed_matters():
    lengths = sorted(RAGGED.lengths(128))
    assert lengths[64] < RAGGED.mean < lengths[-1] / 4  # median under the mean, a tail far past it
    other = Workload(**{**RAGGED.__dict__, "seed": 1})
    assert other.lengths(128) != RAGGED.lengths(128) and sum(other.lengths(128)) == 128 * RAGGED.mean


def test_uniform_lengths_are_the_mean():
    assert CFG.workloads["uniform-paged"].lengths(3) == (4096, 4096, 4096)


def test_the_grid_adds_each_workload_as_its_own_cases_with_the_platforms_pages():
    cases = CFG.cases("quick", ["tilelang-hopper", "flash_mla"], "cuda")
    paged = [c for c in cases if c.paged]
    assert {c.workload for c in cases} == {DENSE, "uniform-paged@946e5f23", "ragged-4k@0139e575"}
    assert len(paged) == 2 * 2 * 2 * 2 * 2  # implementations x workloads x batches x q_len x cache formats
    assert {c.page_size for c in paged} == {64}
    assert {c.page_size for c in CFG.cases("quick", ["tilelang-cdna3"], "rocm") if c.paged} == {1}
    ragged = next(c for c in paged if c.workload == RAGGED.tag(64) and c.batch == 128)
    assert ragged.lengths == RAGGED.lengths(128) and ragged.seqlen == RAGGED.mean
    assert ragged.label() == "tilelang-hopper h=16 b=128 s=4096 float16 ragged-4k"  # the digest: in the key
    assert ragged.label(tag=True) == "tilelang-hopper h=16 b=128 s=4096 float16 ragged-4k@0139e575"
    # A stored key becomes the same case again (the gate's re-measure, bisect), lengths and all.
    assert CFG.case(ragged.key, "cuda").lengths == ragged.lengths
    assert CFG.case(ragged.key, "cuda") == ragged and Case(*ragged.key) == ragged  # lengths are not identity


def test_a_recorded_workload_that_perf_yml_no_longer_has_is_an_error():
    with pytest.raises(config.ConfigError, match=r"workloads.gone: not in perf.yml"):
        CFG.case(("tilelang-hopper", 64, 4096, "float16", 16, 1, "float16", "gone"), "cuda")
    with pytest.raises(config.ConfigError, match=r"workloads.ragged-4k: perf.yml defines .* s=4096 float16 "
                                                 r"ragged-4k@0139e575, but .* s=2048 .* was recorded"):
        CFG.case(("tilelang-hopper", 64, 2048, "float16", 16, 1, "float16", RAGGED.tag(64)), "cuda")
    with pytest.raises(config.ConfigError, match=r"but .* ragged-4k@00000000 was recorded \(the workload changed"):
        CFG.case(("tilelang-hopper", 64, 4096, "float16", 16, 1, "float16", "ragged-4k@00000000"), "cuda")


def test_a_workload_redefined_under_its_name_is_a_new_case():
    """Base and head each record with their own perf.yml: a changed spread or page size must not be
    compared with the old batches under the same key."""
    tags = {RAGGED.tag(64), RAGGED.tag(1), Workload(**{**RAGGED.__dict__, "sigma": 2.0}).tag(64),
            Workload(**{**RAGGED.__dict__, "seed": 1}).tag(64)}
    assert len(tags) == 4 and all(t.startswith("ragged-4k@") for t in tags)
    assert Workload(**{**RAGGED.__dict__, "batch": (8,)}).tag(64) == RAGGED.tag(64)  # batches are cases


def test_a_case_result_keeps_its_lengths_through_json():
    case = CFG.cases("quick", ["torch"], "cuda")[-1]
    back = CaseResult.from_dict(json.loads(json.dumps(CaseResult(case, RunStatus.SKIPPED, "x").to_dict())))
    assert back.case == case and back.case.lengths == case.lengths and back.case.page_size == 64


@pytest.mark.parametrize("key, value, message", [
    ("distribution", "zipf", r"workloads.ragged-4k.distribution: 'zipf' is not one of uniform, lognormal"),
    ("mean", 0, r"workloads.ragged-4k.mean: must be >= 1"),
    ("mean", 40000, r"workloads.ragged-4k.mean: 40000 must lie within min 1 and max 32768"),
    ("max", 200000, r"workloads.ragged-4k.max: must be <= 131072"),
    ("sigma", float("nan"), r"workloads.ragged-4k.sigma: must be a finite number"),
    ("seed", -1, r"workloads.ragged-4k.seed: must be >= 0"),
    ("heads", [12], r"workloads.ragged-4k.heads: 12 is not one of 16, 32, 64, 128"),
    ("color", "red", r"workloads.ragged-4k.color: unknown key"),
    ("batch", [64, 10_000_000], r"workloads.ragged-4k.batch: 10000000 is over 4096 sequences"),
])
def test_bad_workload_values_are_named(key, value, message):
    import yaml

    data = yaml.safe_load(config.DEFAULT_PATH.read_text())
    data["workloads"]["ragged-4k"][key] = value
    with pytest.raises(config.ConfigError, match=message):
        config.parse(data)


def test_a_grid_names_only_workloads_that_exist_and_dense_is_reserved():
    import yaml

    data = yaml.safe_load(config.DEFAULT_PATH.read_text())
    data["grid"]["quick"]["workloads"] = ["ragged-8k"]
    with pytest.raises(config.ConfigError, match=r"grid.quick.workloads: 'ragged-8k' is not one of"):
        config.parse(data)
    data["grid"]["quick"]["workloads"] = ["ragged-4k", "ragged-4k"]
    with pytest.raises(config.ConfigError, match=r"grid.quick.workloads: entries must be unique"):
        config.parse(data)
    data = yaml.safe_load(config.DEFAULT_PATH.read_text())
    data["platforms"]["cuda"]["page_size"] = 1 << 20
    with pytest.raises(config.ConfigError, match=r"platforms.cuda.page_size: must be <= 131072"):
        config.parse(data)
    data = yaml.safe_load(config.DEFAULT_PATH.read_text())
    data["workloads"]["dense"] = data["workloads"].pop("uniform-paged")
    with pytest.raises(config.ConfigError, match=r"workloads.dense: 'dense' names the grid's own cases"):
        config.parse(data)


def test_workload_benchmarks_are_read_into_the_dense_benchmarks_by_workload(tmp_path):
    params = [["'tilelang-hopper'"], ["64"], ["4096"], ["'float16'"], ["16"]]
    row = lambda ps, v: [[v], ps, None, None, None, None, None, None, None, None, [[v]]]  # noqa: E731
    columns = ["result", "params", "version", "started_at", "duration", "stats_ci_99_a", "stats_ci_99_b",
               "stats_q_25", "stats_q_75", "stats_number", "samples"]
    data = {"commit_hash": "a" * 40, "date": 1, "result_columns": columns, "results": {
        BENCH_TIME: row(params, 1e-4),
        "mla_decode.TimeWorkload.time_decode": row([*params, ["'ragged-4k'"]], 2e-4)}}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    _, _, benchmarks = parse_results_file(path)
    assert {k: e.value for k, e in benchmarks[BENCH_TIME].items()} == {
        ("tilelang-hopper", 64, 4096, "float16", 16, 1, "float16", "dense"): 1e-4,
        ("tilelang-hopper", 64, 4096, "float16", 16, 1, "float16", "ragged-4k"): 2e-4}


def test_a_dense_batch_reaches_a_vendor_kernel_as_contiguous_pages():
    q, q_pe = torch.zeros(2, 16, 512), torch.zeros(2, 16, 64)
    kv, k_pe = torch.arange(2 * 128 * 512.).view(2, 128, 1, 512), torch.zeros(2, 128, 1, 64)
    p = impls.as_pages((q, q_pe, kv, k_pe), "flash_mla", 64)
    assert p.block_table.tolist() == [[0, 1], [2, 3]] and p.seqlens.tolist() == [128, 128]
    assert p.kv_cache.data_ptr() == kv.data_ptr()  # a view: nothing copied
    assert torch.equal(p.kv_cache[3, 63], kv[1, 127, 0])
    with pytest.raises(impls.Unavailable, match="seqlen 128 is not a multiple"):
        impls.as_pages((q, q_pe, kv, k_pe), "x", 96)
    with pytest.raises(impls.Unavailable, match="takes pages of 1 tokens, this cache has 64"):
        impls.as_pages(p, "aiter", 1)


def test_csr_page_lists_are_each_sequences_used_pages_in_order():
    table = torch.tensor([[5, 2, -1], [0, 4, 3]], dtype=torch.int32)
    p = impls.Paged(torch.zeros(2, 16, 512), torch.zeros(2, 16, 64), torch.zeros(6, 64, 512),
                    torch.zeros(6, 64, 64), table, torch.tensor([65, 129], dtype=torch.int32))
    indptr, ids = p.page_lists()
    assert indptr.tolist() == [0, 2, 5] and ids.tolist() == [5, 2, 0, 4, 3]
    assert indptr.dtype == ids.dtype == torch.int32


def test_the_re_measure_runs_each_commits_paged_kernel_on_that_commits_dense_file(kernel_commits):
    """The paged kernel imports the dense one (tiles, the attend body): a commit's paged kernel must be
    built on the same commit's dense file, or a change to the shared body would read as no change."""
    import sys

    from mlagate.kernels import mla_decode
    from mlagate.measure import interleaved

    base, head = kernel_commits({"mla_decode.py": "base"}), kernel_commits({"mla_decode.py": "head"})
    tmp_path = kernel_commits.repo
    paged = {c: interleaved.kernel_module_at(tmp_path, c, interleaved.PAGED_KERNEL_FILE) for c in (base, head)}
    assert paged[base].dense.MARK == "base" and paged[head].dense.MARK == "head"
    assert paged[base].TileConfig is paged[base].dense.TileConfig  # its named imports too
    assert sys.modules["mlagate.kernels.mla_decode"] is mla_decode  # today's module is back
    assert sys.modules["mlagate.kernels"].mla_decode is mla_decode


@pytest.mark.parametrize("name, params, message", [
    ("mla_decode.TimeWorkload.time_decode", [["'dense'"]], "do not name a workload"),
    ("mla_decode.TimeWorkload.time_decode", [], "do not name a workload"),
    (BENCH_TIME, [["'ragged-4k'"]], "name a workload; workloads have their own benchmarks"),
])
def test_a_results_file_that_mixes_the_grid_and_the_workloads_is_refused(tmp_path, name, params, message):
    from mlagate.store.errors import StoreError

    base = [["'tilelang-hopper'"], ["64"], ["4096"], ["'float16'"], ["16"]]
    data = {"commit_hash": "a" * 40, "date": 1, "result_columns": ["result", "params"],
            "results": {name: [[1e-4], [*base, *params]]}}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    with pytest.raises(StoreError, match=rf"{path}: not a valid asv results file: .*{message}"):
        parse_results_file(path)


def test_a_workload_case_runs_its_own_familys_kernel_over_pages_and_is_named_so():
    """Every family runs its own kernel over pages, the balanced schedule (num_split 0): no label names another
    family's but an fp8 cache's (the seesaw has none: case.FP8_KERNEL_OF)."""
    from mlagate.kernels import mla_decode

    for c in mla_decode.CONFIGS.values():
        assert mla_decode.paged_config(c) == c.with_(num_split=0)
    seesaw = ("tilelang-seesaw", 64, 4096, "float16", 16, 1, "float16", RAGGED.tag(64))
    assert Case(*seesaw).label() == "tilelang-seesaw h=16 b=64 s=4096 float16 ragged-4k"
    assert Case(*seesaw[:5]).label() == "tilelang-seesaw h=16 b=64 s=4096 float16"
    fp8 = Case(*seesaw[:6], "float8_e4m3fn", seesaw[-1])
    assert fp8.label() == ("tilelang-seesaw h=16 b=64 s=4096 float16 kv=float8_e4m3fn ragged-4k "
                           "(runs tilelang-hopper's kernel)")


def test_a_workload_case_depends_on_its_familys_kernel_files_over_pages():
    """The reviewer's list of changed files a failing case depends on (report/review.case_files): a seesaw
    workload case is built from the seesaw's file too, the hopper family's is not."""
    from mlagate.report.review import case_files

    key = ("tilelang-seesaw", 64, 4096, "float16", 16, 1, "float16", RAGGED.tag(64))
    files = case_files(key, "sm_90")
    assert {"kernels/mla_decode_seesaw.py", "kernels/mla_decode_paged.py", "kernels/mla_decode.py",
            "kernels/tuned/sm_90.yaml"} <= files
    hopper = case_files(("tilelang-hopper", *key[1:]), "sm_90")
    assert "kernels/mla_decode_paged.py" in hopper and "kernels/mla_decode_seesaw.py" not in hopper


UNIFORM = {"distribution": "uniform", "mean": 64, "batch": [8], "heads": [16], "q_len": [1]}
LOGNORMAL = {**UNIFORM, "distribution": "lognormal", "min": 16, "max": 256, "sigma": 1.0, "seed": 0}


def workload_of(entry, **values):
    """Workload `w` of a workloads section holding only it (None drops a key); q_len 1 and 2 allowed."""
    w = {k: v for k, v in {**entry, **values}.items() if v is not None}
    return config_workloads.parse(KeyReader({"workloads": {"w": w}}), config.HEADS, (1, 2))["w"]


@pytest.mark.parametrize("entry, values, message", [
    (UNIFORM, {"batch": None}, "workloads.w.batch: missing"),
    (UNIFORM, {"mean": 131073}, "workloads.w.mean: must be <= 131072, got 131073"),  # a uniform one has no max
    (UNIFORM, {"q_len": [3]}, "workloads.w.q_len: 3 is not one of 1, 2"),
    (LOGNORMAL, {"min": 0}, "workloads.w.min: must be >= 1, got 0"),
    (LOGNORMAL, {"sigma": 0}, "workloads.w.sigma: must be > 0, got 0.0"),  # no spread is uniform's
    (LOGNORMAL, {"sigma": 4.5}, "workloads.w.sigma: must be <= 4, got 4.5"),
    (UNIFORM, {"mean": 1, "q_len": [2]}, "workloads.w.q_len: 2 query tokens, but batch 8 holds a sequence of 1 "
                                         "(the kernels refuse a cache shorter than its query tokens)"),
])
def test_a_bad_workload_is_refused_with_its_whole_message(entry, values, message):
    with pytest.raises(config.ConfigError) as refused:
        workload_of(entry, **values)
    assert str(refused.value) == message


@pytest.mark.parametrize("entry, values, expected, lengths", [
    (UNIFORM, {"batch": [4096]}, Workload("w", "uniform", 64, (4096,), (16,)), (64,) * 4096),  # MAX_BATCH
    (LOGNORMAL, {"mean": 16}, Workload("w", "lognormal", 16, (8,), (16,), (1,), 16, 256, 1.0, 0), (16,) * 8),
    (LOGNORMAL, {"mean": 256}, Workload("w", "lognormal", 256, (8,), (16,), (1,), 16, 256, 1.0, 0), (256,) * 8),
    (UNIFORM, {"mean": 2, "q_len": [2]}, Workload("w", "uniform", 2, (8,), (16,), (2,)), (2,) * 8),
])
def test_a_workload_at_its_bounds_is_taken(entry, values, expected, lengths):
    """The largest batch, a mean at min or at max (every sequence then at it), a cache as long as its query."""
    workload = workload_of(entry, **values)
    assert workload == expected and workload.lengths(expected.batch[0]) == lengths

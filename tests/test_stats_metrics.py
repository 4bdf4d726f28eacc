import numpy as np
import pytest

from mlagate.case import Case, CaseResult, RunStatus, Samples
from mlagate.decide import stats
from mlagate.measure import grid as bench
from mlagate.measure import metrics, summary


def test_flops_and_bytes_match_flashmla_formulas():
    assert metrics.flops(128, 128, 8192) == 2 * 128 * 128 * 8192 * (576 + 512)
    assert metrics.bytes_moved(128, 128, 8192, "float16") == (128 * 8192 * 576 + 128 * 128 * 576 + 128 * 128 * 512) * 2
    # the H200 measurement: 0.7004 ms at batch 128, seqlen 8192 -> 417 TFLOPs
    assert metrics.tflops(metrics.flops(128, 128, 8192), 0.7004479765892029) == pytest.approx(416.96, abs=0.01)


def test_roofline_takes_the_slower_bound():
    work, traffic = 2e12, 1e9  # 2 TFLOP, 1 GB
    # 1 PFLOP/s -> 2 ms of compute; 1 TB/s -> 1 ms of memory: compute bound, 4 ms measured = 50%.
    assert metrics.roofline_fraction(work, traffic, 4.0, 1000.0, 1.0) == pytest.approx(0.5)
    assert metrics.roofline_fraction(work, traffic * 10, 20.0, 1000.0, 1.0) == pytest.approx(0.5)


def test_median_ci_brackets_the_median_and_narrows_with_n():
    rng = np.random.default_rng(0)
    small, large = rng.normal(1, 0.1, 30), rng.normal(1, 0.1, 3000)
    lo, hi = summary.median_ci(small)
    assert lo <= summary.median(small) <= hi
    lo2, hi2 = summary.median_ci(large)
    assert (hi2 - lo2) < (hi - lo) / 3
    assert np.isnan(summary.median_ci([1.0, 2.0, 3.0])[0])


def test_slower_p_value_sees_a_shift_and_not_noise():
    rng = np.random.default_rng(1)
    base = rng.normal(100, 1, 200)
    assert stats.slower_p_value(base, base * 1.03) < 1e-6
    assert stats.slower_p_value(base, rng.normal(100, 1, 200)) > 0.01
    assert stats.slower_p_value(base, base * 0.97) > 0.99


def test_outlier_fraction():
    assert summary.outlier_fraction([1.0] * 98 + [10.0, 11.0]) == pytest.approx(0.02)


def test_add_metrics_computes_vendor_ratio_within_a_run():
    def row(impl, ms):
        return CaseResult(Case(impl, 64, 4096, "float16", 128), RunStatus.OK, samples=Samples((ms,) * 10, "", 0, 0, ""))

    rows = metrics.add_metrics([row("tilelang-hopper", 0.2), row("flash_mla", 0.1),
                              CaseResult(Case("aiter", 64, 4096, "float16", 128), RunStatus.SKIPPED)],
                             vendor="flash_mla")
    assert rows[0].vendor_ratio == pytest.approx(0.5)
    assert rows[1].vendor_ratio == pytest.approx(1.0)
    assert "tflops" not in rows[2].to_dict() and "vendor_ratio" not in rows[2].to_dict()


def test_longest_first_sharding_balances_gpus():
    cases = [Case("tilelang-hopper", b, s, "float16") for b in (64, 128) for s in (1024, 2048, 4096, 8192, 16384)]
    shards = bench.shard(cases, 4)
    loads = [sum(bench.estimated_cost(cases[i]) for i in s) for s in shards]
    assert sorted(i for s in shards for i in s) == list(range(len(cases)))
    assert max(loads) / min(loads) < 1.5


def test_a_grid_point_stays_on_one_gpu_so_every_ratio_is_a_same_gpu_ratio():
    impls = ("tilelang-hopper", "flash_mla", "torch")
    cases = [Case(i, b, s, "float16", h) for i in impls for b in (64, 128) for s in (1024, 8192) for h in (16, 128)]
    shards = bench.shard(cases, 3)
    gpu_of = {i: g for g, s in enumerate(shards) for i in s}
    for point in {bench.point(c) for c in cases}:
        assert len({gpu_of[i] for i, c in enumerate(cases) if bench.point(c) == point}) == 1
    assert all(shards)  # and the points still spread over the GPUs


def test_no_vendor_ratio_across_two_gpus():
    def row(impl, ms, gpu):
        return CaseResult(Case(impl, 64, 4096, "float16", 128), RunStatus.OK, samples=Samples((ms,) * 10, "", 0, 0, ""),
                          gpu=gpu)

    rows = metrics.add_metrics([row("tilelang-hopper", 0.2, 0), row("flash_mla", 0.1, 1)], vendor="flash_mla")
    assert "vendor_ratio" not in rows[0].to_dict()
    rows = metrics.add_metrics([row("tilelang-hopper", 0.2, 1), row("flash_mla", 0.1, 1)], vendor="flash_mla")
    assert rows[0].vendor_ratio == pytest.approx(0.5)

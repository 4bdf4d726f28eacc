"""Host-side costs asv does not see, tracked with pytest-benchmark
(`pytest tests/test_host_overhead.py --benchmark-json=out/host.json`; compare
two such files with `pytest-benchmark compare`). They time, they do not assert
times: each asserts only what was computed."""

import pytest

torch = pytest.importorskip("torch")

from mlagate.kernels import mla_decode as m  # noqa: E402


@pytest.mark.gpu
def test_wrapper_launch_overhead(benchmark):
    """Python cost of one call through the checked entry point (validation included)."""
    shape = m.Shape(batch=1, seqlen=64)
    inputs = m.random_inputs(shape, device="cuda", seed=0)
    m.mla_decode(*inputs)
    out = benchmark(m.mla_decode, *inputs)
    assert out.shape == inputs[0].shape


@pytest.mark.gpu
def test_prepared_launch_overhead(benchmark):
    """Python cost of one launch of a compiled kernel (what a benchmark times around)."""
    shape = m.Shape(batch=1, seqlen=64)
    q, q_pe, kv, k_pe = m.random_inputs(shape, device="cuda", seed=0)
    kernel = m.compiled(shape, m.config_for_arch(m.device_arch(0)))
    out, lse = torch.empty_like(q), torch.empty(1, 128, device="cuda")
    result = benchmark(kernel, q, q_pe, kv, k_pe, out, lse)
    torch.cuda.synchronize()
    assert result[0] is out


@pytest.mark.gpu
def test_cached_kernel_load(benchmark):
    """Time to get a compiled kernel from TileLang's disk cache in a fresh process state."""
    shape = m.Shape(batch=2, seqlen=128)
    config = m.config_for_arch(m.device_arch(0))
    m.compiled(shape, config)  # populate the disk cache

    def load():
        m._compiled.clear()
        return m.compiled(shape, config)

    kernel = benchmark.pedantic(load, rounds=5, iterations=1)
    assert kernel.plan.shape == shape


def test_gate_analysis_time(benchmark):
    """The gate's decision over a full grid of recorded H200 samples."""
    from gate_fixtures import decide_full_grid

    verdict = benchmark(decide_full_grid)
    assert len(verdict.cases) == 20  # both TileLang configs x 10 grid points

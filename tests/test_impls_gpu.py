"""Every implementation against the float32 reference at every tensor-parallel head count, on a GPU."""

import pytest

torch = pytest.importorskip("torch")

from mlagate import config  # noqa: E402
from mlagate.case import Case  # noqa: E402
from mlagate.measure import environment, impls  # noqa: E402
from mlagate.measure.harness import Inputs, checked_launch  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("impl", config.KNOWN_IMPLS)
@pytest.mark.parametrize("heads", config.HEADS)
def test_every_implementation_is_right_at_every_head_count(impl, heads):
    dtype = config.load().platform(environment.platform()).dtypes[0]
    inputs = Inputs(Case(impl, 4, 1024, dtype, heads), environment.device())
    try:
        _, error = checked_launch(impl, inputs, environment.device())  # raises WrongResult when off
    except impls.Unavailable as e:
        pytest.skip(str(e))
    assert error["max_abs"] < 0.01


def _checked_or_skip(impl, inputs):
    try:
        _, error = checked_launch(impl, inputs, environment.device())  # raises WrongResult when off
    except impls.Unavailable as e:
        pytest.skip(str(e))
    return error


@pytest.mark.parametrize("impl", config.KNOWN_IMPLS)
@pytest.mark.parametrize("workload", ["uniform-paged", "ragged-4k"])
def test_every_implementation_is_right_on_every_workload(impl, workload):
    """perf.yml's workloads as the record measures them: the platform's pages, shuffled, real lengths."""
    cfg = config.load()
    cases = [c for c in cfg.cases("quick", [impl], environment.platform()) if c.workload.startswith(workload + "@")]
    if not cases:
        pytest.skip(f"{impl} has no {workload} case here (perf.yml)")
    assert _checked_or_skip(impl, Inputs(cases[0], environment.device()))["max_abs"] < 0.01


@pytest.mark.parametrize("impl", config.KNOWN_IMPLS)
def test_a_one_token_sequence_beside_a_32k_one_over_shuffled_pages(impl):
    cfg = config.load()
    here = environment.platform()
    platform = cfg.platform(here)
    case = Case(impl, 2, 16385, platform.dtypes[0], 16, workload="edge", page_size=platform.page_size,
                lengths=(1, 32769))
    assert _checked_or_skip(impl, Inputs(case, environment.device()))["max_abs"] < 0.01



@pytest.mark.parametrize("impl", environment.VENDORS)
def test_a_vendor_case_names_the_kernels_it_ran(impl):
    """The profiler watches one untimed call after the samples: the kernels' names, each once."""
    from mlagate.measure.harness import measure_case

    cfg = config.load()
    case = Case(impl, 64, 4096, cfg.platform(environment.platform()).dtypes[0], 16)
    result = measure_case(case, cfg.timing, Inputs(case, environment.device()), environment.device())
    if result.status.value == "skipped":
        pytest.skip(result.reason)
    assert result.status.value == "ok" and result.kernels, result.reason
    assert all(isinstance(n, str) and n for n in result.kernels) and len(set(result.kernels)) == len(result.kernels)
    assert not any(n.startswith(("Memcpy", "Memset")) for n in result.kernels)
    print(f"{impl}: {result.kernels}")

"""Every implementation against the float32 reference at every tensor-parallel head count, on a GPU."""

import pytest

torch = pytest.importorskip("torch")

from mlagate import config

from mlagate.measure import impls

from mlagate.measure import environment  # noqa: E402
from mlagate.case import Case  # noqa: E402
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

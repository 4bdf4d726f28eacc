"""A CPU stand-in for the GPU under the asv suite: on PYTHONPATH, it makes every process that imports the
benchmarks (asv's own benchmark processes, or the record's one) measure a fake grid, so that cases have
samples without a GPU and `asv run` and `mlagate record` can be compared on what they store.

Only the measuring is replaced (grid.run_cases, the compile ahead and torch's GPU check, in that process):
the suite's ordering, metrics, cases file and the benchmarks' replay are the recorded commit's own. The fake
is a function of the case's key alone, the same in every process and commit: most cases measured (a few samples
each), the implementations not installed on an H200 skipped, one case failed."""

import contextlib
import hashlib
import os
import sys

BENCHMARK_MODULES = ("mla_decode", "benchmarks.mla_decode")

SKIPPED = ("aiter", "tilelang-cdna3")  # not installed / not runnable on CUDA, as on the H200
FAILED = ("torch", 128)  # (impl, batch): a wrong result


def fake_result(case, gpu=None):
    from mlagate.case import CaseResult, RunStatus, Samples

    if case.impl in SKIPPED:
        return CaseResult(case, RunStatus.SKIPPED, f"{case.impl} is not installed", gpu=gpu)
    if (case.impl, case.batch) == FAILED:
        return CaseResult(case, RunStatus.FAILED, "wrong result: max abs error 0.5", gpu=gpu)
    digest = hashlib.sha1(repr(case.key).encode()).digest()  # the key: a label may change its wording between commits
    base_ms = case.batch * case.seqlen * case.heads / 2e8 * (1 + digest[0] / 255)
    times = tuple(base_ms * (1 + digest[i % 20] * (i + 1) / 2e5) for i in range(24 + digest[0] % 4))  # min_samples: 20
    return CaseResult(case, RunStatus.OK, samples=Samples(times, "cuda-event", 0, 0, "stand-in"), gpu=gpu)


def fake_run_cases(cases, timing, *, budgets=None, deadline=None, gpus=None, on_result=None, compiled=None,
                   **_):
    from mlagate.measure import grid

    gpu_of = {i: gpu for gpu, part in zip(gpus, grid.shard(cases, len(gpus))) for i in part} if gpus else {}
    results = [fake_result(c, gpu_of.get(i)) for i, c in enumerate(cases)]
    for r in results:
        if on_result:
            on_result(r)
    return results


@contextlib.contextmanager
def no_compile(cases, jobs, echo=print):
    yield None


def stand_in():
    import torch

    from mlagate.measure import grid, precompile

    torch.cuda.is_available = lambda: True
    grid.run_cases = fake_run_cases
    precompile.ahead = no_compile


def _before_the_suite(module, run):
    """stand_in() just before the benchmark module executes (the record process never imports it)."""
    stand_in()
    run()


sys.path.append(TESTS := os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from module_hooks import AroundExec  # noqa: E402 (tests/ on the path for this import alone)

sys.path.remove(TESTS)
sys.meta_path.insert(0, AroundExec({name: _before_the_suite for name in BENCHMARK_MODULES}))

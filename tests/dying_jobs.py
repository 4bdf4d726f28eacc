"""Job functions for the spawned processes of mlagate.measure.precompile.in_processes that die as a segfault
or the OOM killer would (os._exit): importable at module level, which a spawned process needs."""

import os

DYING = 3  # the item whose process dies, with exit code DYING_CODE
DYING_CODE = 7


def double_or_die(item: int) -> int:
    if item == DYING:
        os._exit(DYING_CODE)
    return 2 * item


def lower_or_die(job) -> dict:
    """tests/test_tune.py's fake lowering (block_N x 1000 B of shared memory), except that lowering the
    block_N 32 candidate of batch 64 kills its process."""
    if job.config.block_N == 32 and job.shape.batch == 64:
        os._exit(DYING_CODE)
    source = 'extern "C" __global__ void __launch_bounds__(256) main_kernel(half_t* x) {\n  return;\n}\n'
    return {"source": source, "meta": {"main_kernel": {"dynamic_smem": job.config.block_N * 1000, "threads": 256}}}

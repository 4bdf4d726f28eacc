"""Issue 16 on one H200: where the seesaw's time goes against FlashMLA's, by hardware counters. Runs each
implementation's launch a few times at one shape so that `ncu` (Nsight Compute) can profile one launch of each:

    ncu --clock-control none -k regex:'main_|splitkv_mla' --launch-skip 3 --launch-count 1 --set full \
        -o prof python3 notes/ncu_probe.py [--batch 64] [--seqlen 4096] [--heads 128] [--dtype bfloat16]

ncu's default cache control flushes the caches before each profiled pass: a cold L2, as the record's timer has.
"""

import argparse

from mlagate.case import Case
from mlagate.measure import precompile
from mlagate.measure.environment import device
from mlagate.measure.harness import checked_launch, Inputs

IMPLS = ("tilelang-seesaw", "flash_mla")
LAUNCHES = 5


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--heads", type=int, default=128)
    p.add_argument("--seqlen", type=int, default=4096)
    p.add_argument("--dtype", default="bfloat16")
    args = p.parse_args()
    import torch

    gpu = device()
    cases = [Case(impl, args.batch, args.seqlen, args.dtype, args.heads) for impl in IMPLS]
    precompile.precompile_cases(cases, precompile.default_jobs())
    inputs = Inputs(cases[0], gpu)
    for impl in IMPLS:
        launch, _ = checked_launch(impl, inputs, gpu)
        for _ in range(LAUNCHES):
            launch()
        torch.cuda.synchronize()
        print(f"{impl}: {LAUNCHES} launches", flush=True)


if __name__ == "__main__":
    main()

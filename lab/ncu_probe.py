"""Where the seesaw's time goes against FlashMLA's, by hardware counters (GPU, under Nsight Compute).

Runs each implementation's launch a few times at one shape, so that `ncu` can profile one launch of each (the
seesaw's main_no_split, FlashMLA's flash_fwd_splitkv_mla), then export the details and the per-instruction SASS page
that lab/ncu_stalls.py reads. Open question (the seesaw at 128 heads and short caches). ncu's default cache control
flushes the caches before each profiled pass: a cold L2, as the record's timer has.

    for k in main_no_split flash_fwd_splitkv_mla; do
      ncu --clock-control none -k regex:$k --launch-skip 3 --launch-count 1 --set full --import-source yes \
          -o $k python -m lab.ncu_probe [--batch 64] [--seqlen 4096] [--heads 128] [--dtype bfloat16]
      ncu -i $k.ncu-rep --page details --csv > $k.details.csv
      ncu -i $k.ncu-rep --page source --csv --print-source sass | xz > $k.sass.csv.xz
    done
"""

import argparse

IMPLS = ("tilelang-seesaw", "flash_mla")
LAUNCHES = 5


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--heads", type=int, default=128)
    p.add_argument("--seqlen", type=int, default=4096)
    p.add_argument("--dtype", default="bfloat16")
    args = p.parse_args(argv)

    import torch

    from mlagate.case import Case
    from mlagate.measure import precompile
    from mlagate.measure.environment import device
    from mlagate.measure.harness import Inputs, checked_launch

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

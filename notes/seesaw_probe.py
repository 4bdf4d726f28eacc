"""Issue 16 on one H200: the seesaw kernel (kernels/mla_decode_seesaw.py) precompiled and timed.

    python notes/seesaw_probe.py compile --jobs 15   # the GPU tests' seesaw shapes into TileLang's disk cache
    python notes/seesaw_probe.py speed [--dtype D] [--heads H] [--impl I] [--out FILE]
                                       # the full grid: seesaw beside tilelang-hopper and FlashMLA

`speed` is a quick A/B while tuning; the README's table comes from `mlagate bench`. Both time with the
project's one clock (mlagate.measure.timer.time_gpu, perf.yml's `record` budget). Correctness and the 20
bit-identical repeats are tests/test_kernel_gpu.py::test_seesaw_matches_the_reference_and_repeats_bit_identically
(before it existed, this script's `check` step did the same: docs/h200-2026-12-01/seesaw/check.log).
"""

import argparse
import sys
from pathlib import Path

DTYPES = ("float16", "bfloat16")


def shapes(edges=True, dtypes=DTYPES):
    from mlagate.kernels import mla_decode as m

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from test_kernel_gpu import SEESAW_EDGES, SEESAW_GRID

    points = SEESAW_GRID + (SEESAW_EDGES if edges else [])
    return [m.Shape(batch=b, seqlen=s, heads=h, dtype=d) for (b, s, h) in points for d in dtypes]


def build(shape):
    from mlagate.kernels import mla_decode as m

    return m.CompiledDecode(shape, m.SEESAW, "sm_90", 132)


def speed(dtypes, heads, others, out_path):
    import json

    import torch

    from mlagate import config as config_mod
    from mlagate.kernels import mla_decode as m
    from mlagate.measure import impls, metrics, timer
    from mlagate.measure.summary import median

    timing = config_mod.load().timing
    rows = []
    for shape in shapes(edges=False, dtypes=dtypes):
        if heads and shape.heads not in heads:
            continue
        inputs = m.random_inputs(shape, "cuda", seed=0)
        kernel = build(shape)
        q = inputs[0]
        out = torch.empty_like(q)
        lse = torch.empty(shape.batch, shape.heads, device=q.device, dtype=torch.float32)
        fns = {"seesaw": lambda: kernel(*inputs, out, lse)[0]}
        for impl in others:
            try:
                fns[impl] = impls.prepare(impl, inputs, q.device)
            except impls.Unavailable as e:
                print("unavailable:", e)
        work = metrics.flops(shape.batch, shape.heads, shape.seqlen)
        row = {"batch": shape.batch, "seqlen": shape.seqlen, "heads": shape.heads, "dtype": shape.dtype,
               "splits": kernel.plan.num_split}
        for name, fn in fns.items():
            samples = timer.time_gpu(fn, timing, "record")
            row[name] = metrics.tflops(work, median(samples.times_ms))
        rows.append(row)
        ratio = row["seesaw"] / row["flash_mla"] if "flash_mla" in row else float("nan")
        print(f"b={shape.batch:4d} s={shape.seqlen:6d} h={shape.heads:4d} {shape.dtype:9s} split {row['splits']:2d}  "
              f"seesaw {row['seesaw']:6.1f}  hopper {row.get('tilelang-hopper', 0):6.1f}  "
              f"flash_mla {row.get('flash_mla', 0):6.1f}  seesaw/flash_mla {ratio:.3f}", flush=True)
    if out_path:
        with open(out_path, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


def build_quietly(shape):
    build(shape)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("step", choices=("compile", "speed"))
    parser.add_argument("--jobs", type=int, default=15)
    parser.add_argument("--dtype", action="append")
    parser.add_argument("--heads", type=int, action="append", help="speed: these heads only")
    parser.add_argument("--impl", action="append", help="speed: implementations beside seesaw "
                        "(default tilelang-hopper and flash_mla)")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.step == "compile":
        from mlagate.measure.precompile import in_processes

        todo, failed = shapes(), 0
        for shape, outcome in in_processes(build_quietly, todo, args.jobs):
            if isinstance(outcome, Exception):
                failed += 1
                print(f"failed: {shape}: {type(outcome).__name__}: {str(outcome)[-400:]}", flush=True)
        print(f"compiled {len(todo) - failed} of {len(todo)} seesaw kernels")
        return 1 if failed else 0
    return speed(tuple(args.dtype or DTYPES), args.heads, args.impl or ("tilelang-hopper", "flash_mla"), args.out)


if __name__ == "__main__":
    sys.exit(main())

"""The seesaw kernel (kernels/mla_decode_seesaw.py), or a patch of it, precompiled and timed (GPU).

    python -m lab.seesaw_probe compile --jobs 15   # the GPU tests' seesaw shapes into TileLang's disk cache
    python -m lab.seesaw_probe speed [--dtype D] [--heads H] [--batch B] [--impl I] [--out FILE]
                                   # the GPU tests' grid: seesaw beside tilelang-hopper and FlashMLA, in TFLOPs
    python -m lab.seesaw_probe compile|speed --variant lab/seesaw_variants/left_right_pe.diff --heads 128
                                   # also the seesaw with that patch applied: an A/B in one process

`speed` is a quick A/B while changing the kernel (open: the arrival order against the earlier one,
lab/seesaw_variants/left_right_pe.diff); the gate's figures come from `mlagate bench`. Both time with the project's
one clock (mlagate.measure.timer.time_gpu, perf.yml's `record` budget). Correctness and the 20 bit-identical repeats
are tests/test_kernel_gpu.py's test_seesaw_matches_the_reference_and_repeats_bit_identically. A variant is any patch
of kernels/mla_decode_seesaw.py (`git diff kernels/mla_decode_seesaw.py > X.diff`), applied to a temporary copy: the
tree is not touched.
"""

import argparse
import sys
from pathlib import Path

DTYPES = ("float16", "bfloat16")


def shapes(edges=True, dtypes=DTYPES, batches=None):
    """The GPU tests' seesaw grid (and edges), or its seqlens and heads at ``batches`` instead."""
    from mlagate.kernels import mla_decode as m

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from test_kernel_gpu import SEESAW_EDGES, SEESAW_GRID

    points = SEESAW_GRID + (SEESAW_EDGES if edges else [])
    if batches:
        points = sorted({(b, s, h) for b in batches for (_, s, h) in SEESAW_GRID})
    return [m.Shape(batch=b, seqlen=s, heads=h, dtype=d) for (b, s, h) in points for d in dtypes]


def build(shape, variant=None):
    """The committed seesaw for ``shape``, or with the ``variant`` patch applied."""
    from mlagate.kernels import mla_decode as m

    if variant is None:
        return m.CompiledDecode(shape, m.SEESAW, "sm_90", 132)
    committed = m.schedule_module("seesaw")
    m.schedule_modules["seesaw"] = variant_module(variant)  # the dense file builds the seesaw with this module
    try:
        return m.CompiledDecode(shape, m.SEESAW, "sm_90", 132)
    finally:
        m.schedule_modules["seesaw"] = committed


def patch_refusal(patch, kernel="mla_decode_seesaw.py"):
    """Why ``patch`` cannot be a variant of kernels/``kernel`` (missing, not a patch of that file alone, or not
    applying to today's), or None: the --variant options refuse it before anything is built."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    if not Path(patch).is_file():
        return f"{patch}: no such file"
    stat = subprocess.run(["git", "apply", "--numstat", str(Path(patch).resolve())], cwd=root, capture_output=True,
                          text=True)
    files = {line.split("\t")[-1] for line in stat.stdout.splitlines()}
    if stat.returncode or files != {f"kernels/{kernel}"}:
        return f"{patch}: not a patch of kernels/{kernel} alone ({stat.stderr.strip() or sorted(files)})"
    check = subprocess.run(["git", "apply", "--check", str(Path(patch).resolve())], cwd=root, capture_output=True,
                           text=True)
    return f"{patch}: does not apply to kernels/{kernel}: {check.stderr.strip()}" if check.returncode else None


def variant_module(patch, kernel="mla_decode_seesaw.py"):
    """kernels/``kernel`` with ``patch`` applied (`git apply` on a temporary copy), imported once."""
    import importlib.util
    import shutil
    import subprocess
    import tempfile

    name = f"{Path(kernel).stem}_variant_{Path(patch).stem}"
    if name not in sys.modules:
        root, tmp = Path(__file__).resolve().parent.parent, Path(tempfile.mkdtemp(prefix="kernel-variant-"))
        (tmp / "kernels").mkdir()
        shutil.copy(root / "kernels" / kernel, tmp / "kernels")
        subprocess.run(["git", "apply", str(Path(patch).resolve())], cwd=tmp, check=True)
        spec = importlib.util.spec_from_file_location(name, tmp / "kernels" / kernel)
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def speed(dtypes, heads, others, out_path, variant=None, batches=None):
    import json

    import torch

    from mlagate import config as config_mod
    from mlagate.kernels import mla_decode as m
    from mlagate.measure import impls, metrics, timer
    from mlagate.measure.summary import median

    timing = config_mod.load().timing
    rows = []
    for shape in shapes(edges=False, dtypes=dtypes, batches=batches):
        if heads and shape.heads not in heads:
            continue
        inputs = m.random_inputs(shape, "cuda", seed=0)
        kernel = build(shape)
        q = inputs[0]
        out = torch.empty_like(q)
        lse = torch.empty(shape.batch, shape.heads, device=q.device, dtype=torch.float32)
        fns = {"seesaw": lambda: kernel(*inputs, out, lse)[0]}
        if variant:
            changed, out_v = build(shape, variant), torch.empty_like(q)
            fns["variant"] = lambda: changed(*inputs, out_v, lse)[0]
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
              f"flash_mla {row.get('flash_mla', 0):6.1f}  seesaw/flash_mla {ratio:.3f}"
              + (f"  variant {row['variant']:6.1f} ({row['variant'] / row['seesaw'] - 1:+.1%}, equal outputs: "
                 f"{bool(torch.equal(out, out_v))})" if variant else ""), flush=True)
    if out_path:
        with open(out_path, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


def build_quietly(job):
    build(*job)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=("compile", "speed"))
    parser.add_argument("--jobs", type=int, default=15)
    parser.add_argument("--dtype", action="append")
    parser.add_argument("--heads", type=int, action="append", help="these heads only")
    parser.add_argument("--batch", type=int, action="append", help="the grid's seqlens and heads at these batches "
                        "instead (no edge shapes)")
    parser.add_argument("--impl", action="append", help="speed: implementations beside seesaw "
                        "(default tilelang-hopper and flash_mla)")
    parser.add_argument("--out")
    parser.add_argument("--variant", help="a patch of kernels/mla_decode_seesaw.py: built and timed beside it")
    args = parser.parse_args(argv)
    refused = args.variant and patch_refusal(args.variant)
    if refused:
        parser.error(refused)
    if args.step == "compile":
        from mlagate.measure.precompile import in_processes

        variants = (None, args.variant) if args.variant else (None,)
        todo = [(shape, v) for shape in shapes(dtypes=tuple(args.dtype or DTYPES), batches=args.batch)
                if not args.heads or shape.heads in args.heads for v in variants]
        failed = 0
        for shape, outcome in in_processes(build_quietly, todo, args.jobs):
            if isinstance(outcome, Exception):
                failed += 1
                print(f"failed: {shape}: {type(outcome).__name__}: {str(outcome)[-400:]}", flush=True)
        print(f"compiled {len(todo) - failed} of {len(todo)} seesaw kernels")
        return 1 if failed else 0
    return speed(tuple(args.dtype or DTYPES), args.heads, args.impl or ("tilelang-hopper", "flash_mla"), args.out,
                 args.variant, args.batch)


if __name__ == "__main__":
    sys.exit(main())

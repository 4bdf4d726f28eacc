"""Whether an fp8 KV cache makes the TileLang decode faster than the same kernel on a bf16 cache (GPU).

    python -m lab.fp8_probe [--batch 64 --batch 128] [--seqlen 4096] [--heads 16] [--s-q 1 --s-q 2] [--jobs 8]
                            [--variant lab/fp8_variants/split_depth.diff] [--out FILE]

Per point (bf16 query): the gated seesaw on a bf16 cache (it has no fp8 cache: its shared memory holds no fp8 staging
tiles), and the pipelined hopper config (its tuned entry where kernels/tuned/sm_90.yaml lists the shape) on a bf16
and an fp8 (the arch's mla_decode.FP8_FORMAT) cache, all on the same values: the fp8 cache quantized with a
per-tensor scale (mla_decode.quantize), the bf16 cache its dequantized values. It compiles the kernels in processes
first, checks each against the reference of those values, and times each with the project's one clock
(mlagate.measure.timer.time_gpu, perf.yml's `record` budget): TFLOPs, microseconds, and fp8 over bf16. It reads half
the bytes; whether that shows is what it answers (issue 44: the fp8 kernel faster than the same kernel in bf16 at
16 heads). ``--variant PATCH`` adds the fp8 hopper kernel of kernels/mla_decode.py with PATCH applied (a copy; the
tree is not touched), timed beside the tree's in the same process: a change's A/B on one GPU.
"""

import argparse
import json
import sys


def kernels(batches, seqlens, heads, s_qs=(1,), variant=None):
    """[(name, Shape, TileConfig, patch)] per point: seesaw on bf16, hopper on bf16 and on fp8 (patch None: the
    tree's kernels), and hopper on fp8 with ``variant`` applied where one is given."""
    from mlagate.kernels import mla_decode as m
    from mlagate.kernels import tuned

    arch = "sm_90"
    todo = []
    for b in batches:
        for s in seqlens:
            for h in heads:
                for s_q in s_qs:
                    bf16 = m.Shape(batch=b, seqlen=s, heads=h, dtype="bfloat16", s_q=s_q)
                    fp8 = m.Shape(batch=b, seqlen=s, heads=h, dtype="bfloat16", s_q=s_q, kv_dtype=m.FP8_FORMAT[arch])
                    hopper = tuned.tuned_config("hopper", bf16, arch)
                    todo += [("seesaw bf16", bf16, m.SEESAW, None), ("hopper bf16", bf16, hopper, None),
                             ("hopper fp8", fp8, hopper, None)]
                    if variant:
                        todo.append(("hopper fp8 variant", fp8, hopper, variant))
    return todo


def decode_module(patch):
    """kernels/mla_decode.py, or a copy of it with ``patch`` applied."""
    from lab.seesaw_probe import variant_module
    from mlagate.kernels import mla_decode

    return variant_module(patch, "mla_decode.py") if patch else mla_decode


def compile_one(job) -> None:
    decode_module(job[3]).compiled(job[1], job[2])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, action="append")
    parser.add_argument("--seqlen", type=int, action="append")
    parser.add_argument("--heads", type=int, action="append")
    parser.add_argument("--s-q", type=int, action="append", help="query tokens per sequence (MTP: 2-4)")
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--variant", help="a patch of kernels/mla_decode.py, its fp8 kernel timed beside the tree's")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    from lab.seesaw_probe import patch_refusal

    refused = args.variant and patch_refusal(args.variant, "mla_decode.py")
    if refused:
        parser.error(refused)

    import torch

    from mlagate import config as config_mod
    from mlagate.kernels import mla_decode as m
    from mlagate.measure import metrics, timer
    from mlagate.measure.precompile import in_processes
    from mlagate.measure.summary import median

    todo = kernels(args.batch or [64, 128], args.seqlen or [4096], args.heads or [16], args.s_q or [1],
                   args.variant)
    per_point = 4 if args.variant else 3
    failed = [f"{job[0]} {job[1]}: {e}" for job, e in in_processes(compile_one, todo, args.jobs)
              if isinstance(e, Exception)]
    if failed:
        print("compile failed:", *failed, sep="\n")
        return 1
    timing = config_mod.load().timing
    rows = []
    for n in range(0, len(todo), per_point):
        shape = todo[n + 2][1]
        q, q_pe, kv, k_pe, kv_scale = m.random_inputs(shape, "cuda", seed=0)
        kv16, k_pe16 = (t.to(torch.bfloat16) for t in m.dequantized(kv, k_pe, kv_scale))
        scale = m.scale_tensor(kv_scale, "cuda")
        row = {"batch": shape.batch, "seqlen": shape.seqlen, "heads": shape.heads, "s_q": shape.s_q,
               "fp8": shape.kv_dtype}
        work = metrics.flops(shape.batch, shape.heads, shape.seqlen, shape.s_q)
        for name, kshape, config, patch in todo[n:n + per_point]:
            kernel = decode_module(patch).compiled(kshape, config)
            out, lse = torch.empty_like(q), torch.empty(q.shape[:-1], device="cuda")
            cache = (kv, k_pe, out, lse, scale) if kshape.kv_fp8 else (kv16, k_pe16, out, lse)
            kernel(q, q_pe, *cache)
            ref = m.reference(q, q_pe, kv, k_pe, kv_scale=kv_scale)[0]
            error = (out.float() - ref).abs().max().item()
            samples = timer.time_gpu(lambda: kernel(q, q_pe, *cache), timing, "record")
            us = median(samples.times_ms) * 1e3
            row[name] = {"us": us, "tflops": metrics.tflops(work, us / 1e3), "max_error": error,
                         "config": kernel.plan.config.name, "splits": kernel.plan.num_split}
            print(f"b={shape.batch:4d} s={shape.seqlen:6d} h={shape.heads:4d} s_q={shape.s_q} {name:18s} {us:8.1f} us "
                  f"{row[name]['tflops']:6.1f} TFLOPs  split {kernel.plan.num_split:2d}  max |error| {error:.1e}",
                  flush=True)
        row["fp8/bf16 hopper speed"] = row["hopper bf16"]["us"] / row["hopper fp8"]["us"]
        row["fp8 hopper/bf16 seesaw speed"] = row["seesaw bf16"]["us"] / row["hopper fp8"]["us"]
        print(f"  hopper: fp8 cache {row['fp8/bf16 hopper speed']:.3f}x the bf16 cache's speed; "
              f"{row['fp8 hopper/bf16 seesaw speed']:.3f}x the bf16 seesaw's", flush=True)
        if args.variant:
            row["variant/tree fp8 speed"] = row["hopper fp8"]["us"] / row["hopper fp8 variant"]["us"]
            print(f"  variant: {row['variant/tree fp8 speed']:.3f}x the tree's fp8 kernel's speed", flush=True)
        rows.append(row)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

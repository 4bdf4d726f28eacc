"""Whether the seesaw over pages is correct and keeps up with FlashMLA on the serving workloads (GPU).

kernels/mla_decode_seesaw.py paged_program, the kernel the seesaw's workload cases run, beside the hopper family's
pipelined paged kernel.

    python -m lab.seesaw_paged_probe [--heads 16 --heads 128] [--s-q 1 --s-q 2] [--dtype bfloat16] [--jobs 12]
                                     [--piece-cost 4 --piece-cost 2]

First the edge cases against the float32 reference at rtol = atol = 0.01, shuffled pages of 64: a 1-token sequence
beside a 131072-token one, every sequence shorter than one tile, and 20 launches bit-identical. Then per workload of
perf.yml (batch 64 and 128) and head count, one set of inputs (mlagate.measure.harness.Inputs of the workload case)
through FlashMLA, tilelang-hopper and tilelang-seesaw as the product launches them (measure.impls.prepare: the
seesaw over pages at its schedule's piece cost, mla_decode_paged.piece_cost_tiles) and the seesaw again at each
--piece-cost, in pairs of tiles (the schedule is runtime data, one compile serves them all), each checked, then timed
with the project's one clock (measure.timer.time_gpu, the `record` budget): microseconds and the ratio to FlashMLA;
and each GPU kernel's mean time (torch.profiler) of FlashMLA and tilelang-seesaw, so the combine's share shows; for a
uniform workload, FlashMLA and the seesaw on a dense cache of the same lengths too (what pages and schedule cost),
and the seesaw over the same pages in sequence order (what their scatter costs).
"""

import argparse


def seesaw_paged_config(mean_shape, arch):
    from mlagate.measure import impls

    return impls.paged_config("tilelang-seesaw", mean_shape, arch)


def edge_batches() -> list:
    """(name, lengths) of the edge cases."""
    return [("1 token beside 131072", [1, 131072, 700, 64, 65]), ("all shorter than a tile", [1, 2, 17, 63, 64, 5])]


def kernel_times(launch, repeats: int = 20) -> str:
    """Each GPU kernel's mean time in one launch (torch.profiler): the decode kernel apart from the combine."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    launch()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            launch()
        torch.cuda.synchronize()
    rows = [(e.key, e.self_device_time_total / repeats) for e in prof.key_averages() if e.self_device_time_total > 0]
    return ", ".join(f"{name[:40]} {us:.1f} µs" for name, us in sorted(rows, key=lambda r: -r[1]))


def compile_one(job):
    from mlagate.kernels import mla_decode_paged as paged

    shape, config, lengths = job
    paged.compiled(shape, config, lengths=list(lengths))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     usage="python -m lab.seesaw_paged_probe [options]")
    parser.add_argument("--heads", type=int, action="append")
    parser.add_argument("--s-q", type=int, action="append")
    parser.add_argument("--dtype", action="append")
    parser.add_argument("--jobs", type=int, default=12)
    parser.add_argument("--piece-cost", type=int, action="append")
    args = parser.parse_args(argv)

    import torch

    from mlagate import config as config_mod
    from mlagate.case import Case
    from mlagate.kernels import mla_decode
    from mlagate.kernels import mla_decode_paged as paged
    from mlagate.measure import impls
    from mlagate.measure.harness import Inputs, check_output
    from mlagate.measure.precompile import precompile
    from mlagate.measure.summary import median
    from mlagate.measure.timer import time_gpu

    cfg = config_mod.load()
    device = torch.device("cuda", 0)
    arch = mla_decode.device_arch(device)
    heads_list, s_qs, dtypes = args.heads or [16, 128], args.s_q or [1, 2], args.dtype or ["bfloat16"]
    costs = args.piece_cost or []

    points = []
    for dtype in dtypes:
        for heads in heads_list:
            for s_q in s_qs:
                for name, w in cfg.workloads.items():
                    for batch in (64, 128):
                        lengths = list(w.lengths(batch))
                        shape = paged.PagedShape.holding(lengths, heads, 64, dtype, s_q=s_q)
                        points.append((name, w, batch, heads, s_q, dtype, lengths, shape))
    jobs = [(p[-1], seesaw_paged_config(p[-1].at_mean_length(p[-2]), arch), tuple(p[-2])) for p in points]
    # a sequence holds at least its s_q new tokens (the first one's causal row sees one position)
    edges = [(paged.PagedShape.holding([max(n, q) for n in lengths], h, 64, "bfloat16", s_q=q),
              [max(n, q) for n in lengths], name) for name, lengths in edge_batches() for h in heads_list for q in s_qs]
    jobs += [(s, seesaw_paged_config(s.at_mean_length(lengths), arch), tuple(lengths)) for s, lengths, _ in edges]
    failed = precompile(jobs, args.jobs, echo=lambda line: None)
    print(f"compiled {len(jobs) - len(failed)} of {len(jobs)} seesaw-paged kernels", flush=True)
    for job, why in failed.items():
        print(f"  failed: {job[0]}: {why}")

    for shape, lengths, name in edges:
        inputs = paged.random_paged_inputs(len(lengths), shape.heads, lengths, 64, "bfloat16", device=device,
                                           seed=1, s_q=shape.s_q)
        kernel = paged.compiled(shape, seesaw_paged_config(shape.at_mean_length(lengths), arch), device, lengths)
        out, lse = torch.empty_like(inputs[0]), torch.empty(inputs[0].shape[:-1], device=device)
        first = kernel(*inputs, out, lse)[0].clone()
        error = check_output(first, paged.reference_paged(*inputs)[0])
        same = all(torch.equal(kernel(*inputs, out, lse)[0], first) for _ in range(20))
        print(f"edge {name}, heads {shape.heads}, s_q {shape.s_q}: max abs error {error['max_abs']:.2e}, "
              f"20 repeats bit-identical: {same}", flush=True)

    columns = ["tilelang-hopper", "tilelang-seesaw"] + [f"seesaw-paged cost {c}" for c in costs]
    header = " | ".join(f"{c} µs | ratio" for c in columns)
    print(f"| workload | b | heads | s_q | dtype | FlashMLA µs | {header} |")
    print("|---|---:|---:|---:|---|---:|" + "---:|---:|" * len(columns))
    for name, w, batch, heads, s_q, dtype, lengths, shape in points:
        case = Case("flash_mla", batch, w.mean, dtype, heads, q_len=s_q, workload=w.tag(64), page_size=64,
                    lengths=tuple(lengths))
        inputs = Inputs(case, device)
        tensors = tuple(inputs.tensors)[:6]
        config = seesaw_paged_config(shape.at_mean_length(lengths), arch)
        kernel = paged.compiled(shape, config, device)
        out, lse = torch.empty_like(tensors[0]), torch.empty(tensors[0].shape[:-1], device=device)
        launches = {impl: impls.prepare(impl, inputs.tensors, device) for impl in ["flash_mla", *columns[:2]]}
        for column, cost in zip(columns[2:], costs):
            batch_args = kernel.batch(paged.balanced_schedule(lengths, kernel.plan.config.block_N, kernel.plan.parts,
                                                              cost), device)
            launches[column] = lambda b=batch_args: kernel(*tensors, out, lse, batch=b)[0]
        us = {}
        for impl, launch in launches.items():
            try:
                check_output(launch(), inputs.expected)
                us[impl] = median(time_gpu(launch, cfg.timing, "record", device=device).times_ms) * 1e3
            except Exception as e:  # noqa: BLE001 - a probe: print the row's reason and go on
                print(f"  {name} b{batch} h{heads} s_q{s_q} {impl}: {type(e).__name__}: {str(e)[:200]}")
        for impl in ("flash_mla", "tilelang-seesaw"):
            try:
                print(f"  kernels of {name} b{batch} h{heads} s_q{s_q} {impl}: {kernel_times(launches[impl])}",
                      flush=True)
            except Exception as e:  # noqa: BLE001 - a probe: the profiler may be unavailable
                print(f"  kernels of {impl}: {type(e).__name__}: {str(e)[:200]}")
        if w.distribution == "uniform":  # the same work on a dense cache: what the pages and the schedule cost
            dense = Inputs(Case("tilelang-seesaw", batch, w.mean, dtype, heads, q_len=s_q), device)
            for impl in ("flash_mla", "tilelang-seesaw"):
                launch = impls.prepare(impl, dense.tensors, device)
                check_output(launch(), dense.expected)
                dense_us = median(time_gpu(launch, cfg.timing, "record", device=device).times_ms) * 1e3
                print(f"  dense {name} b{batch} h{heads} s_q{s_q} {impl}: {dense_us:.1f} µs; {kernel_times(launch)}",
                      flush=True)
            del dense
            # the same pages in sequence order: what their scatter costs
            ordered = paged.random_paged_inputs(batch, heads, lengths, 64, dtype, device=device, seed=1, s_q=s_q,
                                                shuffle=False)
            launch_ordered = paged.compiled(shape, config, device, lengths)
            ordered_us = median(time_gpu(lambda: launch_ordered(*ordered, out, lse), cfg.timing, "record",
                                         device=device).times_ms) * 1e3
            print(f"  pages in order {name} b{batch} h{heads} s_q{s_q} tilelang-seesaw: {ordered_us:.1f} µs",
                  flush=True)
            del ordered
        fm = us.get("flash_mla")
        cells = [f"{us[k]:.1f} | {fm / us[k]:.3f}" if k in us and fm else "- | -" for k in columns]
        row = f"| {name} | {batch} | {heads} | {s_q} | {dtype} | {fm or float('nan'):.1f} | "
        print(row + " | ".join(cells) + " |", flush=True)
        del inputs, launches
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

"""Issue 16 on one H200: does splitting the KV help the seesaw where its blocks leave SMs idle?

At batch 64, 128 heads the seesaw launches 64 x 2 = 128 blocks on 132 SMs and does not split (the rule in
mla_decode.resolve_num_split), and b64 s4096 h128 bf16 read 0.925x FlashMLA in two runs (2026-12-01). This
times the seesaw at forced splits beside FlashMLA, with the project's clock (perf.yml's `record` budget).

    PYTHONPATH=$PWD python notes/seesaw_splits.py [--jobs 15] [--out FILE]
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

SPLITS = (0, 2, 3, 4)  # 0: the committed rule (1 here)
POINTS = [(64, 4096, 128), (64, 8192, 128), (128, 4096, 128)]


def configs():
    from mlagate.kernels import mla_decode as m

    return [(m.Shape(batch=b, seqlen=s, heads=h, dtype=d), m.SEESAW.with_(num_split=k))
            for (b, s, h) in POINTS for d in ("float16", "bfloat16") for k in SPLITS]


def build(job):
    from mlagate.kernels import mla_decode as m

    shape, config = job
    return m.CompiledDecode(shape, config, "sm_90", 132)


def build_quietly(job):
    build(job)  # into TileLang's disk cache; the kernel object stays in the worker


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=15)
    parser.add_argument("--out")
    args = parser.parse_args()
    import torch

    from mlagate import config as config_mod
    from mlagate.measure import impls, metrics, timer
    from mlagate.measure.precompile import in_processes
    from mlagate.measure.summary import median
    from mlagate.kernels import mla_decode as m

    for job, outcome in in_processes(build_quietly, configs(), args.jobs):
        if isinstance(outcome, Exception):
            print(f"failed: {job}: {outcome!r}"[:400], flush=True)
    timing, rows = config_mod.load().timing, []
    for shape in dict.fromkeys(s for s, _ in configs()):
        inputs = m.random_inputs(shape, "cuda", seed=0)
        work = metrics.flops(shape.batch, shape.heads, shape.seqlen)
        row = {"batch": shape.batch, "seqlen": shape.seqlen, "heads": shape.heads, "dtype": shape.dtype}
        fns = {"flash_mla": impls.prepare("flash_mla", inputs, inputs[0].device)}
        outs = {}
        for k in SPLITS:
            kernel = build((shape, m.SEESAW.with_(num_split=k)))
            out = outs[k] = torch.empty_like(inputs[0])
            lse = torch.empty(shape.batch, shape.heads, device=out.device, dtype=torch.float32)
            fns[f"split{k}:{kernel.plan.num_split}"] = lambda kernel=kernel, out=out, lse=lse: kernel(*inputs, out, lse)[0]
        for name, fn in fns.items():
            row[name] = metrics.tflops(work, median(timer.time_gpu(fn, timing, "record").times_ms))
        rows.append(row)
        ref = row["flash_mla"]
        close = all(torch.allclose(outs[k].float(), outs[0].float(), rtol=0.01, atol=0.01) for k in SPLITS)
        print(f"b={shape.batch} s={shape.seqlen} h={shape.heads} {shape.dtype:9s} flash_mla {ref:6.1f}  "
              + "  ".join(f"{n} {v:6.1f} ({v / ref:.3f})" for n, v in row.items() if n.startswith("split"))
              + f"  outputs agree: {close}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

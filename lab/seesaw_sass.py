"""The seesaw (or a patch of it) lowered and compiled for one shape: did nvcc keep the warps converged? (CPU)

Needs TileLang, nvcc and cuobjdump (the test extra brings cuobjdump), no GPU. Per kernel: WARPSYNC before the
wgmma groups and named barriers, BRA.DIV (a divergence check before a shuffle), registers and spills, with
mlagate build's own nvcc flags and parsers (mlagate.build). A change to the seesaw can keep its loop and still
cost: the rejected prefetch variant (2026-12-01, 6-8% slower on the H200) had 44 WARPSYNC.ALL and 22
WARPSYNC.COLLECTIVE against 2 and 0, at 246 registers against 224 (b64 s4096 h128 bf16, nvcc 13.0).

    python -m lab.seesaw_sass [--variant PATCH] [--shape 64,4096,128,bfloat16] [--keep DIR]
    python -m lab.seesaw_sass --variant lab/seesaw_variants/left_right_pe.diff
"""

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

INSTRUCTIONS = ("WARPSYNC.ALL", "WARPSYNC.COLLECTIVE", "BRA.DIV", "BAR.SYNC", "HGMMA", "UTMALDG")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", help="a patch of kernels/mla_decode_seesaw.py (as lab/seesaw_probe.py takes)")
    parser.add_argument("--shape", default="64,4096,128,bfloat16", help="batch,seqlen,heads,dtype")
    parser.add_argument("--keep", help="folder to write the lowered .cu and the .sass into")
    args = parser.parse_args(argv)
    from lab import seesaw_probe

    refused = args.variant and seesaw_probe.patch_refusal(args.variant)
    if refused:
        parser.error(refused)

    from mlagate.build import analyse, toolchain
    from mlagate.kernels import mla_decode as m

    if args.variant:
        m.schedule_modules["seesaw"] = seesaw_probe.variant_module(args.variant)
    batch, seqlen, heads, dtype = args.shape.split(",")
    p = m.plan(m.Shape(batch=int(batch), seqlen=int(seqlen), heads=int(heads), dtype=dtype), m.SEESAW, "sm_90a")
    source = m.lowered(p, "sm_90a").kernel_source
    tools = toolchain.cuda_toolchain()
    with tempfile.TemporaryDirectory(prefix="seesaw-sass-") as tmp:
        cu, cubin = Path(tmp) / "kernel.cu", Path(tmp) / "kernel.cubin"
        cu.write_text(source)
        built = subprocess.run(toolchain.nvcc_command(tools, "sm_90a", cu, cubin), capture_output=True, text=True)
        if built.returncode:
            print(built.stderr[-3000:])
            return 1
        sass = subprocess.run([tools["cuobjdump"] or "cuobjdump", "-sass", str(cubin)], capture_output=True,
                              text=True, check=True).stdout
    if args.keep:
        name = Path(args.variant).stem if args.variant else "committed"
        stem = Path(args.keep) / f"{name}_{args.shape.replace(',', '_')}"
        stem.parent.mkdir(parents=True, exist_ok=True)
        stem.with_suffix(".cu").write_text(source)
        stem.with_suffix(".sass").write_text(sass)
    resources = analyse.parse_ptxas(built.stdout + built.stderr)
    print(f"{args.variant or 'committed'} {args.shape}: {p.num_split} split(s), masked {p.masked}")
    for kernel, counts in analyse.count_sass(sass, INSTRUCTIONS).items():
        r = resources.get(kernel, {})
        print(f"  {kernel}: {r.get('registers')} registers, spills {r.get('spill_stores')}/{r.get('spill_loads')}; "
              + ", ".join(f"{key} {n}" for key, n in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

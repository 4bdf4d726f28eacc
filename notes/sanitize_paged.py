"""One ragged batch of perf.yml's ragged-4k workload through the paged TileLang kernel, checked against the
reference: run under `compute-sanitizer --tool memcheck` (notes/h200_workloads.sh) to show no out-of-bounds
access, with pages of 64 (the tile path) and of 1 (the gathered rows), shuffled.

    python notes/sanitize_paged.py [--batch 64] [--config hopper]
"""

import argparse


def main():
    import torch

    from mlagate import config as config_mod
    from mlagate.kernels import mla_decode, mla_decode_paged as paged
    from mlagate.measure.harness import check_output

    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--config", default="hopper")
    args = parser.parse_args()
    lengths = config_mod.load().workloads["ragged-4k"].lengths(args.batch)
    for page_size in (64, 1):
        inputs = paged.random_paged_inputs(args.batch, 16, lengths, page_size, "float16", device="cuda", seed=0)
        out = paged.mla_decode_paged(*inputs, config=mla_decode.CONFIGS[args.config])
        torch.cuda.synchronize()
        error = check_output(out, paged.reference_paged(*inputs)[0])
        print(f"page {page_size}: {args.batch} sequences, lengths {min(lengths)}..{max(lengths)}, "
              f"max abs error {error['max_abs']:.2e}", flush=True)


if __name__ == "__main__":
    main()

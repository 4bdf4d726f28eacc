"""Whether the paged kernels touch memory outside their pages on a skewed batch (GPU, under compute-sanitizer).

    compute-sanitizer --tool memcheck --error-exitcode 9 python -m lab.sanitize_paged [--config seesaw]
        [--heads 16 --heads 128] [--s-q 1 --s-q 2] [--dtype bfloat16] [--batch 64]

One skewed batch per (heads, s_q): perf.yml's few-long-2k lengths at ``--batch`` plus a 1-token and a 131072-token
sequence (the longest a cache holds), pages of the config's page size (64 on Hopper; 1 too for the pipelined
configs, whose pages of 1 take the gathered-row path) handed out shuffled, through
`mla_decode_paged.mla_decode_paged` with the config a workload case of the family runs (measure.impls.paged_config,
the tuned table's at the batch's mean length: for the seesaw, the seesaw over pages), each output
checked against the float32 reference at rtol = atol = 0.01. memcheck reports any out-of-bounds or misaligned
access; the script prints each batch's max abs error.
"""

import argparse

LONGEST = 131072


def batches(batch: int, s_q: int = 1) -> list:
    """The lengths of the skewed batch: few-long-2k's ``batch`` sequences, one of 1 token and one of LONGEST; each
    at least s_q tokens (a cache holds its s_q new tokens)."""
    from mlagate import config as config_mod

    return [max(n, s_q) for n in [*config_mod.load().workloads["few-long-2k"].lengths(batch), 1, LONGEST]]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     usage="python -m lab.sanitize_paged [options] (under compute-sanitizer)")
    parser.add_argument("--config", default="seesaw", help="kernel family (mla_decode.CONFIGS): seesaw, hopper, ...")
    parser.add_argument("--heads", type=int, action="append", help="query heads (repeatable; default 16 and 128)")
    parser.add_argument("--s-q", type=int, action="append", help="query tokens (repeatable; default 1 and 2)")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args(argv)

    import torch

    from mlagate.kernels import mla_decode
    from mlagate.kernels import mla_decode_paged as paged
    from mlagate.measure import impls
    from mlagate.measure.harness import check_output

    arch = mla_decode.device_arch(torch.device("cuda"))
    for heads in args.heads or [16, 128]:
        for s_q in args.s_q or [1, 2]:
            lengths = batches(args.batch, s_q)
            mean = paged.PagedShape.holding(lengths, heads, 64, args.dtype, s_q=s_q).at_mean_length(lengths)
            config = impls.paged_config(f"tilelang-{args.config}", mean, arch)
            for page_size in (64,) if config.schedule == "seesaw" else (64, 1):
                inputs = paged.random_paged_inputs(len(lengths), heads, lengths, page_size, args.dtype,
                                                   device="cuda", seed=0, s_q=s_q)
                out = paged.mla_decode_paged(*inputs, config=config)
                torch.cuda.synchronize()
                error = check_output(out, paged.reference_paged(*inputs)[0])
                print(f"{config.name} {args.dtype} heads {heads} s_q {s_q} page {page_size}: {len(lengths)} sequences "
                      f"of {min(lengths)}..{max(lengths)} tokens, max abs error {error['max_abs']:.2e}", flush=True)


if __name__ == "__main__":
    main()

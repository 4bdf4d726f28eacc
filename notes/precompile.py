"""Compile every TileLang kernel of a grid in parallel processes, so that a following `mlagate bench` or
`mlagate record` loads them from TileLang's disk cache (both now compile their own cases' kernels beside the
timing, measure.precompile.ahead; this also takes configs no record runs, and shows each kernel).

    python notes/precompile.py --grid full [--dtype float16] [--config hopper] [--jobs 14]
"""

import argparse


def main():
    from mlagate import config as config_mod
    from mlagate.kernels import mla_decode as m
    from mlagate.measure import environment, impls
    from mlagate.measure.precompile import default_jobs, precompile

    parser = argparse.ArgumentParser()
    parser.add_argument("--grid", default="full")
    parser.add_argument("--dtype", action="append")
    parser.add_argument("--config", action="append", default=None, help="kernel config (default: all)")
    parser.add_argument("--jobs", type=int, default=default_jobs())
    args = parser.parse_args()
    cfg = config_mod.load()
    arch = m.device_arch(environment.device())
    names = [impls.TILELANG_PREFIX + name for name in (args.config or m.CONFIGS)]
    cases = cfg.cases(args.grid, names, environment.platform(), args.dtype)
    precompile([k for c in cases if (k := impls.case_kernel(c, arch)) is not None], args.jobs)


if __name__ == "__main__":
    main()

"""Compile every TileLang kernel of a grid in parallel processes, so that a following
`mlagate bench` or `mlagate record` loads them from TileLang's disk cache instead of
compiling one after another inside the timed run's worker (mlagate.measure.precompile).

    python notes/precompile.py --grid full [--dtype float16] [--config hopper] [--jobs 14]
"""

import argparse
import os


def main():
    from mlagate import config as config_mod
    from mlagate.kernels import mla_decode as m
    from mlagate.kernels.mla_decode_paged import PagedShape
    from mlagate.measure import environment, impls
    from mlagate.measure.precompile import precompile

    parser = argparse.ArgumentParser()
    parser.add_argument("--grid", default="full")
    parser.add_argument("--dtype", action="append")
    parser.add_argument("--config", action="append", default=None, help="kernel config (default: all)")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    args = parser.parse_args()
    cfg = config_mod.load()
    dtypes = args.dtype or cfg.platform(environment.platform()).dtypes
    arch = m.device_arch(environment.device())
    shapes = {m.Shape(batch=c.batch, seqlen=c.seqlen, heads=c.heads, dtype=c.dtype)
              for c in cfg.grid.cases(args.grid, ["x"], dtypes)}
    names = [impls.TILELANG_PREFIX + name for name in (args.config or m.CONFIGS)]
    # each family's config as the committed table tunes it per shape: what a record then runs
    kernels = sorted({(s, config) for impl in names for s in shapes
                      if (config := impls.tilelang_config(impl, s, arch)).runs_on(arch)}, key=str)
    # the grid's workloads: the paged kernel, with the config the dense one runs at the batch's mean length
    for case in cfg.cases(args.grid, names, environment.platform(), dtypes):
        if case.paged:
            shape = PagedShape.holding(case.lengths, case.heads, case.page_size, case.dtype)
            config = impls.paged_config(case.impl, shape.at_mean_length(case.lengths), arch)
            if config.runs_on(arch) and (shape, config, tuple(case.lengths)) not in kernels:  # the seesaw's is hopper's
                kernels.append((shape, config, tuple(case.lengths)))
    precompile(kernels, args.jobs)


if __name__ == "__main__":
    main()

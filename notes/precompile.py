"""Compile every TileLang kernel of a grid in parallel processes, so that a following
`mlagate bench` or `mlagate record` loads them from TileLang's disk cache instead of
compiling one after another inside the timed run's worker.

    python notes/precompile.py --grid full [--dtype float16] [--jobs 14]
"""

import argparse
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed


def compile_one(args):
    config_name, batch, seqlen, heads, dtype = args
    from mlagate.kernels import mla_decode as m

    m.compiled(m.Shape(batch=batch, seqlen=seqlen, heads=heads, dtype=dtype), m.CONFIGS[config_name])
    return args


def main():
    from mlagate import config as config_mod
    from mlagate.measure import environment

    parser = argparse.ArgumentParser()
    parser.add_argument("--grid", default="full")
    parser.add_argument("--dtype", action="append")
    parser.add_argument("--config", action="append", default=None, help="kernel config (default: all)")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    args = parser.parse_args()
    cfg = config_mod.load()
    from mlagate.kernels import mla_decode as m

    dtypes = args.dtype or cfg.platform(environment.platform()).dtypes
    jobs = sorted({(name, c.batch, c.seqlen, c.heads, c.dtype)
                   for name in (args.config or m.CONFIGS)
                   for c in cfg.grid.cases(args.grid, ["x"], dtypes)})
    # spawn: importing tilelang here already initialised CUDA, which a forked child cannot reuse
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        for n, fut in enumerate(as_completed([pool.submit(compile_one, j) for j in jobs]), 1):
            try:
                print(f"[{n}/{len(jobs)}] compiled {fut.result()}", flush=True)
            except Exception as e:  # reported; the bench then reports the case itself
                print(f"[{n}/{len(jobs)}] failed: {type(e).__name__}: {str(e)[-300:]}", flush=True)


if __name__ == "__main__":
    main()

"""Compile TileLang kernels in parallel processes before a timed run, so that its worker loads them from
TileLang's disk cache instead of compiling one after another inside the run (`mlagate tune`,
notes/precompile.py); and the process pool that does it, which `mlagate tune` lowers candidates in too."""

import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor, as_completed


def in_processes(fn, items: list, jobs: int, deadline: float | None = None):
    """(item, fn(item), or the exception it raised) as each finishes, in ``jobs`` spawned processes (in this
    one for ``jobs`` 1); none starts after ``deadline`` (time.monotonic())."""

    def past() -> bool:
        return deadline is not None and time.monotonic() > deadline

    if jobs == 1:
        for item in items:
            if past():
                return
            try:
                yield item, fn(item)
            except Exception as e:  # noqa: BLE001 - the caller reports it per item
                yield item, e
        return
    if past():
        return
    # spawn: a forked child cannot use the CUDA context a parent that imported tilelang may hold
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(fn, item): item for item in items}
        for future in as_completed(futures):
            if past():
                for f in futures:
                    f.cancel()
            if not future.cancelled():
                yield futures[future], future.exception() or future.result()


def compile_one(kernel) -> None:
    """Compile one (mla_decode.Shape, TileConfig) for this process's GPU, into TileLang's disk cache."""
    from mlagate.kernels import mla_decode

    mla_decode.compiled(*kernel)


def precompile(kernels, jobs: int, echo=print) -> dict:
    """Compile each (Shape, TileConfig) of ``kernels`` in ``jobs`` processes; {(shape, config): error text}
    of those that failed (the timed run then reports the case itself)."""
    kernels = list(dict.fromkeys(kernels))
    failed = {}
    for n, (kernel, outcome) in enumerate(in_processes(compile_one, kernels, jobs), 1):
        if isinstance(outcome, Exception):
            failed[kernel] = f"{type(outcome).__name__}: {str(outcome)[-300:]}"
        echo(f"[{n}/{len(kernels)}] " + (f"failed: {failed[kernel]}" if kernel in failed else f"compiled {kernel}"))
    return failed

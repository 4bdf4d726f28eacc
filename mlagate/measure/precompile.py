"""Compile TileLang kernels in parallel processes ahead of a timed run, so that its worker loads them from
TileLang's disk cache instead of compiling one after another inside the run (`mlagate record`, `mlagate
bench`, `mlagate tune`); and the process pool that does it, which `mlagate tune` lowers
candidates in too. A record and a bench compile while they time (``ahead``): the worker waits only for a
kernel the pool has not finished yet."""

import contextlib
import hashlib
import multiprocessing
import os
import signal
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from mlagate import progress


class ProcessDied(Exception):
    """The process running one item died (a segfault, the OOM killer, os._exit) before it returned."""


def _died(pool) -> ProcessDied:
    """What killed ``pool``'s one process, with its exit code where the pool still has it (a private
    attribute: the code is a courtesy, nothing relies on it)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown()  # a broken pool's manager has joined its process once this returns
    codes = [p.exitcode for p in processes if p.exitcode is not None]
    if not codes:
        return ProcessDied("the process running it died (exit code unknown)")
    code = codes[0]
    name = next((s.name for s in signal.Signals if -code == s.value), None) if code < 0 else None
    return ProcessDied(f"the process running it died with exit code {code}" + (f" ({name})" if name else ""))


def in_processes(fn, items: list, jobs: int, stop=None):
    """(item, fn(item), or the exception it raised) as each finishes, in ``jobs`` spawned processes (in this
    one for ``jobs`` 1); none starts once ``stop()`` is true.

    Each process is a pool of its own that runs one item at a time, so a process that dies (a segfault, the
    OOM killer) fails only the item it was running, as ProcessDied; a fresh process takes the next item."""

    def past() -> bool:
        return stop is not None and stop()

    if jobs == 1:
        for item in items:
            if past():
                return
            try:
                yield item, fn(item)
            except Exception as e:  # noqa: BLE001 - the caller reports it per item
                yield item, e
        return
    # spawn: a forked child cannot use the CUDA context a parent that imported tilelang may hold
    context = multiprocessing.get_context("spawn")
    # lower priority: the measuring worker, timing beside these, must keep the GPU's queue ahead of it
    lower = {"initializer": _child_init}
    waiting, running, idle, pools = list(items)[::-1], {}, [], []
    try:
        while True:
            while waiting and len(running) < jobs and not past():
                if not idle:
                    pools.append(ProcessPoolExecutor(1, mp_context=context, **lower))
                    idle.append(pools[-1])
                pool, item = idle.pop(), waiting.pop()
                running[pool.submit(fn, item)] = pool, item
            if not running:
                return
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                pool, item = running.pop(future)
                try:
                    outcome = future.result()
                    idle.append(pool)
                except BrokenProcessPool:  # its process died: this item's doing, no other's
                    outcome = _died(pool)
                except Exception as e:  # noqa: BLE001 - the caller reports it per item
                    outcome = e
                    idle.append(pool)
                yield item, outcome
    finally:
        for pool in pools:
            pool.shutdown(cancel_futures=True)


def compile_one(kernel) -> None:
    """Compile one kernel for this process's GPU, into TileLang's disk cache: a dense (mla_decode.Shape,
    TileConfig), or a paged (mla_decode_paged.PagedShape, TileConfig, the batch's lengths)."""
    from mlagate.kernels import mla_decode, mla_decode_paged

    if len(kernel) == 3:
        shape, config, lengths = kernel
        mla_decode_paged.compiled(shape, config, lengths=list(lengths))
    else:
        mla_decode.compiled(*kernel)


def failure(e: Exception) -> str:
    """One compile's failure as a line: the exception's type and the end of its text (a compiler's log is long)."""
    return f"{type(e).__name__}: {str(e)[-300:]}"


def precompile(kernels, jobs: int, echo=print, stop=None, ready: str | None = None) -> dict:
    """Compile each kernel of ``kernels`` (compile_one's) in ``jobs`` processes, none started once ``stop()`` is
    true, marking each finished one in the folder ``ready`` (wait_compiled); {kernel: error text} of those that
    failed (the timed run then reports the case itself)."""
    kernels = list(dict.fromkeys(kernels))
    failed = {}
    for n, (kernel, outcome) in enumerate(in_processes(compile_one, kernels, jobs, stop), 1):
        if isinstance(outcome, Exception):
            failed[kernel] = failure(outcome)
        if ready:
            open(os.path.join(ready, marker(kernel)), "w").close()
        echo(f"[{n}/{len(kernels)}] " + (f"failed: {failed[kernel]}" if kernel in failed else f"compiled {kernel}"))
    return failed


def default_jobs(workers: int = 1) -> int:
    """Compiling processes for a record or a bench: the cores this process may use but one per measuring
    worker (one per GPU) and one for the host, at least 2 (each compile in a process of its own: a compiler
    crash takes only its kernel), at most 16 (each holds torch and TileLang, ~1 GB)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)
    return max(2, min(16, cores - workers - 1))


def precompile_cases(cases, jobs: int, echo=print, stop=None, ready: str | None = None) -> dict:
    """Compile the TileLang kernels ``cases`` launch on this GPU (measure.impls.case_kernel), in ``cases``'
    order, in ``jobs`` processes, none started once ``stop()`` is true, each marked in ``ready`` when done
    (ahead): a kernel edit then costs one parallel compile instead of one compile per case inside the timed
    run. Only a head start: a fault here is one printed line, and the timed run reports each case's own.
    Returns {case label: why} of the failures."""
    from mlagate.case import TILELANG_PREFIX

    cases = [c for c in cases if c.impl.startswith(TILELANG_PREFIX)]  # none: no device query either
    if not cases:
        return {}
    jobs, start = max(2, jobs), time.monotonic()
    try:
        from mlagate.kernels import mla_decode
        from mlagate.measure import environment, impls

        arch = mla_decode.device_arch(environment.device())
        kernels = {}  # kernel -> the first case that launches it
        for c in cases:
            kernels.setdefault(impls.case_kernel(c, arch), c)
        kernels.pop(None, None)
        failed = precompile(list(kernels), jobs, echo=lambda line: None, stop=stop, ready=ready)
    except Exception as e:  # noqa: BLE001 - a head start, not a measurement: the timed run reports the cases
        echo(_head_start_lost(e))
        return {}
    echo(f"compiled {len(kernels) - len(failed)} of {len(kernels)} TileLang kernels in {jobs} processes "
         f"({time.monotonic() - start:.0f} s) beside the timing"
         + "".join(f"\n  failed: {kernels[k].label()}: {why}" for k, why in failed.items()))
    return {kernels[k].label(): why for k, why in failed.items()}


NICE = 10  # added to the compiling processes' niceness


def _child_init() -> None:
    """A compiling process: niced, and TileLang's log to the command's log file (mlagate.progress)."""
    if hasattr(os, "nice"):
        os.nice(NICE)
    progress.child_init()
DONE = "compiling-stopped"  # ahead's last file in its folder: every kernel compiled or failed, or the timing over
WAIT_LIMIT_S = 600.0  # a compile that hangs past this is the launch's to redo, as without ahead
POLL_S = 0.02


def marker(kernel) -> str:
    """The file name that says ``kernel`` (compile_one's) is compiled; the same in every process."""
    return hashlib.sha1(repr(kernel).encode()).hexdigest()[:24]


def _head_start_lost(e: Exception) -> str:
    return (f"compiling the TileLang kernels beside the timing failed ({type(e).__name__}: {e}); "
            "each case compiles its own")


@contextlib.contextmanager
def ahead(cases, jobs: int, echo=print):
    """precompile_cases in a thread while the caller times ``cases``: timing starts at once instead of after the
    whole grid's compile. Yields the folder whose files say which kernels are done (wait_compiled). No deadline:
    the gated cases are always timed, so their kernels are needed; once the timing is over, no compile starts."""
    timed = threading.Event()
    with tempfile.TemporaryDirectory(prefix="mlagate-compiled-") as ready:
        def compile_all():
            try:
                precompile_cases(cases, jobs, echo, stop=timed.is_set, ready=ready)
            except Exception as e:  # noqa: BLE001 - a head start: the worker compiles what it waited for in vain
                echo(_head_start_lost(e))
            finally:
                open(os.path.join(ready, DONE), "w").close()

        thread = threading.Thread(target=compile_all, name="mlagate-compile-ahead", daemon=True)
        thread.start()
        try:
            yield ready
        finally:
            timed.set()
            thread.join()


def wait_compiled(ready: str | None, case, device, limit_s: float = WAIT_LIMIT_S) -> float:
    """In the measuring worker: wait until ahead's folder ``ready`` says ``case``'s TileLang kernel is compiled (or
    compiling stopped), at most ``limit_s``; the seconds waited. Nothing to wait for (no folder, not TileLang, a
    kernel that cannot be named here): 0, and the launch compiles what it needs, as without ahead."""
    if not ready:
        return 0.0
    try:
        from mlagate.kernels import mla_decode
        from mlagate.measure import impls

        kernel = impls.case_kernel(case, mla_decode.device_arch(device))
    except Exception:  # noqa: BLE001 - the launch reports the case's own error
        return 0.0
    if kernel is None:
        return 0.0
    start = time.monotonic()
    files = (os.path.join(ready, marker(kernel)), os.path.join(ready, DONE))
    # a folder gone: the record that made it is over (killed, say); this worker is an orphan, not a waiter
    while os.path.isdir(ready) and not any(os.path.exists(f) for f in files) and time.monotonic() - start < limit_s:
        time.sleep(POLL_S)
    return time.monotonic() - start

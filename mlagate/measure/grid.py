"""Run a grid of cases with fault isolation (measure.metrics derives the metrics).

Cases run in a worker process per GPU. A case that faults the GPU (illegal
memory access, a crashed process) is reported as failed with the error, its
worker is replaced, and the rest of the grid still runs. With several GPUs,
cases are dealt longest-first to the least-loaded GPU.
"""

import csv
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, replace

from mlagate.case import Case, CaseResult, RunStatus
from mlagate.config import ROOT, Budget, Timing
from mlagate.measure.kernels_run import short_name
from mlagate.measure.shards import point
from mlagate.progress import add_spent

MARK = "@@mlagate "  # prefixes the worker's protocol lines; libraries may print too
CUDA_FAULT_EXIT = 3
IDLE_REWARM_S = 1.0  # a GPU left idle this long while the worker waited for a compile warms up again


def estimated_cost(case: Case) -> float:
    """Relative run time of a case, for longest-first scheduling."""
    slow = {"torch": 4.0, "tilelang-cdna3": 3.0}.get(case.impl, 1.0)
    return case.batch * case.seqlen * (case.heads * case.q_len / 128) * slow + 5e5  # + fixed setup cost per case


def shard(cases, n_gpus: int) -> list:
    """Longest-processing-time-first by grid point: all implementations of a point to the
    least-loaded GPU, so every vendor ratio divides two measurements of one GPU. A function of
    the set of points alone (a point's cost does not count its implementations, ties go by the
    point): the same point lands on the same GPU in the record of every commit of a grid,
    whatever implementations or budgets the commit has and in whatever order its cases come."""
    groups = {}
    for index, case in enumerate(cases):
        groups.setdefault(point(case), []).append(index)
    loads = [0.0] * n_gpus
    shards = [[] for _ in range(n_gpus)]
    for p in sorted(groups, key=lambda p: (-point_cost(p), repr(p))):
        gpu = loads.index(min(loads))
        shards[gpu] += groups[p]
        loads[gpu] += point_cost(p)
    return [sorted(s) for s in shards]


def point_cost(p: tuple) -> float:
    """Relative run time of a grid point (its implementations run each), for longest-first scheduling."""
    batch, seqlen, _, heads, q_len, *_ = p  # an fp8 cache reads half the bytes: the same order of cost
    return batch * seqlen * (heads * q_len / 128) + 5e5


def worker_visible_env(parent_env: dict, index: int) -> dict:
    """The visible-device variables for the worker of torch index ``index``: the
    ``index``-th entry (an integer or a UUID) of each list the parent has set, so a
    container given HIP_VISIBLE_DEVICES=3 times GPU 3; nothing set: the bare index.
    ROCR_VISIBLE_DEVICES is narrowed only when neither HIP_ nor CUDA_ is set."""
    # ROCR_ masks first, HIP_ (else CUDA_) indexes what it leaves: gpuopen.com/learn/amd-lab-notes (affinity, part 2)
    names = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
    lists = {n: parent_env[n] for n in names if parent_env.get(n) is not None}
    if not lists:
        return {"CUDA_VISIBLE_DEVICES": str(index), "HIP_VISIBLE_DEVICES": str(index)}
    if "HIP_VISIBLE_DEVICES" in lists or "CUDA_VISIBLE_DEVICES" in lists:
        lists.pop("ROCR_VISIBLE_DEVICES", None)  # kept whole: the HIP-level list indexes into it
    out = {}
    for name, text in lists.items():
        entries = [e.strip() for e in text.split(",")] if text.strip() else []
        if not 0 <= index < len(entries):
            raise ValueError(f"GPU {index}: {name}={text!r} lists {len(entries)} device(s) (indices 0.."
                             f"{len(entries) - 1}); --gpus counts the devices the parent sees")
        out[name] = entries[index]
    return out


def parse_gpus(text):
    """'all', a count ('4') or a list ('0,2,3') -> GPU indices as torch numbers them (within the
    parent's CUDA_/HIP_/ROCR_VISIBLE_DEVICES); None for one GPU as visible."""
    if not text:
        return None
    if text == "all" or text.isdigit():
        import torch

        available = torch.cuda.device_count()
        wanted = available if text == "all" else int(text)
        if wanted < 1 or wanted > available:
            raise ValueError(f"--gpus {text}: {available} GPU(s) visible")
        gpus = list(range(wanted))
    else:
        try:
            gpus = [int(x) for x in text.split(",")]
        except ValueError:
            raise ValueError(f"--gpus must be 'all', a count or a comma-separated list, got {text!r}") from None
        if any(g < 0 for g in gpus) or len(set(gpus)) != len(gpus):
            raise ValueError(f"--gpus {text}: GPU indices are distinct numbers >= 0")
    for gpu in gpus:  # an index past a visible-devices list: error now, not one failed case per worker
        worker_visible_env(os.environ, gpu)
    return gpus


def _run_worker(cases, indices, timing, gpu, results, on_result, lock, python, budgets, deadline, compiled=None,
                spent=None):
    """Feed ``indices`` of ``cases`` to worker processes pinned to ``gpu`` until all are done."""

    def deliver(i, result, phases=None):
        with lock:
            results[i] = result
            add_spent(spent, phases)
        if on_result:
            on_result(result)

    def fail(failed, reason):
        for i in failed:
            deliver(i, CaseResult(cases[i], RunStatus.FAILED, reason, gpu=gpu))

    env = dict(os.environ)
    if gpu is not None:
        try:
            env.update(worker_visible_env(os.environ, gpu))
        except ValueError as e:
            fail(indices, str(e))
            return
    remaining = list(indices)
    while remaining:
        job = {"timing": asdict(timing), "deadline": deadline, "compiled": compiled,
               "cases": [[i, asdict(cases[i]), budgets[i]] for i in remaining]}
        with tempfile.TemporaryFile("w+") as stderr:
            # cwd = the folder holding this mlagate, so `-m` imports this same code (asv runs
            # a commit's benchmarks from a worktree; the cwd's checkout may be another commit).
            proc = subprocess.Popen([python, "-m", "mlagate.measure.grid"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, cwd=ROOT)
            try:
                proc.stdin.write(json.dumps(job))
                proc.stdin.close()
                read_job = True
            except BrokenPipeError:  # it exited before reading its job: it never started
                read_job = False
                try:
                    proc.stdin.close()
                except OSError:
                    pass
            current = None
            for line in proc.stdout:
                if not line.startswith(MARK) or not read_job:
                    continue
                msg = json.loads(line[len(MARK):])
                if msg["event"] == "start":
                    current = msg["index"]
                else:
                    deliver(msg["index"], replace(CaseResult.from_dict(msg["result"]), gpu=gpu), msg.get("spent"))
                    current = None
            code = proc.wait()
            stderr.seek(0)
            tail = stderr.read()[-1500:].strip()
        if current is not None:  # the worker died inside this case
            fail([current], f"worker exited with code {code} during this case: {tail}")
        done = [i for i in remaining if i in results]
        if not done and current is None:  # died before any case: do not loop forever
            fail(remaining, f"worker failed to start (code {code}): {tail}")
        remaining = [i for i in remaining if i not in results]


def run_cases(cases, timing: Timing, *, budgets=None, deadline=None, gpus=None, on_result=None, compiled=None,
              spent=None, python=sys.executable) -> list:
    """Measure every case (under ``budgets[i]``, default "record"); returns one CaseResult per
    case, in order. A case of another budget than "record" not started by ``deadline`` (epoch
    seconds) is skipped, saying so. ``compiled``: the folder of a compile running alongside
    (precompile.ahead), whose kernel a TileLang case waits for. ``spent``: a dict the workers' wall
    seconds per phase are added to (progress.time_spent says them)."""
    results, lock = {}, threading.Lock()
    budgets = list(budgets or ["record"] * len(cases))
    if not gpus:
        _run_worker(cases, range(len(cases)), timing, None, results, on_result, lock, python, budgets, deadline,
                    compiled, spent)
    else:
        threads = [threading.Thread(target=_run_worker,
                                    args=(cases, part, timing, gpu, results, on_result, lock, python, budgets,
                                          deadline, compiled, spent))
                   for gpu, part in zip(gpus, shard(cases, len(gpus))) if part]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return [results[i] for i in range(len(cases))]


def run_on_each(case: Case, timing: Timing, gpus, *, budget="record", python=sys.executable) -> list:
    """The same case on every GPU in ``gpus`` at once (a worker each): [CaseResult] in gpus' order."""
    results, lock = [{} for _ in gpus], threading.Lock()
    threads = [threading.Thread(target=_run_worker, args=([case], [0], timing, gpu, results[k], None, lock, python,
                                                          [budget], None))
               for k, gpu in enumerate(gpus)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [r[0] for r in results]


CSV_FIELDS = ("impl", "batch", "seqlen", "dtype", "heads", "q_len", "kv_dtype", "workload", "status", "median_ms",
              "iqr_ms", "n", "tflops", "gbps", "roofline", "vendor_ratio", "gpu", "reason", "kernels")


def write_outputs(path, results, environment: dict):
    """JSON (everything, raw samples included) at path, and a CSV beside it."""
    rows = [r.to_dict() for r in results]
    with open(path, "w") as f:
        json.dump({"environment": environment, "results": rows}, f, indent=1)
    with open(os.path.splitext(path)[0] + ".csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows({**row, "kernels": " + ".join(map(short_name, row.get("kernels", ())))} for row in rows)


def read_outputs(path) -> tuple:
    """(results, environment) of a file write_outputs wrote; JSONFileError (a ValueError) names a file that is not
    sound JSON (json_reader.load: a key twice, an infinite number, cut short)."""
    from mlagate.json_reader import load

    data = load(path, "an `mlagate bench --out` file")
    return [CaseResult.from_dict(r) for r in data["results"]], data.get("environment") or {}


def timing_from_dict(d: dict) -> Timing:
    return Timing(**{**d, "budgets": {name: Budget(**b) for name, b in d["budgets"].items()}})


def _worker():
    """Measure the cases given on stdin; one protocol line per event on stdout."""
    import torch

    from mlagate.measure.environment import device as gpu
    from mlagate.measure.harness import Inputs, measure_case
    from mlagate.measure.precompile import wait_compiled
    from mlagate.measure.timer import rewarm
    from mlagate.progress import spending

    job = json.load(sys.stdin)
    timing = timing_from_dict(job["timing"])
    deadline = job.get("deadline")
    device = inputs = None
    for index, fields, budget in job["cases"]:
        case = Case(**fields)
        print(MARK + json.dumps({"event": "start", "index": index}), flush=True)
        # The gate's own cases (the record budget) are always measured: a kernel change misses TileLang's
        # cache, and its compile time must not turn into gated cases the gate then cannot decide.
        if deadline is not None and budget != "record" and time.time() > deadline:
            result = CaseResult(case, RunStatus.SKIPPED, f"not measured: the time budget (timing.record_s = "
                                                         f"{timing.record_s:g} s) ran out before this case")
            print(MARK + json.dumps({"event": "done", "index": index, "result": result.to_dict()}), flush=True)
            continue
        spent = {}
        try:
            device = device or gpu()
            with spending(spent, "waiting for compiles"):
                waited = wait_compiled(job.get("compiled"), case, device)
            if waited > IDLE_REWARM_S:
                rewarm(device)
            if inputs is None or inputs.point != point(case):
                with spending(spent, "inputs and reference"):
                    inputs = None  # free the last problem's tensors first
                    torch.cuda.empty_cache()
                    inputs = Inputs(case, device)
            result = measure_case(case, timing, inputs, device, budget, spent)
        except Exception as e:  # reported per case; the grid goes on
            result = CaseResult(case, RunStatus.FAILED, f"{type(e).__name__}: {e}"[:2000])
        print(MARK + json.dumps({"event": "done", "index": index, "result": result.to_dict(), "spent": spent}),
              flush=True)
        if result.status == RunStatus.FAILED:
            try:
                torch.cuda.synchronize()
            except Exception:  # the context is lost (e.g. illegal address): let a fresh worker go on
                sys.exit(CUDA_FAULT_EXIT)


if __name__ == "__main__":
    _worker()

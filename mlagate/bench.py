"""Run a grid of cases with fault isolation, then derive the metrics.

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
from dataclasses import asdict

from mlagate import metrics, stats
from mlagate.config import ROOT, Case, Timing

MARK = "@@mlagate "  # prefixes the worker's protocol lines; libraries may print too
CUDA_FAULT_EXIT = 3


def estimated_cost(case: Case) -> float:
    """Relative run time of a case, for longest-first scheduling."""
    slow = {"torch": 4.0, "tilelang-cdna3": 3.0}.get(case.impl, 1.0)
    return case.batch * case.seqlen * slow + 5e5  # + fixed setup cost per case


def shard(cases, n_gpus: int) -> list:
    """Longest-processing-time-first: each case to the least-loaded GPU."""
    loads = [0.0] * n_gpus
    shards = [[] for _ in range(n_gpus)]
    for index, case in sorted(enumerate(cases), key=lambda ic: -estimated_cost(ic[1])):
        gpu = loads.index(min(loads))
        shards[gpu].append(index)
        loads[gpu] += estimated_cost(case)
    return [sorted(s) for s in shards]


def _failed(case: Case, reason: str) -> dict:
    return {"impl": case.impl, "batch": case.batch, "seqlen": case.seqlen, "dtype": case.dtype, "heads": case.heads,
            "status": "failed", "reason": reason, "samples": None, "error": {}}


def _run_worker(cases, indices, timing, gpu, results, on_result, lock, python):
    """Feed ``indices`` of ``cases`` to worker processes pinned to ``gpu`` until all are done."""
    env = dict(os.environ)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = env["HIP_VISIBLE_DEVICES"] = str(gpu)
    remaining = list(indices)
    while remaining:
        job = {"timing": asdict(timing), "cases": [[i, asdict(cases[i])] for i in remaining]}
        with tempfile.TemporaryFile("w+") as stderr:
            # cwd = the folder holding this mlagate, so `-m` imports this same code (asv runs
            # a commit's benchmarks from a worktree; the cwd's checkout may be another commit).
            proc = subprocess.Popen([python, "-m", "mlagate.bench"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=stderr, text=True, env=env, cwd=ROOT)
            proc.stdin.write(json.dumps(job))
            proc.stdin.close()
            current = None
            for line in proc.stdout:
                if not line.startswith(MARK):
                    continue
                msg = json.loads(line[len(MARK):])
                if msg["event"] == "start":
                    current = msg["index"]
                else:
                    msg["outcome"]["gpu"] = gpu
                    with lock:
                        results[msg["index"]] = msg["outcome"]
                    if on_result:
                        on_result(msg["outcome"])
                    current = None
            code = proc.wait()
            stderr.seek(0)
            tail = stderr.read()[-1500:].strip()
        if current is not None:  # the worker died inside this case
            outcome = _failed(cases[current], f"worker exited with code {code} during this case: {tail}")
            outcome["gpu"] = gpu
            with lock:
                results[current] = outcome
            if on_result:
                on_result(outcome)
        done = [i for i in remaining if i in results]
        if not done and current is None:  # died before any case: do not loop forever
            for i in remaining:
                results[i] = {**_failed(cases[i], f"worker failed to start (code {code}): {tail}"), "gpu": gpu}
        remaining = [i for i in remaining if i not in results]


def run_cases(cases, timing: Timing, *, gpus=None, on_result=None, python=sys.executable) -> list:
    """Measure every case; returns one outcome dict per case, in order."""
    results, lock = {}, threading.Lock()
    if not gpus:
        _run_worker(cases, range(len(cases)), timing, None, results, on_result, lock, python)
    else:
        threads = [threading.Thread(target=_run_worker,
                                    args=(cases, part, timing, gpu, results, on_result, lock, python))
                   for gpu, part in zip(gpus, shard(cases, len(gpus))) if part]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return [results[i] for i in range(len(cases))]


def add_metrics(rows, *, peaks=None, vendor: str | None = None) -> list:
    """Latency stats, TFLOPs, GB/s, share of roofline and ratio to the vendor."""
    out = []
    for row in rows:
        row = dict(row)
        samples = (row.get("samples") or {}).get("times_ms")
        if row["status"] == "ok" and samples:
            s = stats.summary(samples)
            work = metrics.flops(row["batch"], row["heads"], row["seqlen"])
            traffic = metrics.bytes_moved(row["batch"], row["heads"], row["seqlen"], row["dtype"])
            row.update(median_ms=s["median"], iqr_ms=s["iqr"], ci99_ms=[s["ci_low"], s["ci_high"]],
                       outliers=s["outliers"], n=s["n"], tflops=metrics.tflops(work, s["median"]),
                       gbps=metrics.gbps(traffic, s["median"]))
            if peaks:
                row["roofline"] = metrics.roofline_fraction(work, traffic, s["median"], peaks.tflops, peaks.tbps)
        out.append(row)
    if vendor:
        best = {(r["batch"], r["seqlen"], r["dtype"]): r.get("tflops") for r in out if r["impl"] == vendor}
        for r in out:
            v = best.get((r["batch"], r["seqlen"], r["dtype"]))
            if r.get("tflops") and v:
                r["vendor_ratio"] = r["tflops"] / v
    return out


CSV_FIELDS = ("impl", "batch", "seqlen", "dtype", "status", "median_ms", "iqr_ms", "n", "tflops", "gbps",
              "roofline", "vendor_ratio", "gpu", "reason")


def write_outputs(path, rows, environment: dict):
    """JSON (everything, raw samples included) at path, and a CSV beside it."""
    with open(path, "w") as f:
        json.dump({"environment": environment, "results": rows}, f, indent=1)
    with open(os.path.splitext(path)[0] + ".csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def _worker():
    """Measure the cases given on stdin; one protocol line per event on stdout."""
    import torch

    from mlagate.harness import Inputs, measure_case, shape_of

    job = json.load(sys.stdin)
    timing = Timing(**job["timing"])
    device = torch.device("cuda", 0)
    inputs = None
    for index, fields in job["cases"]:
        case = Case(**fields)
        print(MARK + json.dumps({"event": "start", "index": index}), flush=True)
        try:
            if inputs is None or inputs.shape != shape_of(case):
                inputs = None  # free the last problem's tensors first
                torch.cuda.empty_cache()
                inputs = Inputs(case, device)
            outcome = measure_case(case, timing, inputs, device).to_dict()
        except Exception as e:  # reported per case; the grid goes on
            outcome = _failed(case, f"{type(e).__name__}: {e}"[:2000])
        print(MARK + json.dumps({"event": "done", "index": index, "outcome": outcome}), flush=True)
        if outcome["status"] == "failed":
            try:
                torch.cuda.synchronize()
            except Exception:  # the context is lost (e.g. illegal address): let a fresh worker go on
                sys.exit(CUDA_FAULT_EXIT)


if __name__ == "__main__":
    _worker()

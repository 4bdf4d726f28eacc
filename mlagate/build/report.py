"""The build report of each target: one row per kernel, from its lowered module and,
where a compiler ran, its numbers. Lowering runs in processes, nvcc or hipcc in threads,
overlapped; identical sources are compiled once. The report is a dict (JSON);
mlagate.decide.build_rules.evaluate_build decides on it.

Without hipcc (or with --codegen-only) a hip report stays source level: LDS bytes
(static ``__shared__`` arrays + dynamic), launch bounds, and it says VGPRs, SGPRs and
spills are not known. MFMA instructions are counted in the source either way.
"""

import hashlib
import time
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from dataclasses import asdict

from mlagate import hardware, progress
from mlagate.build import analyse, lower, toolchain
from mlagate.build.plan import BuildError, Job, parse_target, plan_jobs
from mlagate.decide.build_rules import row_occupancy

HIP_SOURCE_LEVEL = ("LDS bytes", "MFMA instructions", "launch bounds")
HIP_NOT_COMPILED = "blocks per CU from LDS and threads only (VGPRs, SGPRs and spills need hipcc from ROCm >= 6: {})"


def _role(function: str, plan) -> str:
    if plan.num_split == 1:
        return "no-split"
    return "combine" if function.endswith("_1") else "split"


def kernel_rows(job: Job, lowered: dict, compiled: dict | None, smem_limit: int | None) -> list:
    """One row per __global__ function of a lowered (and maybe compiled) program."""
    p = job.plan()
    s = job.shape
    common = {"config": job.config.name, "dtype": s.dtype, "batch": s.batch, "seqlen": s.seqlen, "heads": s.heads,
              "s_q": s.s_q, "num_split": p.num_split, "forced_split": job.forced}

    def key(role):  # s_q past one token only: a report from before the q_len axis names its kernels the same
        sq = f"/sq{s.s_q}" if s.s_q != 1 else ""
        return f"{job.config.name}/{s.dtype}/h{s.heads}{sq}/b{s.batch}/s{s.seqlen}/{role}"

    def failed(error):  # the whole program, under its main kernel's name
        role = "split" if p.num_split > 1 else "no-split"
        return [{"kernel": key(role), "role": role, **common, "error": error}]

    if "error" in lowered:
        return failed(lowered["error"])
    sha = hashlib.sha256(lowered["source"].encode()).hexdigest()[:12]
    try:
        analysis = analyse.analyze_source(lowered["source"], job.kind)
    except BuildError as e:
        return failed(str(e))
    rows = []
    for function, info in analysis.items():
        role = _role(function, p)
        meta = lowered["meta"].get(function, {})
        row = {"kernel": key(role), "role": role, **common, "function": function, "source": sha,
               "threads": meta.get("threads"), "launch_bounds": info["launch_bounds"],
               "registers": None, "spill_stores": None, "spill_loads": None, "stack_frame": None,
               "static_smem": info["static_smem"], "dynamic_smem": meta.get("dynamic_smem", 0),
               "matrix": info["matrix"], "expected_matrix": None if role == "combine" else
               hardware.EXPECTED_MATRIX.get(hardware.arch_key(job.arch)), "wgmma_serialized": None, "error": None}
        if compiled is not None:
            if "error" in compiled:
                row["error"] = compiled["error"]
            elif function not in compiled:
                row["error"] = f"{'ptxas' if job.kind == 'cuda' else 'hipcc'} reported nothing for {function}"
            else:
                row.update(compiled[function])
        row["smem"] = (row["static_smem"] or 0) + (row["dynamic_smem"] or 0)
        occ = row_occupancy(row, job.arch, smem_limit)
        row["blocks_per_sm"], row["limited_by"] = occ["blocks"], occ["limited_by"]
        rows.append(row)
    return rows


def _source_level(kind: str, tools: dict | None, why: str | None) -> list:
    """What a report counts in the lowered source rather than from the compiler."""
    if kind == "hip":
        return ["MFMA instructions (call sites in the lowered source)"] if tools else [
            *HIP_SOURCE_LEVEL, HIP_NOT_COMPILED.format(why)]
    return [] if tools else ["registers, spills and stack (--codegen-only: not compiled)"]


class _Inline(Executor):
    """--jobs 1: run in this process (easier to debug; tests patch configs in-process)."""

    def submit(self, fn, /, *args, **kwargs):
        f = Future()
        try:
            f.set_result(fn(*args, **kwargs))
        except Exception as e:  # noqa: BLE001
            f.set_exception(e)
        return f


def build_reports(targets, configs: dict, shapes, *, jobs: int = 1, codegen_only: bool = False,
                  smem_limits: dict | None = None, commit: str | None = None) -> dict:
    """{target: report} for each target; ``configs``: target -> list of TileConfig.
    Lowering runs in ``jobs`` processes, nvcc or hipcc in ``jobs`` threads, overlapped."""
    import multiprocessing

    import tilelang

    start = time.monotonic()
    smem_limits = smem_limits or {}
    toolchains, why_source = {}, {}
    for t in targets:
        kind, _ = parse_target(t)
        if codegen_only:
            why_source[t] = "--codegen-only: not compiled"
            continue
        tools, why_source[t] = toolchain.toolchain(kind)
        if tools:
            toolchains[t] = tools
    work = [job for t in targets for job in plan_jobs(t, configs[t], shapes)]
    rows = {t: [] for t in targets}
    compiles, pending = {}, []
    pool = (_Inline() if jobs <= 1 else
            ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                                initializer=progress.child_init))
    with pool, ThreadPoolExecutor(max_workers=max(jobs, 1)) as compiler_pool, \
            progress.bar("lowering", total=len(work)) as lowering:
        futures = {pool.submit(lower.lower_job, job): job for job in work}
        for fut in as_completed(futures):
            job = futures[fut]
            lowering.advance(f"lowered {job.target} {job.config.name} b={job.shape.batch} s={job.shape.seqlen}")
            try:
                lowered = fut.result()
            except Exception as e:  # noqa: BLE001 - a crashed worker fails its kernels, not the report
                lowered = {"error": f"lowering crashed: {type(e).__name__}: {e}"}
            limit = smem_limits.get(hardware.arch_key(job.arch))
            if job.target in toolchains and "error" not in lowered:
                key = (job.arch, lowered["source"])
                if key not in compiles:  # identical sources compile once
                    compiles[key] = compiler_pool.submit(toolchain.COMPILE[job.kind], lowered["source"], job.arch,
                                                         toolchains[job.target])
                pending.append((job, lowered, compiles[key], limit))
            else:
                rows[job.target] += kernel_rows(job, lowered, None, limit)
        for job, lowered, compiled, limit in pending:
            try:
                result = compiled.result()
            except Exception as e:  # noqa: BLE001
                result = {"error": f"the compiler could not run: {type(e).__name__}: {e}"}
            rows[job.target] += kernel_rows(job, lowered, result, limit)
    wall = round(time.monotonic() - start, 1)
    reports = {}
    for t in targets:
        kind, arch = parse_target(t)
        tools = toolchains.get(t)
        reports[t] = {
            "schema": 1, "target": t, "arch": arch, "commit": commit, "tilelang": tilelang.__version__,
            "toolchain": ({"compiler": None, "matrix_check": "source"} if not tools else
                          {"nvcc" if kind == "cuda" else "hipcc": tools["version"],
                           "matrix_check": tools["matrix_check"]}),
            "cuobjdump": tools.get("cuobjdump") if tools else None,
            "source_level_only": _source_level(kind, tools, why_source.get(t)),
            "configs": {c.name: asdict(c) for c in configs[t]},
            "shapes": sorted({(s.batch, s.seqlen, s.heads, s.s_q) for s in shapes}),
            "dtypes": sorted({s.dtype for s in shapes}),
            "kernels": sorted(rows[t], key=lambda r: r["kernel"]),
            "sources": len({r.get("source") for r in rows[t] if r.get("source")}),
            "wall_s": wall,
        }
    return reports

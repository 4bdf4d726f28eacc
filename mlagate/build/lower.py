"""Lowering one job with tilelang (in worker processes): the kernel source and what only
the lowered module says, each kernel's dynamic shared memory and threads per block."""

from mlagate.build.plan import Job


def lower_job(job: Job) -> dict:
    """{"source": CUDA/HIP C++, "meta": {function: dynamic_smem, threads}}, or {"error": text}:
    errors are returned as text (TVM's exceptions do not always cross a process boundary)."""
    try:
        from mlagate.kernels import mla_decode

        art = mla_decode.lowered(job.plan(), job.arch)
        meta = {}
        for gv, func in art.device_mod.functions.items():
            attrs = func.attrs or {}
            extent = attrs.get("thread_extent") or {}
            threads = 1
            for axis in ("threadIdx.x", "threadIdx.y", "threadIdx.z"):
                threads *= int(extent.get(axis, 1))
            meta[gv.name_hint] = {"dynamic_smem": int(attrs.get("dyn_shared_memory_buf", 0) or 0),
                                  "threads": threads}
        return {"source": art.kernel_source, "meta": meta}
    except Exception as e:  # noqa: BLE001 - reported per kernel
        lines = [line for line in str(e).strip().splitlines() if line.strip()]
        return {"error": f"lowering failed: {type(e).__name__}: {' | '.join(lines[-3:])[:600]}"}

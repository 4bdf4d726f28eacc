"""`mlagate build`: compile every kernel of the grid on a CPU and record its resources.

``cuda:<arch>``: tilelang lowers each kernel to CUDA C++ and nvcc compiles it to
a cubin with tilelang's own flags (tilelang/cuda/backend.py) plus ``-Xptxas -v``.
Per ``__global__`` function, ptxas gives registers, spill stores/loads, stack
frame, static shared memory and any "wgmma serialized" warning (C7511); the
lowered module gives the dynamic shared memory tilelang passes at launch and the
threads per block; ``cuobjdump -sass`` counts HGMMA (wgmma) instructions, or,
without cuobjdump, the PTX's ``wgmma.mma_async``.

``hip:<arch>``: where hipcc (ROCm >= 6, via $ROCM_PATH/bin or PATH) exists,
it compiles each kernel with tilelang's own command (tilelang/contrib/hipcc.py
compile_hip), which asks clang for ``-Rpass-analysis=kernel-resource-usage``
remarks: per kernel, VGPRs, AGPRs, SGPRs, scratch bytes per lane, spilled
registers, static LDS and occupancy in waves per SIMD. Without hipcc (or with
--codegen-only) it stays source level: LDS bytes (static ``__shared__`` arrays +
dynamic), launch bounds, and the report says VGPRs, SGPRs and spills are not
known. MFMA instructions are counted in the source either way (intrinsics and
tilelang's MFMA gemm wrappers).

Kernels: per (tile config, dtype, shape), the split path (the plan's own split,
or a forced split of FORCED_SPLIT where the plan does not split) with its
combine kernel, and the no-split path (num_split = 1). Identical plans are
lowered once and identical sources compiled once. The report is a dict (JSON);
``resources.evaluate_build`` decides on it.
"""

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path


from mlagate import hardware
from mlagate.decide import build_rules as resources

FORCED_SPLIT = 4
# Configs built per target kind by default. tilelang-hopper runs only on Hopper
# (impls.py: wgmma/TMA and 228 KB of shared memory); --config-name overrides.
DEFAULT_CONFIGS = {"cuda": ("hopper", "cdna3"), "hip": ("cdna3",)}
HIP_SOURCE_LEVEL = ("LDS bytes", "MFMA instructions", "launch bounds")
HIP_NOT_COMPILED = "blocks per CU from LDS and threads only (VGPRs, SGPRs and spills need hipcc from ROCm >= 6: {})"
TYPE_BYTES = {"float": 4, "half_t": 2, "half": 2, "bfloat16_t": 2, "__half": 2, "__nv_bfloat16": 2, "double": 8,
              "int": 4, "uint": 4, "int32_t": 4, "uint32_t": 4, "int64_t": 8, "uint64_t": 8, "uchar": 1,
              "char": 1, "int8_t": 1, "uint8_t": 1, "float2": 8, "float4": 16, "uint2": 8, "uint4": 16, "int4": 16}


class BuildError(ValueError):
    """A target or toolchain the build cannot use; the message says what to do."""


@dataclass(frozen=True)
class Job:
    """One program to lower: a tile config (its num_split possibly forced) on one shape."""

    target: str
    arch: str
    config: object  # mla_decode.TileConfig
    shape: object  # mla_decode.Shape
    forced: bool

    def plan(self):
        from mlagate.kernels import mla_decode

        return mla_decode.plan(self.shape, self.config, self.arch)


def parse_target(target: str) -> tuple:
    """'cuda:sm_90a' -> ('cuda', 'sm_90a'); the arch is what tilelang targets."""
    from mlagate.kernels import mla_decode

    kind, _, arch = target.partition(":")
    if kind not in ("cuda", "hip") or not arch:
        raise BuildError(f"--target {target!r}: expected cuda:<sm_XX> or hip:<gfxNNN>")
    t = mla_decode.target_for(arch)
    if t["kind"] != kind:
        raise BuildError(f"--target {target!r}: {arch} is a {t['kind']} architecture")
    return kind, t.get("arch") or t.get("mcpu")


def plan_jobs(target: str, configs, shapes) -> list:
    """The split and the no-split program of every (config, shape), each plan once."""
    _, arch = parse_target(target)
    jobs, seen = [], set()
    for config in configs:
        for shape in shapes:
            auto = Job(target, arch, config, shape, False)
            splits = auto.plan().num_split > 1
            split = auto if splits else Job(target, arch, config.with_(num_split=FORCED_SPLIT), shape, True)
            no_split = Job(target, arch, config.with_(num_split=1), shape, splits)
            for job in (split, no_split):
                p = job.plan()
                key = (p.shape, p.num_split, p.split_len, p.block_H, job.config.with_(num_split=0))
                if key not in seen:
                    seen.add(key)
                    jobs.append(job)
    return jobs


# -- lowering (in worker processes) ---------------------------------------------

def lower_job(job: Job) -> dict:
    """Lower a job, keeping the lowered module for what the source does not say:
    the dynamic shared memory and threads of each kernel. Errors are returned as
    text (TVM's exceptions do not always cross a process boundary)."""
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


# -- source analysis (both targets) -------------------------------------------

_KERNEL = re.compile(r'^extern "C" __global__ void (?:__launch_bounds__\(([^)]*)\)\s+)?(\w+)\(.*\{\s*$', re.M)
_STATIC_SHARED = re.compile(r"(?<!extern )__shared__\s+(?:__align__\(\d+\)\s+)?([\w:]+)\s+(\w+)((?:\[\d+\])+)\s*;")
_SOURCE_MATRIX = {
    "cuda": {"HGMMA": r"\btl::wgmma_\w+\(", "HMMA": r"\btl::(?:mma_sync\w*|gemm_(?:ss|rs|sr))\b"},
    "hip": {"MFMA": r"\b__builtin_amdgcn_mfma_\w+\(|\btl::gemm_(?:ss|rs|sr)\b"},
}


def split_kernels(source: str) -> dict:
    """{function name: (launch bounds text or None, body)} for each __global__ definition."""
    found = list(_KERNEL.finditer(source))
    return {m.group(2): (m.group(1), source[m.start():found[i + 1].start() if i + 1 < len(found) else len(source)])
            for i, m in enumerate(found)}


def analyze_source(source: str, kind: str) -> dict:
    """Per kernel: launch bounds, static shared memory (LDS) bytes, matrix-instruction counts."""
    out = {}
    for name, (bounds, body) in split_kernels(source).items():
        static = 0
        for type_, var, dims in _STATIC_SHARED.findall(body):
            if type_ not in TYPE_BYTES:
                raise BuildError(f"{name}: __shared__ {type_} {var}{dims}: unknown element size of {type_!r}")
            count = 1
            for d in re.findall(r"\d+", dims):
                count *= int(d)
            static += count * TYPE_BYTES[type_]
        matrix = {instr: len(re.findall(pattern, body)) for instr, pattern in _SOURCE_MATRIX[kind].items()}
        out[name] = {"launch_bounds": bounds, "static_smem": static, "matrix": matrix}
    return out


# -- CUDA: nvcc, ptxas -v, cuobjdump ------------------------------------------

_PTXAS = {
    "entry": re.compile(r"Compiling entry function '(\w+)'"),
    "props": re.compile(r"Function properties for (\w+)"),
    "frame": re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"),
    "used": re.compile(r"Used (\d+) registers"),
    "smem": re.compile(r"(\d+) bytes smem"),
    "serialized": re.compile(r"\(C7511\)[^:]*: (wgmma\.mma_async instructions are serialized [^']*)in the function "
                             r"'(\w+)'"),
}


def parse_ptxas(text: str) -> dict:
    """ptxas -v output -> {entry function: registers, spills, stack frame, static smem, wgmma_serialized}."""
    out, entry, props = {}, None, None
    for line in text.splitlines():
        if m := _PTXAS["serialized"].search(line):
            out.setdefault(m.group(2), {})["wgmma_serialized"] = m.group(1).strip()
        elif m := _PTXAS["entry"].search(line):
            entry = m.group(1)
            out.setdefault(entry, {})
        elif m := _PTXAS["props"].search(line):
            props = m.group(1)
        elif (m := _PTXAS["frame"].search(line)) and props in out:
            out[props].update(stack_frame=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        elif (m := _PTXAS["used"].search(line)) and entry:
            smem = _PTXAS["smem"].search(line)
            out[entry].update(registers=int(m.group(1)), static_smem=int(smem.group(1)) if smem else 0)
    for name, r in out.items():
        r.setdefault("wgmma_serialized", None)
        if "registers" not in r:
            raise BuildError(f"{name}: ptxas -v printed no 'Used N registers' line for it")
    return out


def count_sass(text: str) -> dict:
    """cuobjdump -sass output -> {function: {"HGMMA": n, "HMMA": n}}."""
    out, name = {}, None
    for line in text.splitlines():
        if m := re.search(r"Function : (\w+)", line):
            name = m.group(1)
            out[name] = {"HGMMA": 0, "HMMA": 0}
        elif name:
            for instr in ("HGMMA", "HMMA"):
                if re.search(rf"\b{instr}\.", line):
                    out[name][instr] += 1
    return out


def count_ptx(text: str) -> dict:
    """PTX -> {entry: {"HGMMA": wgmma.mma_async count, "HMMA": mma.sync count}} (fallback without cuobjdump)."""
    out = {}
    parts = re.split(r"^\.visible \.entry (\w+)\(", text, flags=re.M)
    for name, body in zip(parts[1::2], parts[2::2]):
        out[name] = {"HGMMA": len(re.findall(r"\bwgmma\.mma_async\b", body)),
                     "HMMA": len(re.findall(r"\bmma\.sync\b", body))}
    return out


def find_tool(name: str) -> str | None:
    """On PATH, beside CUDA_HOME's nvcc, or in a pip-installed nvidia-cuda-* wheel."""
    found = shutil.which(name)
    if found:
        return found
    dirs = [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin"]
    try:
        import nvidia

        dirs += sorted(p for base in nvidia.__path__ for p in Path(base).glob("*/bin"))
    except ImportError:
        pass
    for d in dirs:
        if os.access(d / name, os.X_OK):
            return str(d / name)
    return None


def cuda_toolchain() -> dict:
    nvcc = find_tool("nvcc")
    if nvcc is None:
        raise BuildError("cuda target: nvcc not found (PATH, $CUDA_HOME/bin); install the CUDA toolkit "
                         "or pass --codegen-only")
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    version = re.search(r"V(\d+\.\d+\.\d+)", out)
    cuobjdump, nvdisasm = find_tool("cuobjdump"), find_tool("nvdisasm")
    sass = bool(cuobjdump and nvdisasm)
    return {"nvcc": nvcc, "cuobjdump": cuobjdump if sass else None, "nvdisasm": nvdisasm if sass else None,
            "version": version.group(1) if version else out.strip()[-40:], "matrix_check": "sass" if sass else "ptx"}


def nvcc_command(tools: dict, arch: str, source_path, cubin_path) -> list:
    """tilelang's cubin flags (tilelang/cuda/backend.py + contrib/nvcc.py) plus ptxas -v."""
    from tilelang.env import CUTLASS_INCLUDE_DIR, TILELANG_TEMPLATE_PATH

    from mlagate.kernels import mla_decode

    import tilelang

    cmd = [tools["nvcc"], "--cubin", "-O3", "-lineinfo", f"-arch={arch}", "-std=c++20", "-w",
           f"-I{TILELANG_TEMPLATE_PATH}", f"-I{CUTLASS_INCLUDE_DIR}", "-Xptxas", "-v"]
    if mla_decode.PASS_CONFIGS.get(tilelang.PassConfigKey.TL_ENABLE_FAST_MATH):
        cmd.append("--use_fast_math")
    return cmd + ["-o", str(cubin_path), str(source_path)]


def compile_cuda(source: str, arch: str, tools: dict, timeout_s: int = 600) -> dict:
    """{function: ptxas numbers + "matrix" counts}, or {"error": text}."""
    with tempfile.TemporaryDirectory(prefix="mlagate-build-") as tmp:
        cu, cubin = Path(tmp) / "kernel.cu", Path(tmp) / "kernel.cubin"
        cu.write_text(source)
        cmd = nvcc_command(tools, arch, cu, cubin)
        if tools["matrix_check"] == "ptx":
            cmd[1:1] = ["--keep", f"--keep-dir={tmp}"]
        log, failed = _compile("nvcc", cmd, timeout_s)
        if failed:
            return failed
        try:
            found = parse_ptxas(log)
        except BuildError as e:
            return {"error": str(e)}
        if tools["matrix_check"] == "sass":
            env = dict(os.environ, PATH=f"{Path(tools['nvdisasm']).parent}{os.pathsep}{os.environ.get('PATH', '')}")
            sass = subprocess.run([tools["cuobjdump"], "-sass", str(cubin)], capture_output=True, text=True, env=env)
            if sass.returncode != 0:
                return {"error": f"cuobjdump -sass failed: {sass.stderr.strip()[:300]}"}
            counts = count_sass(sass.stdout)
        else:
            counts = count_ptx((Path(tmp) / "kernel.ptx").read_text())
    for name, r in found.items():
        r["matrix"] = counts.get(name, {})
    return found


def _compile(tool: str, cmd: list, timeout_s: int) -> tuple:
    """(compiler output, None), or (None, {"error": text}) when it failed or timed out."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None, {"error": f"{tool} timed out after {timeout_s} s"}
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        errors = [line for line in log.splitlines() if "error" in line.lower()] or log.splitlines()[-3:]
        return None, {"error": f"{tool} failed (exit {proc.returncode}): {' | '.join(errors[:3])[:600]}"}
    return log, None


# -- HIP: hipcc and clang's kernel-resource-usage remarks ------------------------

HIP_REMARK_FLAG = "-Rpass-analysis=kernel-resource-usage"
# clang: "<file>:<line>:<col>: remark: <label>: <value> [-Rpass-analysis=kernel-resource-usage]"; the labels
# and their order are AMDGPUAsmPrinter::emitResourceUsageRemarks' (llvm/lib/Target/AMDGPU/AMDGPUAsmPrinter.cpp).
_REMARK = re.compile(r"\bremark: (?:\S+:\d+:\d+: )?\s*(?P<label>[^:]+?): (?P<value>.*?)"
                     r"(?: \[-Rpass-analysis=kernel-resource-usage\])?\s*$")
_REMARK_FIELDS = {"TotalSGPRs": "sgprs", "SGPRs": "sgprs", "VGPRs": "vgprs", "AGPRs": "agprs",
                  "ScratchSize [bytes/lane]": "stack_frame", "Occupancy [waves/SIMD]": "waves_per_simd",
                  "SGPRs Spill": "sgpr_spills", "VGPRs Spill": "vgpr_spills", "LDS Size [bytes/block]": "static_smem"}


def parse_hip_remarks(text: str) -> dict:
    """kernel-resource-usage remarks -> {kernel: registers, VGPRs/AGPRs/SGPRs, spills, scratch, LDS, waves/SIMD}.

    ``registers`` is the unified VGPR file a wave takes (gfx90a and later: VGPRs aligned to 4 plus
    AGPRs, LLVM's getTotalNumVGPRs). ``VGPRs Spill`` counts the dwords that spill stores write
    (SIRegisterInfo adds each SI_SPILL_V*_SAVE's registers, also those that land in free AGPRs), so
    ``spill_stores`` = 4 B x that, per lane, as ptxas counts bytes per thread; reloads are not
    reported (``spill_loads`` None).
    ``stack_frame`` is the scratch size per lane. A value the compiler left as an expression is None."""
    found, name = {}, None
    for line in text.splitlines():
        if not (m := _REMARK.search(line)):
            continue
        label, value = m.group("label").strip(), m.group("value").strip()
        if label == "Function Name":
            name = value
            found[name] = {}
        elif name is not None and label in _REMARK_FIELDS:
            found[name][_REMARK_FIELDS[label]] = int(value) if value.isdigit() else None
    out = {}
    for name, r in found.items():
        vgprs, agprs, spills = r.get("vgprs"), r.get("agprs") or 0, r.get("vgpr_spills")
        if vgprs is None:
            raise BuildError(f"{name}: hipcc printed no numeric 'VGPRs' remark for it")
        out[name] = {**r, "agprs": agprs, "registers": -(-vgprs // 4) * 4 + agprs if agprs else vgprs,
                     "spill_stores": None if spills is None else 4 * spills, "spill_loads": None,
                     "static_smem": r.get("static_smem") or 0, "wgmma_serialized": None}
    return out


def find_hipcc() -> str | None:
    """$ROCM_PATH/bin/hipcc, else hipcc on PATH (the first two places tilelang's find_hipcc looks)."""
    rocm = os.environ.get("ROCM_PATH")
    if rocm and os.access(Path(rocm) / "bin" / "hipcc", os.X_OK):
        return str(Path(rocm) / "bin" / "hipcc")
    return shutil.which("hipcc")


def hip_toolchain() -> tuple:
    """(tools, None) for a usable hipcc, or (None, why the gfx942 report stays at source level)."""
    hipcc = find_hipcc()
    if hipcc is None:
        return None, "no hipcc found in $ROCM_PATH/bin or on PATH"
    try:
        proc = subprocess.run([hipcc, "--version"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{hipcc} --version failed: {e}"
    out = proc.stdout + proc.stderr
    version = re.search(r"HIP version: (\d+)\.(\S+)", out)
    if proc.returncode != 0 or (version and int(version.group(1)) < 6):
        return None, f"{hipcc} is not usable ({out.strip().splitlines()[0] if out.strip() else proc.returncode})"
    return {"hipcc": hipcc, "version": f"{version.group(1)}.{version.group(2)}" if version else out.strip()[:40],
            "matrix_check": "source"}, None


def hipcc_command(tools: dict, arch: str, source_path, out_path) -> list:
    """tilelang 0.1.15's command: compile_hip (tilelang/contrib/hipcc.py) with the options of
    tilelang/rocm/backend.py; it already asks clang for the resource remarks."""
    from tilelang.env import TILELANG_TEMPLATE_PATH

    return [tools["hipcc"], "-O3", "-c", "-gline-tables-only", f"--offload-arch={arch}", "--genco",
            "-std=c++17", f"-I{TILELANG_TEMPLATE_PATH}", HIP_REMARK_FLAG, "-o", str(out_path), str(source_path)]


def compile_hip(source: str, arch: str, tools: dict, timeout_s: int = 600) -> dict:
    """{kernel: parse_hip_remarks numbers}, or {"error": text}."""
    with tempfile.TemporaryDirectory(prefix="mlagate-build-") as tmp:
        cc = Path(tmp) / "kernel.cc"
        cc.write_text(source)
        log, failed = _compile("hipcc", hipcc_command(tools, arch, cc, Path(tmp) / "kernel.hsaco"), timeout_s)
    if failed:
        return failed
    try:
        return parse_hip_remarks(log)
    except BuildError as e:
        return {"error": str(e)}


# -- assembling the report ----------------------------------------------------

def _role(function: str, plan) -> str:
    if plan.num_split == 1:
        return "no-split"
    return "combine" if function.endswith("_1") else "split"


def kernel_rows(job: Job, lowered: dict, compiled: dict | None, smem_limit: int | None) -> list:
    """One row per __global__ function of a lowered (and maybe compiled) program."""
    kind = job.target.split(":")[0]
    p = job.plan()
    s = job.shape
    common = {"config": job.config.name, "dtype": s.dtype, "batch": s.batch, "seqlen": s.seqlen, "heads": s.heads,
              "num_split": p.num_split, "forced_split": job.forced}

    def key(role):
        return f"{job.config.name}/{s.dtype}/h{s.heads}/b{s.batch}/s{s.seqlen}/{role}"

    def failed(error):  # the whole program, under its main kernel's name
        role = "split" if p.num_split > 1 else "no-split"
        return [{"kernel": key(role), "role": role, **common, "error": error}]

    if "error" in lowered:
        return failed(lowered["error"])
    sha = hashlib.sha256(lowered["source"].encode()).hexdigest()[:12]
    try:
        analysis = analyze_source(lowered["source"], kind)
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
                row["error"] = f"{'ptxas' if kind == 'cuda' else 'hipcc'} reported nothing for {function}"
            else:
                row.update(compiled[function])
        row["smem"] = (row["static_smem"] or 0) + (row["dynamic_smem"] or 0)
        occ = resources.row_occupancy(row, job.arch, smem_limit)
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
        kind, arch = parse_target(t)
        if codegen_only:
            why_source[t] = "--codegen-only: not compiled"
        elif kind == "cuda":
            toolchains[t] = cuda_toolchain()
        else:  # without a usable hipcc (a CPU runner) the report stays at source level
            tools, why_source[t] = hip_toolchain()
            if tools:
                toolchains[t] = tools
    work = [job for t in targets for job in plan_jobs(t, configs[t], shapes)]
    rows = {t: [] for t in targets}
    compiles, pending = {}, []
    pool = (_Inline() if jobs <= 1 else
            ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")))
    with pool, ThreadPoolExecutor(max_workers=max(jobs, 1)) as nvcc_pool:
        futures = {pool.submit(lower_job, job): job for job in work}
        for fut in as_completed(futures):
            job = futures[fut]
            try:
                lowered = fut.result()
            except Exception as e:  # noqa: BLE001 - a crashed worker fails its kernels, not the report
                lowered = {"error": f"lowering crashed: {type(e).__name__}: {e}"}
            limit = smem_limits.get(hardware.arch_key(job.arch))
            if job.target in toolchains and "error" not in lowered:
                key = (job.arch, lowered["source"])
                if key not in compiles:  # identical sources compile once
                    compile_fn = compile_cuda if job.target.startswith("cuda") else compile_hip
                    compiles[key] = nvcc_pool.submit(compile_fn, lowered["source"], job.arch, toolchains[job.target])
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
            "shapes": sorted({(s.batch, s.seqlen, s.heads) for s in shapes}),
            "dtypes": sorted({s.dtype for s in shapes}),
            "kernels": sorted(rows[t], key=lambda r: r["kernel"]),
            "sources": len({r.get("source") for r in rows[t] if r.get("source")}),
            "wall_s": wall,
        }
    return reports

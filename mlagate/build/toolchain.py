"""The compilers `mlagate build` drives: finding nvcc (with cuobjdump, nvdisasm) or hipcc,
their command lines (tilelang's own flags) and one runner for both.

``cuda:<arch>``: nvcc compiles each kernel to a cubin with tilelang's flags
(tilelang/cuda/backend.py) plus ``-Xptxas -v``; ``cuobjdump -sass`` counts HGMMA
(wgmma) instructions or, without cuobjdump, the PTX's ``wgmma.mma_async``.

``hip:<arch>``: where hipcc (ROCm >= 6, via $ROCM_PATH/bin or PATH) exists, it compiles
each kernel with tilelang's own command (tilelang/contrib/hipcc.py compile_hip), which
asks clang for the kernel-resource-usage remarks.
"""

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from mlagate.build import analyse
from mlagate.build.plan import BuildError


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


def find_hipcc() -> str | None:
    """$ROCM_PATH/bin/hipcc, else hipcc on PATH (the first two places tilelang's find_hipcc looks)."""
    rocm = os.environ.get("ROCM_PATH")
    if rocm and os.access(Path(rocm) / "bin" / "hipcc", os.X_OK):
        return str(Path(rocm) / "bin" / "hipcc")
    return shutil.which("hipcc")


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


def toolchain(kind: str) -> tuple:
    """(tools, None), or (None, why the report stays at source level): without a usable hipcc
    (a CPU runner) a hip report does; a cuda target without nvcc is a BuildError."""
    return (cuda_toolchain(), None) if kind == "cuda" else hip_toolchain()


def nvcc_command(tools: dict, arch: str, source_path, cubin_path) -> list:
    """tilelang's cubin flags (tilelang/cuda/backend.py + contrib/nvcc.py) plus ptxas -v."""
    import tilelang
    from tilelang.env import CUTLASS_INCLUDE_DIR, TILELANG_TEMPLATE_PATH

    from mlagate.kernels import mla_decode

    cmd = [tools["nvcc"], "--cubin", "-O3", "-lineinfo", f"-arch={arch}", "-std=c++20", "-w",
           f"-I{TILELANG_TEMPLATE_PATH}", f"-I{CUTLASS_INCLUDE_DIR}", "-Xptxas", "-v"]
    if mla_decode.PASS_CONFIGS.get(tilelang.PassConfigKey.TL_ENABLE_FAST_MATH):
        cmd.append("--use_fast_math")
    return cmd + ["-o", str(cubin_path), str(source_path)]


def hipcc_command(tools: dict, arch: str, source_path, out_path) -> list:
    """tilelang 0.1.15's command: compile_hip (tilelang/contrib/hipcc.py) with the options of
    tilelang/rocm/backend.py; it already asks clang for the resource remarks."""
    from tilelang.env import TILELANG_TEMPLATE_PATH

    return [tools["hipcc"], "-O3", "-c", "-gline-tables-only", f"--offload-arch={arch}", "--genco",
            "-std=c++17", f"-I{TILELANG_TEMPLATE_PATH}", analyse.HIP_REMARK_FLAG, "-o", str(out_path),
            str(source_path)]


def run_compiler(tool: str, cmd: list, timeout_s: int) -> tuple:
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


def compile_cuda(source: str, arch: str, tools: dict, timeout_s: int = 600) -> dict:
    """{function: ptxas numbers + "matrix" counts}, or {"error": text}."""
    with tempfile.TemporaryDirectory(prefix="mlagate-build-") as tmp:
        cu, cubin = Path(tmp) / "kernel.cu", Path(tmp) / "kernel.cubin"
        cu.write_text(source)
        cmd = nvcc_command(tools, arch, cu, cubin)
        if tools["matrix_check"] == "ptx":
            cmd[1:1] = ["--keep", f"--keep-dir={tmp}"]
        log, failed = run_compiler("nvcc", cmd, timeout_s)
        if failed:
            return failed
        try:
            found = analyse.parse_ptxas(log)
        except BuildError as e:
            return {"error": str(e)}
        if tools["matrix_check"] == "sass":
            env = dict(os.environ, PATH=f"{Path(tools['nvdisasm']).parent}{os.pathsep}{os.environ.get('PATH', '')}")
            sass = subprocess.run([tools["cuobjdump"], "-sass", str(cubin)], capture_output=True, text=True, env=env)
            if sass.returncode != 0:
                return {"error": f"cuobjdump -sass failed: {sass.stderr.strip()[:300]}"}
            counts = analyse.count_sass(sass.stdout)
        else:
            counts = analyse.count_ptx((Path(tmp) / "kernel.ptx").read_text())
    for name, r in found.items():
        r["matrix"] = counts.get(name, {})
    return found


def compile_hip(source: str, arch: str, tools: dict, timeout_s: int = 600) -> dict:
    """{kernel: parse_hip_remarks numbers}, or {"error": text}."""
    with tempfile.TemporaryDirectory(prefix="mlagate-build-") as tmp:
        cc = Path(tmp) / "kernel.cc"
        cc.write_text(source)
        log, failed = run_compiler("hipcc", hipcc_command(tools, arch, cc, Path(tmp) / "kernel.hsaco"), timeout_s)
    if failed:
        return failed
    try:
        return analyse.parse_hip_remarks(log)
    except BuildError as e:
        return {"error": str(e)}


COMPILE = {"cuda": compile_cuda, "hip": compile_hip}

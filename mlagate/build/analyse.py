"""Reading what the tools print: the lowered source (both targets), ptxas -v, SASS or PTX
matrix-instruction counts (CUDA), and clang's kernel-resource-usage remarks (HIP)."""

import re

from mlagate import hardware
from mlagate.build.plan import BuildError

TYPE_BYTES = {"float": 4, "half_t": 2, "half": 2, "bfloat16_t": 2, "__half": 2, "__nv_bfloat16": 2, "double": 8,
              "int": 4, "uint": 4, "int32_t": 4, "uint32_t": 4, "int64_t": 8, "uint64_t": 8, "uchar": 1,
              "char": 1, "int8_t": 1, "uint8_t": 1, "float2": 8, "float4": 16, "uint2": 8, "uint4": 16, "int4": 16}

# -- the lowered source (both targets) -------------------------------------------

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


# -- CUDA: ptxas -v, cuobjdump -sass, PTX ------------------------------------------

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


def count_sass(text: str, instructions=("HGMMA", "HMMA")) -> dict:
    """cuobjdump -sass output -> {function: {instruction: n}}; an instruction is named with as many of its
    modifiers as matter ("HGMMA", "WARPSYNC.ALL")."""
    found = {instr: re.compile(rf"\b{re.escape(instr)}[.\s;]") for instr in instructions}
    out, name = {}, None
    for line in text.splitlines():
        if m := re.search(r"Function : (\w+)", line):
            name = m.group(1)
            out[name] = dict.fromkeys(instructions, 0)
        elif name:
            for instr, pattern in found.items():
                if pattern.search(line):
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


# -- HIP: clang's kernel-resource-usage remarks ----------------------------------------

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

    ``registers`` is the unified VGPR file a wave takes (gfx90a and later: VGPRs aligned to
    hardware.UNIFIED_VGPR_ALIGNMENT plus AGPRs, LLVM's getTotalNumVGPRs). ``VGPRs Spill`` counts the
    dwords that spill stores write (SIRegisterInfo adds each SI_SPILL_V*_SAVE's registers, also those
    that land in free AGPRs), so ``spill_stores`` = 4 B x that, per lane, as ptxas counts bytes per
    thread; reloads are not reported (``spill_loads`` None).
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
    align = hardware.UNIFIED_VGPR_ALIGNMENT
    out = {}
    for name, r in found.items():
        vgprs, agprs, spills = r.get("vgprs"), r.get("agprs") or 0, r.get("vgpr_spills")
        if vgprs is None:
            raise BuildError(f"{name}: hipcc printed no numeric 'VGPRs' remark for it")
        out[name] = {**r, "agprs": agprs, "registers": -(-vgprs // align) * align + agprs if agprs else vgprs,
                     "spill_stores": None if spills is None else 4 * spills, "spill_loads": None,
                     "static_smem": r.get("static_smem") or 0, "wgmma_serialized": None}
    return out

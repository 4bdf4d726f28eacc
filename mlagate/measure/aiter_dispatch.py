"""Which aiter code object runs an MLA decode case, and its resources, read on any machine.

aiter picks its stage-1 decode kernel in C++ (``mla_decode_stage1_asm_fwd`` in ``csrc/py_itfs_cu/asm_mla.cu``):
an if/else chain over the dtypes, the query heads per KV head, the query length and the persistent mode, ending
at ``static AiterAsmKernel name("<symbol>", "<.co path>")``.
:func:`decode_kernel` replays that chain from the installed aiter's own source file, so the answer
changes when aiter's does and a chain this reader cannot follow is an error, never a guess. The code
object's AMDGPU metadata (VGPRs, SGPRs, LDS, scratch, kernarg size, wavefront) comes from
``llvm-readelf --notes`` (Debian's llvm package): a CPU reads it as well as the GPU host.
"""

import functools
import importlib.metadata
import importlib.util
import itertools
import re
import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

import yaml

DISTRIBUTION = "amd-aiter"  # PyPI's name; the import name is aiter
SOURCE = "csrc/py_itfs_cu/asm_mla.cu"
FUNCTION = "mla_decode_stage1_asm_fwd"
# torch dtype name -> at::ScalarType name, as asm_mla.cu compares them
SCALAR_TYPES = {"bfloat16": "BFloat16", "float16": "Half", "float32": "Float",
                "float8_e4m3fnuz": "Float8_e4m3fnuz", "float8_e4m3fn": "Float8_e4m3fn"}
# what the record lists: each (query, cache) dtype pair of aiter's decode (a16w16, a16w8, a8w8), at MLA's heads
TABLE_FORMATS = (("bfloat16", "bfloat16"), ("bfloat16", "float8_e4m3fnuz"), ("float8_e4m3fnuz", "float8_e4m3fnuz"))
TABLE_HEADS = (8, 16, 32, 64, 128)
TABLE_Q_LENS = (1, 2, 4)  # query tokens per sequence (mla_decode_fwd's max_seqlen_q): perf.yml's q_len axis


def persistent_call(dtype: str, kv_dtype: str | None = None) -> bool:
    """Whether mlagate calls aiter's decode persistent (get_mla_metadata_v1's work lists): a16w8's only mode."""
    return not dtype.startswith("float8") and (kv_dtype or dtype).startswith("float8")


def kernel_row(dtype: str, heads: int, q_len: int = 1, kv_dtype: str | None = None) -> str:
    """A case's row of table(): "dtype/heads", "/kv=F" for a cache in another dtype F, "/s_q=N" past one query
    token (a record from before those axes has only the rows without them)."""
    kv = f"/kv={kv_dtype}" if kv_dtype and kv_dtype != dtype else ""
    return f"{dtype}/{heads}" + kv + (f"/s_q={q_len}" if q_len != 1 else "")


class ContractError(Exception):
    """aiter's source is not what this reader knows how to replay (a bump changed the dispatch)."""


class NoKernel(Exception):
    """aiter's dispatch has no code object for this case (its TORCH_CHECK would fail)."""


class Kernel(NamedTuple):
    symbol: str  # the kernel's mangled name, as aiter loads it from the code object
    code_object: str  # relative to aiter's hsa/<arch>/ folder, as in asm_mla.cu ("/mla/....co")


def meta_root() -> Path | None:
    """The folder with aiter's csrc/ and hsa/: the installed wheel's ``aiter_meta`` (found through its
    distribution, whatever ``aiter`` module comes first on the path), else a source checkout's top."""
    try:
        tops = [Path(importlib.metadata.distribution(DISTRIBUTION).locate_file(""))]
    except importlib.metadata.PackageNotFoundError:
        tops = []
    spec = importlib.util.find_spec("aiter")
    if spec is not None and spec.origin:
        tops.append(Path(spec.origin).resolve().parent.parent)
    for top in tops:
        for root in (top / "aiter_meta", top):
            if (root / SOURCE).is_file():
                return root
    return None


def version() -> str | None:
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


# -- replaying the C++ chain -------------------------------------------------------------

def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def _selection_block(source: str) -> str:
    """The kernel selection of FUNCTION: from its first ``if(Q.dtype()`` to the null check after the chain."""
    start = source.find(f"void {FUNCTION}(")
    if start < 0:
        raise ContractError(f"{SOURCE}: no function {FUNCTION}")
    body = source[start:]
    first = re.search(r"\bif\s*\(\s*Q\.dtype\(\)", body)
    end = body.find("impl_ptr != nullptr")
    if first is None or end < 0 or end < first.start():
        raise ContractError(f"{SOURCE}: {FUNCTION} no longer selects its kernel with if(Q.dtype() ...) "
                            "followed by a check of impl_ptr")
    return body[first.start():body.rfind("TORCH_CHECK", 0, end)]


_TOKEN = re.compile(r"\s*(?:(if|else)\b|(\{)|(\})|([^{};]*;))", re.S)


def _parenthesised(text: str, i: int) -> tuple:
    """(the text inside the parentheses that open at text[i], the index after them)."""
    depth = 0
    for j in range(i, len(text)):
        depth += {"(": 1, ")": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1:j], j + 1
    raise ContractError(f"{SOURCE}: unbalanced parentheses in {FUNCTION}")


def _parse(text: str, i: int = 0, *, until_brace: bool = False) -> tuple:
    """Statements as nested ("if", cond, then, else) and ("stmt", text) nodes; (nodes, next index)."""
    nodes = []
    while True:
        m = _TOKEN.match(text, i)
        if m is None:
            if text[i:].strip():
                raise ContractError(f"{SOURCE}: cannot read {text[i:i + 80]!r}")
            if until_brace:
                raise ContractError(f"{SOURCE}: a block of {FUNCTION} does not close")
            return nodes, len(text)
        keyword, opened, closed, statement = m.groups()
        if closed:
            if not until_brace:
                raise ContractError(f"{SOURCE}: unexpected '}}' in {FUNCTION}")
            return nodes, m.end()
        if opened:
            block, i = _parse(text, m.end(), until_brace=True)
            nodes += block
        elif keyword == "if":
            block, i = _parse_if(text, m.start())
            nodes += block
        elif keyword == "else":
            raise ContractError(f"{SOURCE}: 'else' without 'if' in {FUNCTION}")
        else:
            nodes.append(("stmt", statement.strip()))
            i = m.end()


def _one(text: str, i: int) -> tuple:
    """One statement or block after an if/else: (nodes, next index)."""
    m = re.compile(r"\s*\{").match(text, i)
    if m:
        return _parse(text, m.end(), until_brace=True)
    if re.compile(r"\s*if\b").match(text, i):
        return _parse_if(text, i)
    m = re.compile(r"\s*([^{};]*;)").match(text, i)
    if m is None:
        raise ContractError(f"{SOURCE}: cannot read {text[i:i + 80]!r}")
    return [("stmt", m.group(1).strip())], m.end()


def _parse_if(text: str, i: int) -> tuple:
    cond, j = _parenthesised(text, text.index("(", i))
    then, j = _one(text, j)
    otherwise = []
    m2 = re.compile(r"\s*else\b").match(text, j)
    if m2:
        otherwise, j = _one(text, m2.end())
    return [("if", cond, then, otherwise)], j


_CONDITION_WORDS = {"Q.dtype()": "q_dtype", "KV.dtype()": "kv_dtype"}


def _python_condition(cond: str) -> str:
    for cpp, name in _CONDITION_WORDS.items():
        cond = cond.replace(cpp, name)
    cond = re.sub(r"at::ScalarType::(\w+)", r"'\1'", cond)
    cond = cond.replace("&&", " and ").replace("||", " or ")
    return re.sub(r"!(?!=)", " not ", cond)


_KERNEL = re.compile(r'static\s+AiterAsmKernel\s+\w+\s*\(\s*"([^"]+)"\s*,\s*"([^"]+)"\s*\)\s*;')


def _run(nodes, facts: dict):
    for node in nodes:
        if node[0] == "if":
            _, cond, then, otherwise = node
            try:
                taken = eval(_python_condition(cond), {"__builtins__": {}}, dict(facts))  # noqa: S307
            except Exception as e:  # a variable or operator this reader does not model
                raise ContractError(f"{SOURCE}: cannot evaluate the condition ({cond}) of {FUNCTION}: {e}")
            found = _run(then if taken else otherwise, facts)
            if found:
                return found
            continue
        statement = node[1]
        kernel = _KERNEL.match(statement)
        if kernel:
            return Kernel(kernel[1], kernel[2].lstrip("/"))
        if re.match(r"TORCH_CHECK\s*\(\s*false", statement):
            raise NoKernel(re.sub(r"\s+", " ", statement))
    return None


def _statements(nodes):
    for node in nodes:
        if node[0] == "if":
            yield from _statements(node[2])
            yield from _statements(node[3])
        else:
            yield node[1]


@functools.lru_cache(maxsize=4)
def _chain(source_path: Path):
    nodes, _ = _parse(_selection_block(_strip_comments(source_path.read_text())))
    if not any(_KERNEL.match(statement) for statement in _statements(nodes)):
        raise ContractError(f"{SOURCE}: {FUNCTION} names no code object")
    return nodes


def decode_kernel(dtype: str, heads: int, *, kv_dtype: str | None = None, max_seqlen_q: int = 1,
                  persistent: bool = False, root: Path | None = None) -> Kernel:
    """The code object aiter's stage-1 decode runs for queries of ``dtype`` with ``heads`` heads over one KV
    head (MLA) and ``max_seqlen_q`` query tokens per sequence, as mlagate calls it (non-persistent); raises
    NoKernel where aiter has none."""
    root = root or meta_root()
    if root is None:
        raise ContractError("aiter is not installed: no asm_mla.cu to replay")
    facts = {"q_dtype": SCALAR_TYPES.get(dtype, dtype), "kv_dtype": SCALAR_TYPES.get(kv_dtype or dtype, kv_dtype),
             "gqa_ratio": heads, "max_seqlen_q": max_seqlen_q, "persistent": persistent,
             "true": True, "false": False}
    found = _run(_chain(root / SOURCE), facts)
    if found is None:
        raise NoKernel(f"{FUNCTION}: no code object for q {dtype}, kv {kv_dtype or dtype}, {heads} heads, "
                       f"max_seqlen_q {max_seqlen_q}{', persistent' if persistent else ''} ({SOURCE})")
    return found


def code_object_path(kernel: Kernel, arch: str, root: Path | None = None) -> Path:
    """Where aiter loads the code object from for ``arch`` (its AITER_ASM_DIR is hsa/<arch>/)."""
    return (root or meta_root()) / "hsa" / arch.split(":")[0] / kernel.code_object


# -- the code object's own metadata -------------------------------------------------------------

READELF = ("llvm-readelf", *(f"llvm-readelf-{v}" for v in range(19, 13, -1)))
RESOURCES = {"vgpr_count": ".vgpr_count", "sgpr_count": ".sgpr_count", "lds_bytes": ".group_segment_fixed_size",
             "scratch_bytes": ".private_segment_fixed_size", "kernarg_bytes": ".kernarg_segment_size",
             "wavefront_size": ".wavefront_size", "max_workgroup_size": ".max_flat_workgroup_size"}


def _readelf() -> str | None:
    return next((shutil.which(t) for t in READELF if shutil.which(t)), None)


def amdgpu_metadata(path: Path) -> dict:
    """The code object's AMDGPU metadata note (``amdhsa.kernels`` ...), as llvm-readelf prints it."""
    tool = _readelf()
    if tool is None:
        raise FileNotFoundError("llvm-readelf is not installed (Debian: apt-get install llvm)")
    out = subprocess.run([tool, "--notes", str(path)], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise ValueError(f"llvm-readelf --notes {path}: {out.stderr.strip()[-500:]}")
    m = re.search(r"AMDGPU Metadata:\s*\n\s*---\s*\n(.*?\n)\.\.\.", out.stdout, re.S)
    if m is None:
        raise ValueError(f"{path}: no AMDGPU metadata note")
    return yaml.safe_load(m.group(1))


def resources(kernel: Kernel, arch: str, root: Path | None = None) -> dict:
    """VGPRs, SGPRs, LDS, scratch ... of ``kernel`` in its code object for ``arch``."""
    path = code_object_path(kernel, arch, root)
    if not path.is_file():
        raise NoKernel(f"aiter ships no {kernel.code_object} for {arch} ({path})")
    entries = amdgpu_metadata(path).get("amdhsa.kernels") or []
    entry = next((k for k in entries if k.get(".symbol") == f"{kernel.symbol}.kd"), None)
    if entry is None:
        raise ContractError(f"{path}: no kernel {kernel.symbol} in its metadata")
    return {name: entry.get(key) for name, key in RESOURCES.items()}


def table(arch: str, root: Path | None = None) -> dict:
    """What the record keeps: per row (kernel_row) of TABLE_FORMATS x TABLE_HEADS x TABLE_Q_LENS, the code object
    aiter's decode runs on ``arch`` as mlagate calls it (persistent_call) and its resources, or why none."""
    rows = {}
    for dtype, kv_dtype in TABLE_FORMATS:
        for heads, q_len in itertools.product(TABLE_HEADS, TABLE_Q_LENS):
            key = kernel_row(dtype, heads, q_len, kv_dtype)
            try:
                kernel = decode_kernel(dtype, heads, kv_dtype=kv_dtype, max_seqlen_q=q_len,
                                       persistent=persistent_call(dtype, kv_dtype), root=root)
                rows[key] = {"kernel": kernel.symbol, "code_object": kernel.code_object}
                rows[key].update(resources(kernel, arch, root))
            except NoKernel as e:
                rows[key] = {"kernel": None, "none": str(e)}
            except (OSError, ValueError, subprocess.TimeoutExpired) as e:  # found, resources not readable
                rows[key]["resources"] = f"not read: {e}"
    return rows

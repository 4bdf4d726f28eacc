"""`mlagate build`'s report: one line per kernel for the terminal, a Markdown table per target."""

from mlagate.decide.build_rules import Severity

# How a severity shows: a finding's line and its kernel's status column.
_LABEL = {Severity.FAIL: "FAIL", Severity.WARN: "warn"}
FINDING_ICON = {Severity.FAIL: "❌", Severity.WARN: "⚠️"}  # also the gate's text and page


def _fmt(value, spec):
    return "—" if value is None else format(value, spec)


def _kernel_status(findings) -> dict:
    """kernel -> 'FAIL' | 'warn' (the worst of its findings)."""
    worst = {}
    for f in findings:
        if f.kernel and worst.get(f.kernel) != Severity.FAIL:
            worst[f.kernel] = f.status
    return {kernel: _LABEL[status] for kernel, status in worst.items()}


def _blocks(r) -> str:
    return "—" if r.get("blocks_per_sm") is None else f"{r['blocks_per_sm']} ({r['limited_by']})"


def _matrix(r) -> str:
    m = r.get("matrix") or {}
    shown = {k: v for k, v in m.items() if v or k == r.get("expected_matrix")}
    text = " ".join(f"{k} {v}" for k, v in shown.items()) or "—"
    return text + (" serialized" if r.get("wgmma_serialized") else "")


def _build_cells(r, cuda: bool) -> list:
    smem = f"{r.get('smem')} ({r.get('static_smem')} + {r.get('dynamic_smem')})"
    split = f"{r.get('num_split')}{' forced' if r.get('forced_split') else ''}"
    if not cuda:
        return [split, str(r.get("threads")), smem, _blocks(r), _matrix(r)]
    spill = "—" if r.get("spill_stores") is None else f"{r['spill_stores']} / {r['spill_loads']}"
    return [split, str(r.get("threads")), _fmt(r.get("registers"), "d"), spill, _fmt(r.get("stack_frame"), "d"),
            smem, _blocks(r), _matrix(r)]


def _build_header(rep) -> str:
    tc = rep["toolchain"]
    tools = (f"nvcc {tc['nvcc']}" if tc.get("nvcc") else f"hipcc {tc['hipcc']}" if tc.get("hipcc")
             else "no compiler: source level")
    check = {"sass": "cuobjdump -sass", "ptx": "PTX (cuobjdump not found)", "source": "lowered source"}
    check = check.get(tc["matrix_check"], tc["matrix_check"])
    return (f"{rep['target']}: {len(rep['kernels'])} kernels from {rep['sources']} sources, "
            f"tilelang {rep['tilelang']}, {tools}, matrix instructions from {check}, {rep['wall_s']} s")


def build_lines(rep, findings) -> list:
    """Terminal output of `mlagate build`: one line per kernel, then the findings."""
    status = _kernel_status(findings)
    cuda = rep["target"].startswith("cuda")
    names = (["splits", "thr", "regs", "spill st/ld B", "stack B", "smem B", "blocks/SM", "matrix"] if cuda else
             ["splits", "thr", "LDS B", "blocks/CU", "matrix"])
    lines = [_build_header(rep)]
    for r in rep["kernels"]:
        head = f"{status.get(r['kernel'], 'ok'):4} {rep['target']} {r['kernel']}"
        if r.get("error"):
            lines.append(f"{head}  error: {r['error']}")
        else:
            lines.append(head + "  " + "  ".join(f"{n} {c}" for n, c in zip(names, _build_cells(r, cuda))))
    lines += [f"{_LABEL[f.status]}: [{f.rule}] {f.message}" for f in findings]
    return lines


def build_markdown(rep, findings) -> str:
    """One target's build report as a Markdown table, with its findings."""
    status = _kernel_status(findings)
    cuda = rep["target"].startswith("cuda")
    cols = (["splits", "threads", "registers", "spill st / ld B", "stack B", "smem B (static + dyn)",
             "blocks/SM (limit)", "matrix instr."] if cuda else
            ["splits", "threads", "LDS B (static + dyn)", "blocks/CU (limit)", "matrix instr."])
    lines = [f"### Build report: `{rep['target']}`", "", _build_header(rep), ""]
    if rep.get("source_level_only"):
        lines += ["Source level only: " + "; ".join(rep["source_level_only"]) + ".", ""]
    lines += ["| kernel | " + " | ".join(cols) + " | status |", "|---|" + "---:|" * len(cols) + "---|"]
    for r in rep["kernels"]:
        cells = [f"error: {r['error']}"] + [""] * (len(cols) - 1) if r.get("error") else _build_cells(r, cuda)
        lines.append(f"| {r['kernel']} | " + " | ".join(cells) + f" | {status.get(r['kernel'], 'ok')} |")
    if findings:
        lines += ["", *[f"- {FINDING_ICON[f.status]} [{f.rule}] {f.message}" for f in findings]]
    return "\n".join(lines) + "\n"

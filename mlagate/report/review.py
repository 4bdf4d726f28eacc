"""What a reviewer reads first in gate.md: one summary line, the changed files the failing cases' kernels
depend on, and the command that reproduces each failing case on a GPU host."""

import ast
from collections.abc import Callable
from dataclasses import dataclass

from mlagate.case import TILELANG_PREFIX, family_impl
from mlagate.config import DEFAULT_PATH, ROOT
from mlagate.decide.vocabulary import Status

FAILING = (Status.REGRESSION, Status.ERROR, Status.UNSURE)  # what gate.md explains and says how to reproduce

KERNELS = ROOT / "kernels"  # the source tree of mlagate.kernels, as the repository lays it out
CONFIG = DEFAULT_PATH.relative_to(ROOT).as_posix()  # perf.yml: the grid, the timing and the rules of every case


@dataclass(frozen=True)
class Review:
    """Inputs gate.md's reviewer sections need beyond the verdict."""
    changed: list | None = None  # files the PR changed (git diff base..head); None: unknown (commits not here)
    arch: str | None = None  # the GPU architecture head was measured on
    machine: str = "MACHINE"
    grids: dict | None = None  # case key -> the grid that measures it ("quick" or "full")
    # a case's cache dtype -> the vendor implementation measured beside it for its ratio (Platform.vendor_impl)
    vendor_of: Callable | None = None
    # workload case key -> decide.schedule.Diagnosis, its plans' balance; None: head's arch is not known
    schedules: dict | None = None


def summary(verdict) -> str:
    """One line: how many gated cases regressed, by how much, the worst; accepted cases and errors counted."""
    gated = [c for c in verdict.cases if c.status not in (Status.REMOVED,)]
    bad = sorted((c for c in verdict.cases if c.status == Status.REGRESSION), key=lambda c: -(c.change or 0))
    parts = []
    if bad:
        changes = [c.change for c in bad if c.change is not None]
        span = (f" ({min(changes):+.1%} to {max(changes):+.1%})" if len(changes) > 1 else
                f" ({changes[0]:+.1%})" if changes else "")
        worst = bad[0]
        parts.append(f"{len(bad)} of {len(gated)} gated cases regressed{span}; worst `{worst.label}`"
                     + (f" {worst.change:+.1%}" if worst.change is not None else ""))
    else:
        parts.append(f"no regression in {len(gated)} gated cases")
    for status, word in ((Status.UNSURE, "unsure (the re-measure could not decide)"), (Status.ACCEPTED, "accepted"),
                         (Status.ERROR, "errors")):
        n = sum(c.status == status for c in verdict.cases)
        if n:
            parts.append(f"{n} {word}")
    if verdict.errors:
        parts.append(f"{len(verdict.errors)} gate errors")
    return "**" + "; ".join(parts) + ".**"


def _imports(module: str) -> set:
    """mlagate.kernels modules ``module`` imports (its own source), by name."""
    path = KERNELS / f"{module}.py"
    if not path.is_file():
        return set()
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "mlagate.kernels":
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mlagate.kernels."):
            found.add(node.module.rsplit(".", 1)[1])
    return found


def module_files(*modules) -> set:
    """kernels/<m>.py for ``modules`` and every kernels module they import, transitively."""
    seen, todo = set(), list(modules)
    while todo:
        m = todo.pop()
        if m not in seen and (KERNELS / f"{m}.py").is_file():
            seen.add(m)
            todo += _imports(m)
    return {f"kernels/{m}.py" for m in seen}


def case_files(key: tuple, arch: str | None) -> set:
    """The repository files a case's measured kernel is built or configured from: its kernel modules (and
    what they import), the tuned table of its architecture, perf.yml."""
    impl, workload = family_impl(key[0]), key[-1]
    files = {CONFIG}
    if impl == "triton":
        files |= module_files("triton_mla")
    if not impl.startswith(TILELANG_PREFIX):
        return files
    from mlagate.kernels import mla_decode, tuned

    paged = workload != "dense"
    family = impl.removeprefix(TILELANG_PREFIX)
    schedule = mla_decode.CONFIGS[family].schedule if family in mla_decode.CONFIGS else None
    files |= module_files("mla_decode_paged" if paged else "mla_decode", "tuned")
    if schedule in mla_decode.SCHEDULE_MODULES:  # over pages too (mla_decode.paged_config)
        files |= module_files(mla_decode.SCHEDULE_MODULES[schedule])
    tables = [tuned.table_path(arch)] if arch else sorted(tuned.TABLE_DIR.glob("*.yaml"))
    files |= {f"kernels/tuned/{t.name}" for t in tables}
    return files


def changed_dependencies(changed, cases, arch) -> dict:
    """{changed file: labels of ``cases`` that depend on it}, for the files of ``changed`` they depend on."""
    found = {}
    for cv in cases:
        for path in sorted(set(changed) & case_files(cv.case, arch)):
            found.setdefault(path, []).append(cv.label)
    return found


def _vendor(review: Review, key) -> str | None:
    """The vendor a case's ratio divides by: its cache's (key[6]; FlashInfer for an fp8 cache on Hopper)."""
    return review.vendor_of(key[6] if len(key) > 6 else None) if review.vendor_of else None


def reproduce(verdict, review: Review) -> list:
    """[(command, labels)]: the `mlagate bench` line that measures each failing case at head, then the gate
    line that records what is missing and re-measures the flagged cases interleaved."""
    lines = {}
    for cv in (c for c in verdict.cases if c.status in FAILING):
        impl, _, _, dtype, *_ = cv.case
        grid = (review.grids or {}).get(cv.case, "full")
        vendor = _vendor(review, cv.case)
        impls = [impl] + ([vendor] if vendor and impl != vendor else [])
        command = (f"git checkout {verdict.head[:12]} && mlagate bench --grid {grid} "
                   + " ".join(f"--impl {i}" for i in impls) + f" --dtype {dtype}")
        lines.setdefault(command, []).append(cv.label)
    out = list(lines.items())
    if out:
        out.append((f"mlagate gate --base {verdict.base} --head {verdict.head} --machine {review.machine} "
                    "--confirm --record-missing", ["all of them, interleaved base/head (what decides)"]))
    return out


def sections(verdict, review: Review | None) -> list:
    """gate.md's lines after the summary: changed files and reproduce commands (nothing when all pass)."""
    failing = [c for c in verdict.cases if c.status in FAILING]
    if review is None or not failing:
        return []
    lines = ["", "### Changed files the failing cases depend on", ""]
    if review.changed is None:
        lines.append("- unknown: base or head is not in this clone")
    else:
        deps = changed_dependencies(review.changed, failing, review.arch)
        lines += [f"- `{path}`: {len(labels)} of the {len(failing)} failing cases" for path, labels in deps.items()]
        others = len(set(review.changed) - set(deps))
        if not deps:
            lines.append(f"- none of the {len(review.changed)} changed files is a kernel, tuned table or perf.yml "
                         "these cases are built from (runner noise, or a dependency outside the repository?)")
        elif others:
            lines.append(f"- and {others} other changed files none of them reads")
    lines += ["", "### Reproduce on a GPU host", ""]
    for command, labels in reproduce(verdict, review):
        lines += [f"- {', '.join(labels)}:", "  ```", f"  {command}", "  ```"]
    return lines


def fields(verdict, review: Review | None) -> dict:
    """The reviewer sections as verdict.json fields, which the PR comment's template fills from."""
    bad = [c for c in verdict.cases if c.status == Status.REGRESSION and c.change is not None]
    worst = max(bad, key=lambda c: c.change, default=None)
    failing = [c for c in verdict.cases if c.status in FAILING]
    out = {"summary": {"gated": sum(c.status != Status.REMOVED for c in verdict.cases),
                       "regressed": sum(c.status == Status.REGRESSION for c in verdict.cases),
                       "accepted": sum(c.status == Status.ACCEPTED for c in verdict.cases),
                       "unsure": sum(c.status == Status.UNSURE for c in verdict.cases),
                       "min_change": min((c.change for c in bad), default=None),
                       "max_change": worst.change if worst else None, "worst": worst.case if worst else None}}
    if review is None:
        return out
    deps = changed_dependencies(review.changed or [], failing, review.arch)
    out["machine"] = review.machine
    out["changed_dependencies"] = None if review.changed is None else [
        {"path": path, "cases": len(labels)} for path, labels in deps.items()]
    out["reproduce"] = [{"grid": (review.grids or {}).get(c.case, "full"), "impl": c.case[0], "dtype": c.case[3],
                         "vendor": _vendor(review, c.case)} for c in failing]
    return out

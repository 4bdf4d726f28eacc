"""The ladder's arithmetic (`mlagate ladder`, which qualifies a runner). Pure: no I/O, no GPU.

Which delay to inject for a step of x% of a case's own time: the delay is a spin of ``c`` GPU clock cycles
at the start of every block of the TileLang decode kernel, inside the kernel itself (no extra launch), and
what it adds was measured on the GPU at a probe's cycle count, so ``added(c) = slope * c``. The patch that
injects it, and the table's numbers: recorded and confirmed change against the injected one, in percentage
points.
"""

import math

from mlagate.case import case_label
from mlagate.decide.clock_compare import rms_pp
from mlagate.json_reader import LATENCY_CEILING_S, LATENCY_FLOOR_S, out_of_bounds

DEFAULT_STEPS = (0.0, 1.0, 2.0, 3.0, 5.0, 8.0)  # percent of each case's own time
MAX_STEP = 50.0
TOLERANCE_PP = 0.5  # where a qualified runner's measured change must land around the injected one
PATCH_MARK = "# mlagate ladder"
# Per schedule: the kernel file whose attend_macro builds its kernels, and the arguments of the attend macro that
# returns (the pipelined kernel's since bd0bbdf, the seesaw's since 866f22e); the step's block wraps it with a
# macro of the same arguments.
DENSE_FILE = "kernels/mla_decode.py"
SEESAW_FILE = "kernels/mla_decode_seesaw.py"
# The pipelined macro took the fp8 cache's Kv_scale later: a base before that has the earlier arguments.
ATTEND_ARGS = ("Q, Q_pe, KV, K_pe, Kv_scale, Block_table, bx, by, seqlen, first_token, n_blocks, acc_o, logsum, "
               "scores_max",
               "Q, Q_pe, KV, K_pe, Block_table, bx, by, seqlen, first_token, n_blocks, acc_o, logsum, scores_max")
SEESAW_ATTEND_ARGS = ("Q, Q_pe, KV, K_pe, bx, by, bz, first_token, n_pairs, out, lse_out",)
SCHEDULES = {"pipelined": (DENSE_FILE, ATTEND_ARGS), "seesaw": (SEESAW_FILE, SEESAW_ATTEND_ARGS)}
PATCHED_FILES = dict(SCHEDULES.values())  # {file: the attend arguments a commit's file may have}


def parse_steps(text: str) -> tuple:
    """--steps "0,1,2.5" -> (0.0, 1.0, 2.5): distinct, in the order given; a ValueError names --steps."""
    steps = []
    for item in (text or "").split(","):
        item = item.strip()
        try:
            value = float(item.removesuffix("%"))
        except ValueError:
            raise ValueError(f"--steps: {item!r} is not a percentage (give e.g. --steps 0,1,2,3,5,8)") from None
        if not math.isfinite(value) or not 0 <= value <= MAX_STEP:
            raise ValueError(f"--steps: {item!r} is out of range; a step is a slowdown of 0 to {MAX_STEP:g} %")
        if value in steps:
            raise ValueError(f"--steps: {item!r} is given twice")
        steps.append(value)
    return tuple(steps)


def step_name(step: float) -> str:
    """5.0 -> "5", 2.5 -> "2.5": in file names, refs and JSON keys."""
    return f"{step:g}"


def shape_key(case_key: tuple) -> tuple:
    """A dense case (impl, batch, seqlen, dtype, heads, q_len, kv_dtype, workload) as the patch looks it up for a
    kernel: (config name, batch, seqlen, heads, dtype, s_q) of the dense Shape and TileConfig attend_macro is built
    for (the ladder spins 16-bit caches only: run.py leaves fp8 cases out)."""
    impl, batch, seqlen, dtype, heads, q_len, _, _ = case_key
    return (impl.split("-", 1)[1], batch, seqlen, heads, dtype, q_len)


# -- calibration -----------------------------------------------------------------------------

def probe_cycles(median_s: float, clock_hz: float = 1.5e9, share: float = 0.08) -> int:
    """The second calibration point: about ``share`` of the case's time at a guessed clock."""
    return max(1000, round(share * median_s * clock_hz))


def fit(base_s: float, probe_s: float, probe: int) -> float:
    """Seconds per spun cycle, from the medians of the kernel as it is and with a spin of ``probe`` cycles."""
    slope = (probe_s - base_s) / probe
    if not slope > 0:
        raise ValueError(f"calibration: a spin of {probe} cycles added no time ({base_s * 1e6:.2f} -> "
                         f"{probe_s * 1e6:.2f} µs); the GPU's timing is not usable for the ladder")
    return slope


def cycles_for(step: float, median_s: float, slope: float) -> int:
    """The cycles of spin that add ``step`` % of ``median_s``."""
    return round(step / 100 * median_s / slope)


# -- the throw-away commit's kernel file -------------------------------------------------------

def unpatchable(source: str, path: str = DENSE_FILE) -> str | None:
    """Why ``patched`` cannot wrap this kernel file (None: it can)."""
    if "\ndef attend_macro(" not in source:
        return "defines no attend_macro"
    if attend_args(source, path) is None:
        return "has an attend macro whose arguments are not " + " or ".join(f"({a})" for a in PATCHED_FILES[path])
    return None


def attend_args(source: str, path: str) -> str | None:
    """The arguments of the file's attend macro, of those PATCHED_FILES knows (None: none of them)."""
    return next((args for args in PATCHED_FILES[path] if f"def attend({args}):" in source), None)


def patched(source: str, step, cycles: dict, run_id: str, path: str = DENSE_FILE) -> str:
    """A kernel file of PATCHED_FILES with a step appended. Step 0: one comment line. Otherwise a block that
    wraps attend_macro so that every block of a listed dense shape's kernel first spins ``cycles[shape_key]``
    GPU clock cycles (``cycles``: {shape_key: cycles}, keyed by config: each file spins its own configs'
    kernels); any other shape, and the paged kernel, lower unchanged.
    ``step``: the step's percentage, or a name (the calibration's probe)."""
    args = attend_args(source, path)
    text = source if source.endswith("\n") else source + "\n"
    name = step_name(step) + "%" if isinstance(step, (int, float)) else step
    if step == 0:
        return text + f"{PATCH_MARK} {run_id}: step 0% (no delay)\n"
    rows = "".join(f"    {key!r}: {int(c)},\n" for key, c in sorted(cycles.items()))
    return text + f'''

{PATCH_MARK} {run_id}: step {name} -- a calibrated spin at the start of every decode block.
# Keys: (config, batch, seqlen, heads, dtype, s_q) of a dense shape; any other shape lowers unchanged.
_LADDER_CYCLES = {{
{rows}}}
_ladder_attend_macro = attend_macro


def ladder_cycles(shape, config):
    """The spin this step adds to a kernel of ``shape`` and ``config``, in GPU clock cycles (None: none)."""
    if not hasattr(shape, "seqlen"):  # the paged kernel's PagedShape: never spun
        return None
    return _LADDER_CYCLES.get((config.name, shape.batch, shape.seqlen, shape.heads, shape.dtype,
                               getattr(shape, "s_q", 1)))


def attend_macro(shape, config, *args, **kwargs):
    attend = _ladder_attend_macro(shape, config, *args, **kwargs)
    cycles = ladder_cycles(shape, config)
    if not cycles:
        return attend

    @T.macro
    def spun({args}):
        started = T.alloc_local([1], "int64")
        started[0] = T.call_extern("int64", "clock64")
        while T.call_extern("int64", "clock64") - started[0] < cycles:
            T.evaluate(0)
        attend({args})

    return spun
'''


# -- the table -----------------------------------------------------------------------------

def step_result(verdict, cases, calibrated: dict, rep: int, step: float, commit: str, clocks=None) -> dict:
    """What the table keeps of one gate run (a Verdict), per case: injected (``calibrated``: calibration's
    per-case steps, by label), recorded and re-measured change, the re-measure's rounds and decision, the
    detectable change, status. A case the verdict lacks is "missing". ``clocks``: {case key: {variant: change}}
    (decide/clock_compare.case_changes) of the untouched cases, kept beside their recorded change."""
    name = step_name(step)
    by_key = {tuple(cv.case): cv for cv in verdict.cases}
    out = []
    for case in cases:
        cv = by_key.get(case.key)
        confirmation = (cv.confirmation or {}) if cv else {}
        out.append({"case": list(case.key), "label": case.label(), **calibrated[case.label()]["steps"][name],
                    "recorded": cv.change if cv else None, "confirmed": confirmation.get("change"),
                    "confirm_p": confirmation.get("p_value"), "rounds": confirmation.get("rounds"),
                    "decision": confirmation.get("decision"), "detectable": cv.detectable if cv else None,
                    "status": cv.status.value if cv else "missing",
                    "reasons": [n.kind.value for n in cv.reasons] if cv else ["not in the gate's verdict"]})
    spun = {case.key for case in cases}
    others = [{"case": list(cv.case), "label": case_label(tuple(cv.case)), "recorded": cv.change,
               "confirmed": (cv.confirmation or {}).get("change"), "status": cv.status.value,
               "clock": (clocks or {}).get(tuple(cv.case))}
              for cv in verdict.cases if tuple(cv.case) not in spun]
    return {"rep": rep, "step": step, "commit": commit, "outcome": verdict.outcome.value,
            "exit_code": verdict.exit_code, "errors": [str(e) for e in verdict.errors], "cases": out,
            "untouched": others}


# -- the rows -----------------------------------------------------------------------------

def error_pp(measured, injected):
    """|measured - injected| in percentage points, or None where nothing was measured."""
    return None if measured is None or injected is None else abs(measured - injected) * 100


def rows(step_results: list) -> list:
    """One row per (rep, step, case) from the step results, in the order given."""
    out = []
    for s in step_results:
        for c in s["cases"]:
            out.append({"rep": s["rep"], "step": s["step"], "label": c["label"], "case": c["case"],
                        "injected": c["injected"],
                        "recorded": c["recorded"], "confirmed": c["confirmed"], "status": c["status"],
                        "rounds": c.get("rounds"), "detectable": c.get("detectable"),
                        "recorded_pp": error_pp(c["recorded"], c["injected"]),
                        "confirmed_pp": error_pp(c["confirmed"], c["injected"])})
    return out


def _max(values):
    values = [v for v in values if v is not None]
    return max(values) if values else None


def summary(table: list, steps) -> list:
    """Per step over every rep and case: verdict counts, the injected range, the largest errors
    (pp) and how many measured changes lie within TOLERANCE_PP of the injected one."""
    out = []
    for step in steps:
        mine = [r for r in table if r["step"] == step]
        errors = [e for r in mine for e in (r["recorded_pp"], r["confirmed_pp"]) if e is not None]
        injected = [r["injected"] for r in mine if r["injected"] is not None]
        out.append({"step": step, "n": len(mine), "pass": sum(r["status"] == "pass" for r in mine),
                    "fail": sum(r["status"] == "regression" for r in mine),
                    "unsure": sum(r["status"] == "unsure" for r in mine),
                    "other": sum(r["status"] not in ("pass", "regression", "unsure") for r in mine),
                    "injected_min": min(injected, default=None), "injected_max": max(injected, default=None),
                    "max_recorded_pp": _max(r["recorded_pp"] for r in mine),
                    "max_confirmed_pp": _max(r["confirmed_pp"] for r in mine),
                    "measured": len(errors), "within": sum(e <= TOLERANCE_PP for e in errors)})
    return out


def untouched(step_results: list) -> list:
    """Per gated case that no step spins (another workload's kernel), over every rep and step: the changes
    the gate recorded and re-measured for a kernel that did not change, in percentage points. The runner's
    noise floor, beside which the injected steps' errors are read."""
    groups = {}
    for s in step_results:
        for c in s.get("untouched", []):  # step results written before 3230a63 kept none
            if c["recorded"] is not None:
                groups.setdefault(c["label"], []).append(c)
    out = []
    for label, runs in groups.items():  # nothing injected: each change's error is its size
        recorded = [error_pp(c["recorded"], 0.0) for c in runs]
        confirmed = [e for c in runs if (e := error_pp(c.get("confirmed"), 0.0)) is not None]
        clocked = [c["clock"] for c in runs if c.get("clock")]  # step results before the clocks were kept: none
        out.append({"label": label, "n": len(runs), "max_pp": max(recorded),
                    "rms_pp": math.sqrt(sum(e * e for e in recorded) / len(recorded)),
                    **{f"rms_{v}_pp": rms_pp(c[v] for c in clocked) for v in ("normalized", "binned")},
                    "confirmed": len(confirmed), "max_confirmed_pp": _max(confirmed),
                    "measured": len(recorded) + len(confirmed),
                    "within": sum(e <= TOLERANCE_PP for e in recorded + confirmed),
                    "fail": sum(c["status"] == "regression" for c in runs)})
    return out


def fail_shares(table: list) -> list:
    """[(case label, injected, share of repetitions that failed, repetitions)] per case and step:
    the real ladder as points on the simulated detection curve."""
    groups = {}
    for r in table:
        if r["injected"] is not None and r["status"] in ("pass", "regression"):
            groups.setdefault((r["label"], r["step"]), []).append(r)
    return [(label, sum(r["injected"] for r in rows) / len(rows),
             sum(r["status"] == "regression" for r in rows) / len(rows), len(rows))
            for (label, _), rows in sorted(groups.items())]


# -- resuming -----------------------------------------------------------------------------

IDENTITY = ("version", "base", "machine", "grid", "impls", "cases", "steps")


def mismatch(saved: dict, wanted: dict) -> list:
    """The identity fields in which a saved calibration differs from this run's (reps may grow)."""
    return [k for k in IDENTITY if _norm(saved.get(k)) != _norm(wanted.get(k))]


def _norm(value):
    """JSON turns tuples into lists: compare them alike."""
    if isinstance(value, (list, tuple)):
        return [_norm(v) for v in value]
    return value


def calibration_problem(doc) -> str | None:
    """What is wrong with a calibration.json read back (the key, and what it holds), else None: a resume
    makes its step commits and its table from it, so each key it reads is checked by type and range."""
    if not isinstance(doc, dict):
        return f"a JSON {type(doc).__name__}, not an object"
    if not isinstance(doc.get("run_id"), str) or not doc["run_id"]:
        return f"run_id: must be a name, got {doc.get('run_id')!r:.40}"
    cases = doc.get("cases_calibrated")
    if not isinstance(cases, dict) or not cases:
        return f"cases_calibrated: must be a mapping of case labels, got {cases!r:.40}"
    for label, case in cases.items():
        where = f"cases_calibrated.{label}"
        if not isinstance(case, dict) or not isinstance(case.get("steps"), dict):
            return f"{where}.steps: must be a mapping of steps"
        if out_of_bounds(case.get("median_s"), LATENCY_FLOOR_S, LATENCY_CEILING_S):
            return f"{where}.median_s: must be a latency in [{LATENCY_FLOOR_S:g}, {LATENCY_CEILING_S:g}] s"
        for name, step in case["steps"].items():
            cycles = step.get("cycles") if isinstance(step, dict) else "no step"
            if cycles is not None and (type(cycles) is not int or cycles < 1):
                return f"{where}.steps.{name}.cycles: must be a positive integer or null, got {cycles!r:.40}"
            if "injected" in step and out_of_bounds(step["injected"], -1.0, 10.0):
                return f"{where}.steps.{name}.injected: must be a finite share, got {step['injected']!r:.40}"
    return None

"""`mlagate tune`'s pipeline: measure a config family's search space (perf.yml `tune:`) on the GPU, then write
each shape's winner to the committed table (kernels/tuned/<arch>.yaml), or check that table against them.

Per shape the candidates are the family default, the table's config and the space, in that order; those that
launch the same kernel are measured once (mlagate.tune.rules). Each is lowered on the CPU first: one over
gate.build.shared_memory_limit is skipped with its bytes, never launched; one that does not lower has failed.
The rest are compiled in parallel and timed through the grid runner (budget "record", the output checked
against the reference first), --jobs per GPU at a time, all candidates of a shape on one GPU. Each finished
candidate is a JSON file under --out/<arch>/<family>/<grid>/, written atomically: the same command run again
(after a crash, or --max-minutes) goes on where it stopped, if tune.json (kernel, tilelang, GPU model, timing,
shared-memory limit) still matches. Once all are done: tune.md, and the table or the drift check.
"""

import hashlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path

from mlagate import progress
from mlagate.atomic import write_json, write_replace
from mlagate.case import CaseResult, RunStatus
from mlagate.config import Config
from mlagate.json_reader import JSONFileError, load
from mlagate.measure import grid, metrics
from mlagate.measure.precompile import in_processes
from mlagate.tune import report
from mlagate.tune import rules as decide

IDENTITY = "tune.json"  # what the candidate files beside it were measured of: a resume must match it


class Mode(StrEnum):
    REPORT = "report"  # measure and write tune.md only
    WRITE = "write"  # also write the winners to the table
    CHECK = "check"  # the drift watch: is the committed table beaten?


class Outcome(StrEnum):
    DONE = "done"
    DRIFT = "drift"  # --check: the committed table is beaten or broken at some shape
    INCOMPLETE = "incomplete"  # stopped at --max-minutes; the same command resumes


@dataclass(frozen=True)
class Plan:
    family: str
    arch: str  # perf.yml's (sm_90): the table's and the limit's key, and what the GPU must be
    target: str  # what `mlagate build` calls it (cuda:sm_90): the pre-filter lowers for it
    grid: str
    mode: Mode
    folder: Path  # --out/<arch>/<family>/<grid>
    table: Path | None  # None: the committed table
    committed: dict  # the family's entries in that table, as this run read it: shape key -> Entry
    jobs: int
    gpus: list | None
    max_minutes: float | None
    command: str
    identity: dict
    shapes: tuple  # ShapePlan per shape of the grid


def plan(cfg: Config, *, grid_name="quick", family=None, out="out/tune", jobs=1, gpus=None, mode=Mode.REPORT,
         table=None, max_minutes=None) -> Plan:
    """Every input checked before anything is written; a ValueError names the option, file or key."""
    import tilelang

    from mlagate.kernels import mla_decode, tuned
    from mlagate.measure.environment import platform

    if grid_name not in cfg.grid.sizes:
        raise ValueError(f"--grid: {grid_name!r} is not a grid of perf.yml ({', '.join(cfg.grid.sizes)})")
    family = family or cfg.platform(platform()).tilelang.removeprefix(tuned.TILELANG_PREFIX)
    if family not in cfg.tune:
        raise ValueError(f"--config-family: {family!r} has no search space in perf.yml's tune: "
                         f"({', '.join(cfg.tune) or 'none'})")
    if jobs < 1:
        raise ValueError(f"--jobs: must be at least 1, got {jobs}")
    if max_minutes is not None and not 0 < max_minutes < float("inf"):  # NaN fails this too
        raise ValueError(f"--max-minutes: must be > 0 and finite, got {max_minutes}")
    spec, default = cfg.tune[family], mla_decode.CONFIGS[family]
    space = spec.candidates(default)
    gpus = grid.parse_gpus(gpus)
    new_table = mode == Mode.WRITE and table and not Path(table).exists()  # --write-table creates it
    committed = {} if new_table else tuned.load_table(spec.arch, table).get(family, {})
    kind = mla_decode.target_for(spec.arch)["kind"]  # cuda or hip
    batches, seqlens, heads, q_lens = cfg.grid.sizes[grid_name]
    shapes = tuple(decide.shape_plan(mla_decode.Shape(b, s, h, d, s_q=q), default, space, committed, spec.arch)
                   for d in cfg.platform("rocm" if kind == "hip" else kind).dtypes
                   for h in heads for q in q_lens for b in batches for s in seqlens)
    folder = Path(out) / spec.arch / family / grid_name
    kernel = mla_decode.kernel_source(default)
    identity = json.loads(json.dumps({  # as tune.json reads back (tuples as lists)
        "family": family, "arch": spec.arch, "grid": grid_name, "default": asdict(default),
        "kernel_sha256": hashlib.sha256(kernel).hexdigest(), "tilelang": tilelang.__version__, "gpu": gpu_name(gpus),
        "timing": asdict(cfg.timing), "shared_memory_limit": cfg.gate.shared_memory_limit[spec.arch]}))
    saved = folder / IDENTITY
    if saved.exists():  # a resume: an earlier run's tune.json must match
        try:
            before = load(saved, "a tune's identity")
        except (OSError, JSONFileError) as e:
            raise ValueError(f"--out {out}: {saved}: not readable ({getattr(e, 'reason', e)}); remove that folder to "
                             "start over") from None
        identity = decide.resumed_identity(before, identity, f"--out {out}: {saved}")
    flag = {Mode.REPORT: "", Mode.WRITE: " --write-table", Mode.CHECK: " --check"}[mode]
    return Plan(family, spec.arch, f"{kind}:{spec.arch}", grid_name, mode, folder, Path(table) if table else None,
                committed, jobs, gpus, max_minutes, f"mlagate tune --grid {grid_name} --config-family {family}{flag}",
                identity, shapes)


def gpu_name(gpus) -> str | None:
    """The model of the GPUs measured on (tests stand in for it): torch's name of each of ``gpus`` (else of
    the one visible); None without a GPU, where a run only lowers."""
    from mlagate.store.record import gpu_available

    if not gpu_available():
        return None
    import torch

    return ", ".join(sorted({torch.cuda.get_device_name(i) for i in gpus or [torch.cuda.current_device()]}))


@dataclass(frozen=True)
class Summary:
    outcome: Outcome
    left: int  # candidates not done yet
    report: Path | None = None
    table: Path | None = None
    shapes: tuple = ()  # decide.ShapeTune per shape, once every candidate is done


def run_tune(cfg: Config, p: Plan, echo=print) -> Summary:
    """Lower, measure what is not done yet, and once all is done decide, report, and write or check."""
    deadline = time.monotonic() + p.max_minutes * 60 if p.max_minutes else None
    done = _read(p)  # an earlier run's files checked first: nothing is written before a refusal
    write_json(p.folder / IDENTITY, p.identity)
    _prefilter(cfg, p, done, deadline, echo)
    _measure_lowered(cfg, p, [(sp, impl) for sp, impl in _candidates(p) if _stage(done, sp, impl) == "lowered"],
                     done, deadline, echo)
    left = sum(_stage(done, sp, impl) != "done" for sp, impl in _candidates(p))
    if left:
        return Summary(Outcome.INCOMPLETE, left)
    shapes = tuple(_decide(cfg, sp, done) for sp in p.shapes)
    report_path = p.folder / "tune.md"
    write_replace(report_path, report.markdown(shapes, p.identity, p.command, cfg.gate.threshold).encode())
    table = _write_table(p, shapes) if p.mode == Mode.WRITE else None
    drifted = p.mode == Mode.CHECK and any(s.drift for s in shapes)
    return Summary(Outcome.DRIFT if drifted else Outcome.DONE, 0, report_path, table, shapes)


def _candidates(p: Plan):
    return ((sp, impl) for sp in p.shapes for impl in sp.candidates)


def _stage(done: dict, sp: decide.ShapePlan, impl: str) -> str | None:
    """None (not lowered yet), "lowered" (passed the pre-filter, not measured) or "done"."""
    return done.get((sp.folder, impl), {}).get("stage")


def _past(deadline) -> bool:
    return deadline is not None and time.monotonic() > deadline


def _read(p: Plan) -> dict:
    """{(shape folder, impl): candidate file} of what earlier runs finished."""
    done = {}
    for path in sorted(p.folder.glob("*/*.json")):
        try:
            done[path.parent.name, path.stem] = load(path, "a candidate file",
                                                     lambda record: decide.record_problem(record, path.stem))
        except JSONFileError as e:
            raise ValueError(f"{e}; remove it to measure that candidate again") from None
    return done


def _save(p: Plan, done: dict, sp: decide.ShapePlan, impl: str, stage: str, smem=None, result=None) -> None:
    record = {"candidate": impl, "config": asdict(sp.candidates[impl]), "stage": stage, "smem": smem,
              "result": result.to_dict() if result else None}
    write_json(p.folder / sp.folder / f"{impl}.json", record)
    done[sp.folder, impl] = record


def _prefilter(cfg: Config, p: Plan, done: dict, deadline, echo) -> None:
    """Lower each candidate not lowered yet: over the shared-memory limit it is skipped, never launched."""
    from mlagate.build import lower, report
    from mlagate.build import plan as build_plan

    _, lowered_arch = build_plan.parse_target(p.target)  # sm_90a: what tilelang lowers for
    limit = cfg.gate.shared_memory_limit[p.arch]
    work = {build_plan.Job(p.target, lowered_arch, config, sp.shape, False): (sp, impl)
            for sp in p.shapes for impl, config in sp.candidates.items() if (sp.folder, impl) not in done}
    if work:
        echo(f"lowering {len(work)} candidate(s) for {p.arch} on the CPU ({p.jobs} process(es))")
    with progress.bar("lowering candidates", total=len(work)) as lowering:
        for job, lowered in in_processes(lower.lower_job, list(work), p.jobs, lambda: _past(deadline)):
            sp, impl = work[job]
            lowering.advance(f"lowered {sp.folder} {impl}")
            if isinstance(lowered, Exception):  # the worker crashed: its candidate failed, not the tune
                lowered = {"error": f"lowering crashed: {type(lowered).__name__}: {lowered}"}
            rows = report.kernel_rows(job, lowered, None, limit)
            errors = [r["error"] for r in rows if r.get("error")]
            case = sp.case(impl)
            if errors:
                _save(p, done, sp, impl, "done", result=CaseResult(case, RunStatus.FAILED, errors[0]))
                continue
            smem = max((r["smem"] for r in rows), default=0)
            if smem > limit:
                reason = (f"not launched: {smem} B of shared memory, over the {p.arch} limit of {limit} B "
                          "(gate.build.shared_memory_limit)")
                _save(p, done, sp, impl, "done", smem, CaseResult(case, RunStatus.SKIPPED, reason))
            else:
                _save(p, done, sp, impl, "lowered", smem)


def _measure_lowered(cfg: Config, p: Plan, lowered: list, done: dict, deadline, echo) -> None:
    """Measure each GPU's queue in rounds of --jobs candidates (one parallel compile each), a thread per GPU;
    none started after the deadline; each result is saved as it arrives. All of a shape's candidates go to one
    GPU (two GPUs of a host read ~1% apart): its index in the grid modulo --gpus, the same on every resume."""
    by_key = {sp.case(impl).key: (sp, impl) for sp, impl in lowered}
    peaks = cfg.peaks(p.arch, gpu_name(p.gpus))

    def save(result: CaseResult):
        sp, impl = by_key[result.case.key]
        (measured,) = metrics.add_metrics([result], peaks=peaks)
        _save(p, done, sp, impl, "done", done[sp.folder, impl]["smem"], measured)
        measuring.advance(f"measured {sp.folder} {impl}: {result.status}")

    queues, on = {}, {gpu: f" on GPU {gpu}" for gpu in p.gpus or ()}
    for sp, impl in lowered:
        queues.setdefault(p.gpus[p.shapes.index(sp) % len(p.gpus)] if p.gpus else None, []).append(sp.case(impl))

    def run(gpu, queue):
        for start in range(0, len(queue), p.jobs):
            if _past(deadline):
                return
            cases = queue[start:start + p.jobs]
            echo(f"measuring candidates {start + 1}-{start + len(cases)} of {len(queue)}{on.get(gpu, '')}")
            measure(cfg, p, cases, save, echo, gpu)

    with progress.bar("measuring candidates", total=len(lowered)) as measuring:
        if len(queues) <= 1:  # one GPU: in this thread, so that Ctrl-C stops it at once
            for gpu, queue in queues.items():
                run(gpu, queue)
            return
        with ThreadPoolExecutor(len(queues)) as threads:
            for running in [threads.submit(run, gpu, queue) for gpu, queue in queues.items()]:
                running.result()  # a GPU's error (or a kill) is raised here, once the other GPUs are done


def measure(cfg: Config, p: Plan, cases: list, on_result, echo, gpu: int | None = None) -> None:
    """The step on the GPU (tests replace it): on ``gpu`` (None: the one visible), of the family's arch,
    compile the cases' kernels in --jobs processes, then time them through the grid runner (budget "record",
    correctness checked first)."""
    from mlagate.hardware import arch_key
    from mlagate.kernels import mla_decode
    from mlagate.measure import environment, impls, precompile
    from mlagate.store.record import gpu_available

    if not gpu_available():
        raise ValueError(f"no GPU: torch.cuda.is_available() is False; the lowered candidates wait in {p.folder} "
                         f"for a {p.arch} GPU: run the same command there")
    arch = mla_decode.device_arch(environment.device())
    if arch_key(arch) != p.arch:
        raise ValueError(f"--config-family {p.family}: its table is for {p.arch}, this GPU is {arch_key(arch)}")
    precompile.precompile([k for c in cases if (k := impls.case_kernel(c, arch)) is not None], p.jobs, echo)
    grid.run_cases(cases, cfg.timing, gpus=None if gpu is None else [gpu], on_result=on_result)


def _decide(cfg: Config, sp: decide.ShapePlan, done: dict) -> decide.ShapeTune:
    from mlagate.kernels import tuned

    results = {impl: CaseResult.from_dict(done[sp.folder, impl]["result"]) for impl in sp.candidates}
    results |= {impl: CaseResult(sp.case(impl), RunStatus.SKIPPED, why) for impl, why in sp.refused.items()}
    return decide.decide_shape(tuned.shape_key(sp.shape), results, sp.duplicates, sp.default, sp.committed,
                               cfg.gate.threshold)


def _write_table(p: Plan, shapes) -> Path:
    """The winners into the table; shapes this run did not measure keep their entries."""
    from mlagate.kernels import tuned

    today = time.strftime("%Y-%m-%d", time.gmtime())
    entries = dict(p.committed)
    for sp, s in zip(p.shapes, shapes):
        w = s.winner
        if w is None:
            continue
        measured = {"tflops": round(w.result.tflops, 2), "median_us": round(w.result.median_ms * 1000, 2),
                    "default_tflops": round(w.default.tflops, 2) if w.default else None,
                    "gain": round(w.gain, 4) if w.gain is not None else None, "date": today,
                    "gpu": w.result.samples.device if w.result.samples else None,
                    "tilelang": p.identity["tilelang"], "command": p.command}
        entries[s.shape] = tuned.Entry(sp.shape, tuned.parse_candidate(w.impl), measured)
    return tuned.write_table(p.arch, p.family, list(entries.values()), p.table)

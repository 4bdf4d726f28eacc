"""`mlagate ladder`'s pipeline: qualify a runner by gating known slowdowns. Not on the pull-request path.

The slowdown is a spin of GPU clock cycles at the start of every block of the gated TileLang kernel, inside it
(each gated schedule's kernel file with a block appended: mlagate/ladder/rules.py). Calibration first, once per
ladder on the GPU: for each case, the base commit's kernel against a probe commit's (the same kernel with a
spin of about 8% of the case's time), alternated; from those medians the cycles that add each step's x%.
Then one throw-away commit per step on top of base (a comment for 0%, the spin for the others), each alternated
with base on its own (as the gate re-measures): that measured share is the step's injected value. Each is kept by
a ref under refs/mlagate/ladder/. Each repetition records base and every step's commit through the normal
`record` path into a store of its own and gates each step against base with --confirm. Every finished step is
a JSON file in its repetition's folder: a killed ladder started again resumes. The refs stay (its table names
them); `git for-each-ref --format='delete %(refname)' refs/mlagate/ladder/ | git update-ref --stdin` drops them.
"""

import os
import platform as _platform
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from mlagate import progress
from mlagate.atomic import write_json
from mlagate.case import Case
from mlagate.config import Config
from mlagate.decide import clock_compare
from mlagate.gitops import GitError, git, repository, resolve
from mlagate.json_reader import load
from mlagate.kernels import mla_decode
from mlagate.ladder import rules as ladder
from mlagate.measure.impls import TILELANG_PREFIX
from mlagate.measure.summary import median
from mlagate.names import unknown
from mlagate.store import results as stores  # by module: tests stand a store in

REF_ROOT = "refs/mlagate/ladder"
CALIBRATION_VERSION = 3  # 1: a spin launched after the kernel; 2: every step timed in one alternation with base
CALIBRATION_ROUNDS = 20  # alternated rounds per calibration measurement (the gate: gate.confirm.min_rounds on)
# The throw-away commits: a fixed identity, no hooks, no signing, whatever the user's git config says.
GIT_SETTINGS = ("-c", "user.name=mlagate ladder", "-c", "user.email=mlagate-ladder@localhost",
                "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null")


@dataclass(frozen=True)
class Plan:
    """A checked ladder: what to run, where; ``cases`` are the gated TileLang cases the spin is injected in."""
    base: str
    steps: tuple
    reps: int
    grid: str
    impls: tuple
    machine: str
    out: Path
    cases: tuple
    files: tuple = (ladder.DENSE_FILE,)  # the kernel files a step patches: those of the gated cases' schedules

    def identity(self) -> dict:
        return {"version": CALIBRATION_VERSION, "base": self.base, "machine": self.machine, "grid": self.grid,
                "impls": list(self.impls), "cases": [list(c.key) for c in self.cases], "steps": list(self.steps)}


def plan(cfg: Config, *, base_rev: str, steps="0,1,2,3,5,8", reps="3", grid="quick", impls=None, machine=None,
         out="out/ladder") -> Plan:
    """Every input checked before anything is written; a ValueError names the option."""
    from mlagate.measure.environment import platform

    steps = ladder.parse_steps(steps) if isinstance(steps, str) else ladder.parse_steps(",".join(map(str, steps)))
    try:
        reps = int(reps)
    except (TypeError, ValueError):
        raise ValueError(f"--reps: {reps!r} is not a whole number") from None
    if reps < 1:
        raise ValueError(f"--reps: must be at least 1, got {reps}")
    if grid not in cfg.grid.sizes:
        raise ValueError(f"--grid: {grid!r} is not a grid of perf.yml ({', '.join(cfg.grid.sizes)})")
    here = platform()
    names = [i.strip() for i in impls.split(",") if i.strip()] if isinstance(impls, str) else list(impls or ())
    # the vendors too by default (an fp8 cache's as well): a gated case without its vendor ratio fails the gate
    names = list(dict.fromkeys(names or [cfg.platform(here).tilelang, *cfg.platform(here).vendor_impls()]))
    strangers = [i for i in names if i not in cfg.implementations]
    if strangers:
        raise ValueError(f"--impl: {unknown('implementation', strangers[0], cfg.implementations)}")
    gated = [i for i in names if i.startswith(TILELANG_PREFIX) and i in cfg.gate.gated]
    configs = {i: mla_decode.CONFIGS[i.removeprefix(TILELANG_PREFIX)] for i in gated}
    files = tuple(sorted({ladder.SCHEDULES[c.schedule][0] for c in configs.values()}))
    # the dense grid's 16-bit caches (the spin keys a 16-bit Shape): each gated file gets the step's delay
    cases = tuple(c for c in cfg.cases(grid, gated, here) if not c.paged and c.kv_dtype == c.dtype) if gated else ()
    runs = {c: mla_decode.kernel_config(mla_decode.Shape(c.batch, c.seqlen, c.heads, c.dtype, s_q=c.q_len),
                                        configs[c.impl]) for c in cases}
    other = [c for c in cases if runs[c].schedule != configs[c.impl].schedule]
    if other:  # the step's spin goes into the file of the config's own schedule, not the one that runs there
        raise ValueError(f"--grid {grid}: {other[0].label()} runs another schedule's kernel, which its spin misses")
    if not cases:
        raise ValueError(f"--impl: no case of a gated TileLang config ({', '.join(cfg.gate.gated)}) among "
                         f"{', '.join(names)} in the {grid} grid on {here}")
    try:
        base = resolve(base_rev)
        sources = {path: git("show", f"{base}:{path}", strip=False) for path in files}
    except GitError as e:
        raise ValueError(f"--base {base_rev!r}: not a commit in {repository()} with {', '.join(files)} ({e})") from None
    for path, source in sources.items():
        why = ladder.unpatchable(source, path)
        if why:  # a base older than the ladder's kernel: refused here, not at a step commit's import on the GPU
            raise ValueError(f"--base {base_rev!r}: its {path} {why}, so no step can be patched into it")
    checked = Plan(base, steps, reps, grid, tuple(names), machine or _platform.node(), Path(out), cases, files)
    saved = read_calibration(checked.out)
    differ = ladder.mismatch(saved, checked.identity()) if saved is not None else []
    if differ:
        raise ValueError(f"--out {checked.out}: holds a ladder with another {', '.join(differ)} (calibration.json); "
                         "give another --out, or remove it to start over")
    return checked


def run_ladder(cfg: Config, p: Plan, echo=print) -> dict:
    """Calibrate (or reuse the calibration), make the step commits, run every repetition; the ladder's
    document (also written as ladder.json). Steps already done in --out are read, not redone."""
    from mlagate.store import record as recorder

    if not recorder.gpu_available():
        raise ValueError(f"no GPU: torch.cuda.is_available() is False in this process; mlagate ladder measures on "
                         f"a CUDA or ROCm GPU and wrote nothing in {p.out}")
    p.out.mkdir(parents=True, exist_ok=True)
    calibration = read_calibration(p.out)
    if calibration is None:
        calibration = calibrate(cfg, p, echo)
        write_json(p.out / "calibration.json", calibration)
    else:
        echo(f"reusing the calibration in {p.out / 'calibration.json'} (ladder {calibration['run_id']})")
    commits = step_commits(p, calibration["run_id"], calibration["cases_calibrated"])
    with progress.bar("ladder steps", total=p.reps * len(p.steps)) as steps:  # each advances it, done or run
        results = [run_step(cfg, p, calibration, rep, step, commits[step], echo, steps.advance)
                   for rep in range(1, p.reps + 1) for step in p.steps]
    table = ladder.rows(results)
    return {**p.identity(), "reps": p.reps, "run_id": calibration["run_id"],
            "commits": {ladder.step_name(s): c for s, c in commits.items()},
            "gate": {"screen": cfg.gate.screen, "threshold": cfg.gate.threshold, "alpha": cfg.gate.alpha},
            "tolerance_pp": ladder.TOLERANCE_PP, "calibration": calibration, "steps_run": results,
            "table": table, "summary": ladder.summary(table, p.steps), "untouched": ladder.untouched(results)}


def calibrate(cfg: Config, p: Plan, echo) -> dict:
    """Per case: the base kernel's median, the slope of its probe commit's spin, each step's cycles, and
    each step commit measured against base (its ``injected`` share)."""
    from mlagate.measure import environment, interleaved

    run_id = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{p.base[:8]}-{os.getpid()}"
    device = environment.device()
    base = {}
    interleaved.compile_ahead(repository(), [p.base], p.cases, echo)
    for case in p.cases:
        echo(f"calibrating the spin on {case.label()}: base kernel")
        base[case.label()] = _medians(_timed(cfg, {"base": p.base}, case, device, rounds=1))["base"]
    probes = {c.label(): ladder.probe_cycles(base[c.label()]) for c in p.cases}
    probe = commit_on_base(p, run_id, "probe", "the calibration's probe", patched_files(
        p, "probe", {ladder.shape_key(c.key): probes[c.label()] for c in p.cases}, run_id))
    interleaved.compile_ahead(repository(), [probe], p.cases, echo)
    per_case = {}
    for case in p.cases:
        echo(f"calibrating the spin on {case.label()}: {probes[case.label()]} cycles, {CALIBRATION_ROUNDS} "
             "alternated rounds")
        fitted = _medians(_timed(cfg, {"base": p.base, "probe": probe}, case, device))
        slope = ladder.fit(fitted["base"], fitted["probe"], probes[case.label()])
        per_case[case.label()] = {"median_s": fitted["base"], "probe_cycles": probes[case.label()],
                                  "fit_medians_s": fitted, "slope_s_per_cycle": slope,
                                  "steps": {ladder.step_name(s): {"cycles": ladder.cycles_for(s, fitted["base"], slope)
                                                                  if s > 0 else None} for s in p.steps}}
    commits = step_commits(p, run_id, per_case)
    spun = {ladder.step_name(s): c for s, c in commits.items() if s > 0}
    interleaved.compile_ahead(repository(), list(spun.values()), p.cases, echo)
    for case in p.cases:  # each step on its own against base, as the gate's re-measure times a change
        echo(f"measuring each step's spin on {case.label()} against base ({CALIBRATION_ROUNDS} alternated rounds)")
        mine = per_case[case.label()]
        mine["verify_medians_s"] = {name: _medians(_timed(cfg, {"base": p.base, "step": commit}, case, device))
                                    for name, commit in spun.items()}
        for name, step in mine["steps"].items():  # 0: a comment, nothing added
            pair = mine["verify_medians_s"].get(name)
            step["injected"] = pair["step"] / pair["base"] - 1 if pair else 0.0
    return {"run_id": run_id, **p.identity(), "probe_commit": probe,
            "rounds": CALIBRATION_ROUNDS, "cases_calibrated": per_case}


def _timed(cfg: Config, commits: dict, case: Case, device, rounds: int = CALIBRATION_ROUNDS) -> dict:
    """{name: samples}: each commit's kernel on the case's one set of inputs, alternated (the re-measure's)."""
    from mlagate.measure import interleaved
    from mlagate.measure.harness import Inputs

    inputs = Inputs(case, device)
    launches = {name: interleaved.launch_at(repository(), commit, case, inputs) for name, commit in commits.items()}
    samples = interleaved.alternate(launches, cfg.timing, rounds, device=device)
    del launches, inputs
    _free_memory()
    return samples


def _medians(samples: dict) -> dict:
    return {name: median(s) for name, s in samples.items()}


def _free_memory():
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def patched_files(p: Plan, step, cycles: dict, run_id: str) -> dict:
    """{path: text}: each of the plan's kernel files as base has it, with the step's block appended."""
    return {path: ladder.patched(git("show", f"{p.base}:{path}", strip=False), step, cycles, run_id, path)
            for path in p.files}


def step_commits(p: Plan, run_id: str, cases_calibrated: dict) -> dict:
    """{step: commit}: base + each step's kernel files, made once and kept by a ref."""
    commits = {}
    for step in p.steps:
        name = ladder.step_name(step)
        cycles = {ladder.shape_key(c.key): cases_calibrated[c.label()]["steps"][name]["cycles"] for c in p.cases}
        what = "no delay, a comment only" if step == 0 else "a calibrated spin in the TileLang kernel"
        commits[step] = commit_on_base(p, run_id, f"step-{name}", f"step {name}% ({what})",
                                       patched_files(p, step, cycles, run_id))
    return commits


def commit_on_base(p: Plan, run_id: str, name: str, title: str, texts: dict) -> str:
    """base with ``texts`` ({path: text}) as those files, made once and kept by refs/mlagate/ladder/<run_id>/<name>;
    the user's checkout, index and HEAD are not touched (the commit is made in a worktree of its own)."""
    ref = f"{REF_ROOT}/{run_id}/{name}"
    existing = git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    if existing and _is_on_base(existing, p.base, texts):
        return existing
    message = (f"mlagate ladder {run_id}: {title}\n\nA throw-away commit of `mlagate ladder` (qualifies a runner), "
               f"on {p.base}; never merge it.\n")
    tmp = Path(tempfile.mkdtemp(prefix="mlagate-ladder-"))
    tree = tmp / "tree"
    try:
        git(*GIT_SETTINGS, "worktree", "add", "--detach", "--no-checkout", str(tree), p.base)
        git("read-tree", "HEAD", repo=tree)  # the worktree's own index: base's tree
        for path, text in texts.items():
            (tree / path).parent.mkdir(parents=True, exist_ok=True)
            (tree / path).write_text(text)
        git(*GIT_SETTINGS, "add", *texts, repo=tree)
        git(*GIT_SETTINGS, "commit", "--quiet", "--no-verify", "-m", message, repo=tree)
        commit = resolve("HEAD", tree)
    finally:
        git("worktree", "remove", "--force", str(tree), check=False)
        shutil.rmtree(tmp, ignore_errors=True)
        git("worktree", "prune", check=False)
    git("update-ref", ref, commit)
    return commit


def _is_on_base(commit: str, base: str, texts: dict) -> bool:
    parents = git("rev-list", "--parents", "-n", "1", commit).split()[1:]
    return parents == [base] and all(git("show", f"{commit}:{path}", strip=False) == text
                                     for path, text in texts.items())


def run_step(cfg: Config, p: Plan, calibration: dict, rep: int, step: float, commit: str, echo,
             advance=lambda _: None) -> dict:
    """One step of one repetition: its JSON if done, else record what its store lacks and gate."""
    from mlagate.gate import run_gate

    name, folder = ladder.step_name(step), p.out / f"rep{rep}"
    advance(f"rep {rep}, step {name}%")
    done, results = folder / f"step{name}.json", folder / "results"
    if done.exists():
        return load(done, "a ladder step")
    for rev in (p.base, commit):
        _record_once(rev, results, p, echo)
    echo(f"rep {rep}, step {name}%: gating {commit[:10]} against base {p.base[:10]}")
    out = run_gate(cfg, base_rev=p.base, head_rev=commit, results=results, out_dir=folder / f"step{name}",
                   machine=p.machine, confirm=True, grid=p.grid, echo=echo)
    clocks = clock_compare.store_changes(stores.Store(results), p.machine, p.base, commit, out.verdict.cases)
    result = ladder.step_result(out.verdict, p.cases, calibration["cases_calibrated"], rep, step, commit, clocks)
    write_json(done, result)
    return result


def _record_once(rev: str, results: Path, p: Plan, echo):
    from mlagate.store import record as recorder

    if stores.Store(results).load(p.machine, rev) is None:
        recorder.record(rev, results=results, machine=p.machine, grid=p.grid, impls=list(p.impls), echo=echo)


def read_calibration(out: Path) -> dict | None:
    path = Path(out) / "calibration.json"
    return load(path, f"a ladder's calibration in --out {out}", ladder.calibration_problem) if path.exists() else None

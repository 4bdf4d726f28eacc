"""The gate pipeline: store -> decide (-> interleaved confirm -> decide) -> report files."""

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from mlagate import gitops
from mlagate.atomic import check_output_folder, output_set
from mlagate.config import Config, ConfigError
from mlagate.decide import acceptance, build_rules, remeasure, schedule, verdict
from mlagate.decide.vocabulary import Kind, Note
from mlagate.gitops import GitError, git, resolve
from mlagate.report import comparison
from mlagate.report import text as report
from mlagate.store.env import RunEnv
from mlagate.store.errors import GateError, StoreError
from mlagate.store.results import Store, pick_machine


@dataclass
class GateOutput:
    verdict: verdict.Verdict
    markdown: str
    files: dict


def main_history(store: Store, machine: str, base: str, lookback: int, strict=False) -> list:
    """Recorded first-parent ancestors of base (base included), oldest first. A history git cannot read
    is none (the drift warning is a warning); ``strict`` (where the history is what decides): a GateError."""
    try:
        commits = git("rev-list", "--first-parent", f"--max-count={lookback * 4}", base).split()
    except GitError as e:
        if strict:
            raise GateError(f"cannot read the first-parent history of {base[:10]}: {e}") from None
        return []
    recorded = store.load_all(machine)
    return [recorded[c] for c in reversed(commits) if c in recorded]


def commit_of(rev: str) -> str:
    """A revision's full hash; a full hash is taken as given, so results can be
    gated in a clone that lacks the commits (e.g. a results branch checkout)."""
    try:
        return resolve(rev)
    except GitError:
        if re.fullmatch(r"[0-9a-f]{40}", rev):
            return rev
        raise


def read_acceptances(commit: str, side: str, notes: list) -> str | None:
    """perf-accept.yml as committed in ``commit``, or None where it has none. A commit this clone lacks
    (results gated by hash) has no readable file: a note says so."""
    try:
        return gitops.file_at(commit, acceptance.FILE)
    except GitError:
        notes.append(Note(Kind.ACCEPT_UNREAD, f"{side} {commit[:8]} is not in this clone: its "
                          f"{acceptance.FILE} was not read, so no accepted change applies"))
        return None


def acceptances(base: str, head: str, texts=None, notes=None) -> tuple:
    """(trusted entries, proposed entries, the commits an entry may name): the base's perf-accept.yml
    accepts; the head's entries the base lacks are only proposed. perf-pr.yml gates the pull request merged
    onto base, so an entry names the PR's head: a merge's parents other than base count as head too.
    ``texts``: (base's file, head's file) as text, instead of reading them from git."""
    notes = [] if notes is None else notes
    if texts is None:
        texts = (read_acceptances(base, "base", notes), read_acceptances(head, "head", notes))
    try:
        trusted = acceptance.parse(texts[0], f"{acceptance.FILE} of base {base[:8]}")
        proposed = [e for e in acceptance.parse(texts[1], f"{acceptance.FILE} of head {head[:8]}")
                    if e not in trusted]
    except acceptance.AcceptanceError as e:
        raise GateError(str(e)) from None
    try:
        parents = git("rev-list", "--parents", "-n", "1", head).split()[1:]
    except GitError:
        parents = []
    return trusted, proposed, {head, *(p for p in parents if p != base)}


def run_gate(cfg: Config, *, base_rev: str, head_rev: str, results: Path, out_dir: Path, machine=None,
             platform=None, confirm=False, record_missing=False, grid="full", echo=print,
             accept_texts=None) -> GateOutput:
    """``accept_texts``: (base's, head's) perf-accept.yml as text, where the commits are not in this clone."""
    check_output_folder(out_dir)  # before --record-missing records anything: --out is replaced whole at the end
    store = Store(results)
    base_commit, head_commit = commit_of(base_rev), commit_of(head_rev)
    accept_notes = []
    trusted, proposed, head_commits = acceptances(base_commit, head_commit, accept_texts, accept_notes)
    machine = pick_machine(store, machine, new=record_missing, revs=(base_commit, head_commit))
    sides = (("base", base_commit), ("head", head_commit))
    for name, commit in sides:  # both, and head's env sidecar, before --record-missing writes anything
        store.load(machine, commit)
        refuse_corrupt(store, name, commit)
    if store.load(machine, head_commit) is not None:
        head_platform(store, machine, head_commit, platform, cfg)
    loaded = {name: load_commit(store, machine, name, commit, record_missing, grid, echo, cfg.timing.record_s)
              for name, commit in sides}
    platform, head_env = head_platform(store, machine, head_commit, platform, cfg)
    history = [r for r in main_history(store, machine, base_commit, cfg.gate.drift_lookback)
               if r.commit != head_commit]
    envs = (store.read_env(machine, base_commit), head_env)
    marks = acceptance.change_marks(history, trusted)
    decided = verdict.evaluate(loaded["base"], loaded["head"], cfg, platform, history=history, envs=envs,
                               marks=marks)
    flagged = decided.flagged()
    if confirm and flagged:
        from mlagate.measure import interleaved

        cases = [cfg.case(c.case, platform) for c in flagged]
        echo(f"confirming {len(cases)} flagged case(s) with an interleaved base/head re-measure")
        thresholds = {c.case: verdict.confirm_threshold(c, cfg, cfg.gate.ratio[platform]) for c in flagged}
        confirmations = interleaved.interleaved_until(cases, gitops.repository(), base_commit, head_commit,
                                                      cfg.timing, remeasure.stop_rule(cfg.gate.confirm, thresholds))
        decided = verdict.evaluate(loaded["base"], loaded["head"], cfg, platform, history=history,
                                   confirmations=confirmations, envs=envs, marks=marks)
    elif flagged:
        decided.warnings.append(Note(Kind.UNCONFIRMED, "flagged cases were not re-measured interleaved (run the "
                                     "gate with --confirm on the GPU host to rule out run-to-run noise)"))
    decided.warnings += runner_notes(store, machine, sides, envs)
    findings, builds = build_findings(store, machine, base_commit, head_commit, cfg, decided.warnings)
    verdict.add_build_findings(decided, findings)
    acceptance.apply(decided, trusted, proposed, head_commits)
    decided.warnings += accept_notes
    sides = comparison.Sides(machine, loaded["base"], loaded["head"],
                             *envs, builds)
    decided.warnings += [Note(Kind.UNREADABLE_RESULTS, f"skipped unreadable results: {p}")
                         for p in store.problems]  # of other commits (drift), or base's env record (the page)
    return write_outputs(decided, sides, out_dir, cfg, arch=head_env.arch, gpu=head_env.gpu)


def refuse_corrupt(store: Store, name: str, commit: str):
    """A corrupt file of a commit being gated is an error, never skipped: it may hold the very
    cases that decide, and a record over it would be refused (the store is append-only)."""
    corrupt = store.problems_of(commit)
    if corrupt:
        raise GateError(f"{corrupt[0].path}: corrupt results file of {name} {commit[:8]} ({corrupt[0].reason}). "
                        "The gate neither skips nor records over it: restore it from the results branch, or "
                        "remove it by hand and record the commit again")


def load_commit(store: Store, machine: str, name: str, commit: str, record_missing: bool, grid: str, echo,
                time_budget_s=None):
    """One side's results, recorded first with ``record_missing``."""
    found = store.load(machine, commit)
    if found is None and record_missing:
        from mlagate.store.record import record

        echo(f"{name} {commit[:8]} has no results on '{machine}': recording it now")
        record(commit, results=store.root, machine=machine, grid=grid, time_budget_s=time_budget_s, echo=echo)
        found = store.load(machine, commit)
        refuse_corrupt(store, name, commit)
    if found is None:
        raise GateError(f"no {name} results for {commit[:8]} in {store.root / machine}. "
                        f"Run: mlagate record --rev {commit} --machine {machine} --results {store.root} "
                        f"(or add --record-missing to the gate)")
    return found


def head_platform(store: Store, machine: str, head: str, given: str | None, cfg: Config) -> tuple:
    """(platform, head's store.env.RunEnv) from head's env sidecar, which every record writes: without it the
    gate cannot know what head was measured on. ``given`` (--platform) must agree with it."""
    path = store.sidecar_path(machine, head, "env")
    env = store.read_env(machine, head, strict=True)
    if env is None:
        raise GateError(f"{path}: missing; every `mlagate record` writes it, and without it the gate cannot "
                        "tell the platform and GPU head was measured on: restore it from the results branch")
    if env.platform not in cfg.platforms:
        raise GateError(f"{path}: platform {env.platform!r:.40} is not one of {', '.join(cfg.platforms)}")
    if given and given != env.platform:
        raise GateError(f"{path}: head was measured on {env.platform}, not on --platform {given}")
    return env.platform, env


def runner_notes(store: Store, machine: str, sides, envs) -> list:
    """Warnings, never failures: a side recorded with unlocked (or unread) GPU clocks, or on GPUs
    whose consistency check flagged one. ``envs``: each side's store.env.RunEnv (None: not readable)."""
    notes = []
    for (name, commit), env in zip(sides, envs):
        env = env or RunEnv()
        rows = (store.read_sidecar(machine, commit, "cases") or {}).get("results")
        rows = rows if isinstance(rows, list) else []
        windows = [w for row in rows if isinstance(row, dict) and isinstance(row.get("samples"), dict)
                   for w in row["samples"].get("windows") or () if isinstance(w, dict)]
        text = report.clock_warning(env.clock_control, windows)
        if text:
            notes.append(Note(Kind.UNLOCKED_CLOCKS, f"{name} {commit[:8]}: {text}"))
        for part in env.runners():
            check = part.gpu_consistency or {}
            where = f" (shard {part.shard})" if part.shard else ""
            for g in check.get("gpus") or ():
                if isinstance(g, dict) and g.get("flagged") is True and isinstance(g.get("off"), (int, float)):
                    notes.append(Note(Kind.GPU_OUTLIER, f"{name} {commit[:8]}{where}: GPU {g.get('gpu')} read "
                                      f"{g['off']:+.2%} against the node's other GPUs on {check.get('case')} before "
                                      "the record (more than the screen): its cases carry that offset"))
    return notes


def build_findings(store: Store, machine: str, base: str, head: str, cfg: Config, warnings: list) -> tuple:
    """(findings, {target: (base report, head report)}): head's build reports (`mlagate build --record`
    sidecars) against base's, per target; a head without a report that base has is a Note in ``warnings``."""
    found, builds = [], {}
    for target in build_rules.DEFAULT_TARGETS:
        kind = build_rules.sidecar_kind(target)
        base_report = store.read_sidecar(machine, base, kind, strict=True)
        head_report = store.read_sidecar(machine, head, kind, strict=True)
        builds[target] = (base_report, head_report)
        if head_report is None:
            if base_report is not None:
                warnings.append(Note(Kind.NO_BUILD_REPORT, f"no {kind} report for head {head[:8]} while base has "
                                     f"one: run mlagate build --record --machine {machine} on the head commit"))
            continue
        try:
            found += build_rules.evaluate_build(base_report, head_report, cfg)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
            paths = [store.sidecar_path(machine, c, kind) for c, r in ((base, base_report), (head, head_report)) if r]
            raise GateError(f"{' and '.join(map(str, paths))}: not build reports the gate can compare "
                            f"({type(e).__name__}: {e})") from None
    return found, builds


def changed_files(base: str, head: str) -> list | None:
    """The files head changes against base (for perf-pr.yml's merge commit: the PR's), or None where this
    clone lacks either commit."""
    try:
        return git("diff", "--name-only", "--no-renames", base, head).splitlines()
    except GitError:
        return None


def review_inputs(verdict, cfg: Config, machine: str, arch: str | None):
    from mlagate.report.review import Review

    quick = {c.key for c in cfg.cases("quick", cfg.gate.gated, verdict.platform)}
    return Review(changed=changed_files(verdict.base, verdict.head), arch=arch, machine=machine,
                  grids={c.case: "quick" if c.case in quick else "full" for c in verdict.cases},
                  vendor_of=cfg.platform(verdict.platform).vendor_impl,
                  schedules=schedule.diagnose_cases(workload_cases(verdict, cfg), arch))


def workload_cases(verdict, cfg: Config) -> list:
    """The verdict's workload cases as perf.yml defines them now (lengths and pages); one it no longer
    defines has no lengths to plan."""
    cases = []
    for cv in verdict.cases:
        try:
            case = cfg.case(cv.case, verdict.platform)
        except ConfigError:
            continue
        if case.paged:
            cases.append(case)
    return cases


def write_outputs(verdict, sides, out_dir: Path, cfg: Config, arch: str | None, gpu: str | None) -> GateOutput:
    from mlagate.report.plots import tflops_png
    from mlagate.report.site import commit_rows

    rows = [r for r in commit_rows(sides.head) if r.tflops is not None]
    review = review_inputs(verdict, cfg, sides.machine, arch)
    # One set, replaced whole: a reader of --out (a concurrent gate's) never sees gate.md of one run beside
    # verdict.json of another, or half of either.
    with output_set(out_dir) as fresh:
        if rows:
            tflops_png(fresh / "tflops.png", cfg, rows, cfg.peaks(arch, gpu))
        page = comparison.write_page(fresh, verdict, sides, cfg, schedules=review.schedules)
        markdown = report.gate_markdown(verdict, plot="tflops.png" if rows else None,
                                        vendor=cfg.platform(verdict.platform).vendor, page=page.name,
                                        review=review)
        (fresh / "gate.md").write_text(markdown)
        (fresh / "verdict.json").write_text(json.dumps(report.verdict_dict(verdict, review), indent=1, default=str))
    files = {"markdown": out_dir / "gate.md", "json": out_dir / "verdict.json", "comparison": out_dir / page.name}
    if rows:
        files["plot"] = out_dir / "tflops.png"
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a") as f:
            f.write(markdown)
    return GateOutput(verdict, markdown, files)


__all__ = ["GateError", "StoreError", "run_gate"]

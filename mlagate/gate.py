"""The gate pipeline: store -> decide (-> interleaved confirm -> decide) -> report files."""

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from mlagate import decide, report, resources
from mlagate.config import Case, Config
from mlagate.recorder import REPO, git, resolve
from mlagate.store import GateError, Store, StoreError

@dataclass
class GateOutput:
    verdict: decide.Verdict
    markdown: str
    files: dict


def pick_machine(store: Store, machine: str | None) -> str:
    machines = store.machines()
    if machine:
        return machine
    if len(machines) == 1:
        return machines[0]
    raise GateError(f"{store.root}: {len(machines)} machines ({', '.join(machines) or 'none'}); pass --machine")


def main_history(store: Store, machine: str, base: str, lookback: int) -> list:
    """Recorded first-parent ancestors of base (base included), oldest first."""
    try:
        commits = git("rev-list", "--first-parent", f"--max-count={lookback * 4}", base).split()
    except ValueError:
        return []
    recorded = store.load_all(machine)
    return [recorded[c] for c in reversed(commits) if c in recorded]


def commit_of(rev: str) -> str:
    """A revision's full hash; a full hash is taken as given, so results can be
    gated in a clone that lacks the commits (e.g. a results branch checkout)."""
    try:
        return resolve(rev)
    except ValueError:
        if re.fullmatch(r"[0-9a-f]{40}", rev):
            return rev
        raise


def run_gate(cfg: Config, *, base_rev: str, head_rev: str, results: Path, out_dir: Path, machine=None,
             platform=None, confirm=False, record_missing=False, grid="full", echo=print) -> GateOutput:
    store = Store(results)
    base_commit, head_commit = commit_of(base_rev), commit_of(head_rev)
    machine = pick_machine(store, machine)
    loaded = {}
    for name, commit in (("base", base_commit), ("head", head_commit)):
        found = store.load(machine, commit)
        if found is None and record_missing:
            from mlagate.recorder import record

            echo(f"{name} {commit[:8]} has no results on '{machine}': recording it now")
            record(commit, results=results, machine=machine, grid=grid, echo=echo)
            found = store.load(machine, commit)
        if found is None:
            unreadable = "".join(f"; unreadable: {p}" for p in store.problems)
            raise GateError(f"no {name} results for {commit[:8]} on machine '{machine}' in {results}{unreadable}. "
                            f"Run: mlagate record --rev {commit} --machine {machine} --results {results} "
                            f"(or add --record-missing to the gate)")
        loaded[name] = found
    env = store.read_sidecar(machine, head_commit, "env") or {}
    platform = platform or env.get("platform")
    if platform not in cfg.platforms:
        raise GateError(f"unknown platform for head {head_commit[:8]}: no env sidecar names it; pass --platform "
                        f"({' or '.join(cfg.platforms)})")
    history = [r for r in main_history(store, machine, base_commit, cfg.gate.drift_lookback)
               if r.commit != head_commit]
    verdict = decide.evaluate(loaded["base"], loaded["head"], cfg, platform, history=history)
    flagged = verdict.flagged()
    if confirm and flagged:
        from mlagate import confirm as confirm_mod

        cases = [Case(*c.case) for c in flagged]
        echo(f"confirming {len(cases)} flagged case(s) with an interleaved base/head re-measure")
        confirmations = confirm_mod.interleaved(cases, REPO, base_commit, head_commit, cfg.timing,
                                                cfg.gate.confirm_rounds)
        verdict = decide.evaluate(loaded["base"], loaded["head"], cfg, platform, history=history,
                                  confirmations=confirmations)
    elif flagged:
        verdict.warnings.append("flagged cases were not re-measured interleaved (run the gate with --confirm "
                                "on the GPU host to rule out run-to-run noise)")
    decide.add_build_findings(verdict, build_findings(store, machine, base_commit, head_commit, cfg, verdict.warnings))
    verdict.warnings += [f"skipped unreadable results: {p}" for p in store.problems]
    return write_outputs(verdict, loaded["head"], out_dir, cfg, arch=(env.get("start") or {}).get("arch"))


def build_findings(store: Store, machine: str, base: str, head: str, cfg: Config, warnings: list) -> list:
    """Head's build reports (`mlagate build --record` sidecars) against base's, per target."""
    found = []
    for target in resources.DEFAULT_TARGETS:
        kind = resources.sidecar_kind(target)
        base_report, head_report = store.read_sidecar(machine, base, kind), store.read_sidecar(machine, head, kind)
        if head_report is None:
            if base_report is not None:
                warnings.append(f"no {kind} report for head {head[:8]} while base has one: run "
                                f"mlagate build --record --machine {machine} on the head commit")
            continue
        found += resources.evaluate_build(base_report, head_report, cfg)
    return found


def write_outputs(verdict, head, out_dir: Path, cfg: Config, arch: str | None) -> GateOutput:
    from mlagate.publish import commit_rows, tflops_png

    out_dir.mkdir(parents=True, exist_ok=True)
    rows = [r for r in commit_rows(head) if r["tflops"] is not None]
    plot = out_dir / "tflops.png" if rows else None
    if plot:
        tflops_png(plot, cfg, rows, arch)
    markdown = report.gate_markdown(verdict, plot="tflops.png" if plot else None,
                                    vendor=cfg.platform(verdict.platform).vendor)
    files = {"markdown": out_dir / "gate.md", "json": out_dir / "verdict.json"}
    files["markdown"].write_text(markdown)
    files["json"].write_text(json.dumps(report.verdict_dict(verdict), indent=1, default=str))
    if plot:
        files["plot"] = Path(plot)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a") as f:
            f.write(markdown)
    return GateOutput(verdict, markdown, files)


__all__ = ["GateError", "StoreError", "run_gate"]

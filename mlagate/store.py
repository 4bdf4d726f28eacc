"""The results store: asv's results directory, plus sidecar files beside it.

asv writes one JSON file per machine x commit x environment; ``asv publish``
reads them, so they are the store of record. What asv cannot hold (the run's
GPU, clocks and versions, the build report, asv's own log) goes in sidecars
named ``<commit8>-<kind>.sidecar`` in the same machine folder: asv reads only
``*.json``, so it never sees them. Nothing here edits or deletes a file; a
corrupt or partial file is reported with its path and skipped.
"""

import ast
import itertools
import json
import math
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from mlagate.config import ROOT

BENCH_TIME = "mla_decode.TimeDecode.time_decode"
BENCH_TFLOPS = "mla_decode.Throughput.track_tflops"
BENCH_RATIO = "mla_decode.Throughput.track_vendor_ratio"
PARAM_NAMES = ("impl", "batch", "seqlen", "dtype", "heads")
# Results recorded before heads became a parameter were all measured at 128 heads.
LEGACY_HEADS = 128


class StoreError(Exception):
    """A results file or folder that cannot be used; the message names the path."""


class GateError(Exception):
    """Results the gate cannot decide without (missing commit, machine or platform);
    the message says what to run. Defined here, not in gate.py, so that the CLI can
    catch it without importing the gate's statistics."""


@dataclass(frozen=True)
class Entry:
    """One benchmark x case: 'ok' with a value (seconds for times), 'failed'
    (asv stored null) or 'skipped' (asv stored NaN)."""

    status: str
    value: float | None = None
    samples: tuple | None = None  # raw samples (seconds), when recorded


def ok_value(entry: Entry | None) -> float | None:
    """The entry's value if it was measured; None if absent, failed or skipped."""
    return entry.value if entry is not None and entry.status == "ok" else None


@dataclass
class CommitResults:
    machine: str
    commit: str
    date: int
    paths: list
    benchmarks: dict = field(default_factory=dict)  # name -> {case key: Entry}

    def entries(self, bench: str) -> dict:
        return self.benchmarks.get(bench, {})


@dataclass(frozen=True)
class Problem:
    path: str
    reason: str

    def __str__(self):
        return f"{self.path}: {self.reason}"


def case_keys(raw_params) -> list:
    """asv's parameter lists (values as Python literals) -> case keys, in asv's result order.
    Files without the heads parameter read as heads = LEGACY_HEADS."""
    if len(raw_params) == len(PARAM_NAMES) - 1:
        raw_params = [*raw_params, [repr(LEGACY_HEADS)]]
    if len(raw_params) != len(PARAM_NAMES):
        raise ValueError(f"{len(raw_params)} parameters, expected {', '.join(PARAM_NAMES)}")
    return list(itertools.product(*([ast.literal_eval(v) for v in values] for values in raw_params)))


def parse_results_file(path) -> tuple:
    """(commit, date, {bench: {case: Entry}}) from one asv results file;
    StoreError naming the path if it is not a complete asv results file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise StoreError(f"{path}: not readable JSON ({e})") from None
    try:
        columns = data["result_columns"]
        commit = data["commit_hash"]
        result_i, params_i = columns.index("result"), columns.index("params")
        samples_i = columns.index("samples") if "samples" in columns else None
        benchmarks = {}
        for name, row in data["results"].items():
            keys = case_keys(row[params_i])
            results = row[result_i]
            if len(results) != len(keys):
                raise ValueError(f"{name}: {len(results)} results for {len(keys)} parameter combinations")
            samples = row[samples_i] if samples_i is not None and samples_i < len(row) else None
            entries = {}
            for i, (key, value) in enumerate(zip(keys, results)):
                if value is None:
                    entries[key] = Entry("failed")
                elif isinstance(value, float) and math.isnan(value):
                    entries[key] = Entry("skipped")
                else:
                    s = samples[i] if samples else None
                    entries[key] = Entry("ok", float(value), tuple(s) if s else None)
            benchmarks[name] = entries
        return commit, int(data.get("date") or 0), benchmarks
    except (KeyError, IndexError, TypeError, ValueError, SyntaxError) as e:
        raise StoreError(f"{path}: not a complete asv results file ({type(e).__name__}: {e})") from None


class Store:
    """A local asv results directory (the default: .asv/results)."""

    def __init__(self, root):
        self.root = Path(root)
        self.problems: list = []
        self._parsed = {}  # machine -> (files and their mtimes, results): parse each file once

    def machines(self) -> list:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if (p / "machine.json").is_file())

    def _files(self, machine):
        folder = self.root / machine
        if not folder.is_dir():
            raise StoreError(f"{folder}: no results for machine '{machine}' "
                             f"(known: {', '.join(self.machines()) or 'none'})")
        return sorted(p for p in folder.glob("*.json") if p.name != "machine.json")

    def load_all(self, machine) -> dict:
        """commit -> CommitResults for every readable file of a machine."""
        files = self._files(machine)
        seen = tuple((p, p.stat().st_mtime_ns) for p in files)
        if machine in self._parsed and self._parsed[machine][0] == seen:
            return self._parsed[machine][1]
        by_commit = {}
        for path in files:
            try:
                commit, date, benchmarks = parse_results_file(path)
            except StoreError as e:
                self._problem(Problem(str(path), str(e).split(": ", 1)[1]))
                continue
            found = by_commit.setdefault(commit, CommitResults(machine, commit, date, []))
            found.paths.append(str(path))
            found.date = max(found.date, date)
            for name, entries in benchmarks.items():
                found.benchmarks.setdefault(name, {}).update(entries)
        self._parsed[machine] = (seen, by_commit)
        return by_commit

    def load(self, machine, commit) -> CommitResults | None:
        """Results of one commit (full hash or unique prefix), or None if absent
        (also when the machine has no results yet)."""
        if machine not in self.machines():
            return None
        matches = [r for c, r in self.load_all(machine).items() if c.startswith(commit)]
        if len(matches) > 1:
            raise StoreError(f"{self.root / machine}: commit prefix '{commit}' is ambiguous")
        return matches[0] if matches else None

    # -- sidecars -------------------------------------------------------------

    def sidecar_path(self, machine, commit, kind) -> Path:
        return self.root / machine / f"{commit[:8]}-{kind}.sidecar"

    def write_sidecar(self, machine, commit, kind, data: dict) -> Path:
        """Write once: an existing sidecar is never replaced."""
        path = self.sidecar_path(machine, commit, kind)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(path, "x") as f:
                json.dump(data, f, indent=1)
        except FileExistsError:
            raise StoreError(f"{path}: already recorded; the store is append-only") from None
        return path

    def read_sidecar(self, machine, commit, kind) -> dict | None:
        path = self.sidecar_path(machine, commit, kind)
        if not path.exists():
            return None
        try:
            return json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            self._problem(Problem(str(path), f"corrupt sidecar ({e})"))
            return None

    def _problem(self, problem: Problem):
        if problem not in self.problems:  # loading twice reports once
            self.problems.append(problem)


# -- a results branch -----------------------------------------------------------

def _git(repo, *args, check=True) -> str:
    out = subprocess.run(["git", "-c", "safe.directory=*", "-C", str(repo), *args], capture_output=True, text=True)
    if check and out.returncode != 0:
        raise StoreError(f"git {' '.join(args)} failed in {repo}: {out.stderr.strip()}")
    return out.stdout.strip()


def checkout_branch(repo, branch, path, remote="origin") -> Path:
    """A worktree of the results branch at ``path`` (created empty if the
    branch does not exist yet); its results live in ``path/results``."""
    path = Path(path)
    if (path / ".git").exists():
        _git(path, "pull", "--ff-only", remote, branch, check=False)
        return path
    _git(repo, "worktree", "prune")  # a reused CI workspace may list a worktree that is gone
    _git(repo, "fetch", remote, branch, check=False)
    if _git(repo, "rev-parse", "--verify", "--quiet", f"{remote}/{branch}", check=False):
        _git(repo, "worktree", "add", "-B", branch, str(path), f"{remote}/{branch}")
    elif _git(repo, "rev-parse", "--verify", "--quiet", branch, check=False):
        _git(repo, "worktree", "add", str(path), branch)
    else:  # a new, empty branch (git < 2.42 has no `worktree add --orphan`)
        _git(repo, "worktree", "add", "--detach", str(path))
        _git(path, "checkout", "-q", "--orphan", branch)
        _git(path, "rm", "-rfq", "--ignore-unmatch", ".")
    return path


def commit_branch(path, message, remote="origin", branch=None, push=True) -> bool:
    """Commit new result files in a results-branch worktree (adds only: the
    store never rewrites) and push. Returns False when there was nothing new."""
    status = _git(path, "status", "--porcelain")
    changed = [line for line in status.splitlines() if line]
    modified = [line for line in changed if not line.startswith("??")]
    if modified:
        raise StoreError(f"{path}: results files were modified, not only added: {modified[:3]}; "
                         "the store is append-only")
    if not changed:
        return False
    _git(path, "add", "--all")
    _git(path, "commit", "-q", "-m", message)
    if push:
        branch = branch or _git(path, "rev-parse", "--abbrev-ref", "HEAD")
        _git(path, "push", remote, f"HEAD:{branch}")
    return True


def results_root(given=None) -> Path:
    """The results directory: the one given, else $MLAGATE_RESULTS, else .asv/results."""
    return Path(given or os.environ.get("MLAGATE_RESULTS", ROOT / ".asv" / "results"))

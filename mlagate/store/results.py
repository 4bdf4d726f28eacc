"""The results store: asv's results directory, plus sidecar files beside it.

asv writes one JSON file per machine x commit x environment; ``asv publish``
reads them, so they are the store of record. What asv cannot hold (the run's
GPU, clocks and versions, the build report, asv's own log) goes in sidecars
named ``<commit8>-<kind>.sidecar`` in the same machine folder: asv reads only
``*.json``, so it never sees them. Each results file is read and checked by
results_file; a file that is refused is a problem named with its path. Writing is in files.
"""

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from mlagate.case import case_label
from mlagate.config import ROOT
from mlagate.json_reader import JSONFileError, read_json
from mlagate.names import unknown
from mlagate.store.env import EnvRecordError, RunEnv, parse_env
from mlagate.store.errors import GateError, StoreError, read_store_json
from mlagate.store.files import store_lock, write_once
from mlagate.store.results_file import parse_results_file


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


def _check_machine_json(path: Path):
    """asv's machine.json: asv writes it before any results of the machine, and asv publish needs it."""
    if not path.exists():
        raise StoreError(f"{path}: missing (asv writes it with a machine's first results): the folder "
                         "is damaged; restore machine.json from the results branch")
    data, _ = read_store_json(path, "; restore it from the results branch")
    if not isinstance(data, dict):
        raise StoreError(f"{path}: a JSON {type(data).__name__}, not asv's machine object")


def _merge(found: CommitResults, path, date, benchmarks):
    """Add one results file to its commit's results; a case that another file of the same
    commit holds too is a StoreError (which of the two is the measurement?)."""
    for name, entries in benchmarks.items():
        twice = set(entries) & set(found.benchmarks.get(name, {}))
        if twice:
            raise StoreError(f"{path}: {name} {case_label(min(twice, key=str))} is also in {found.paths[0]}")
    found.paths.append(str(path))
    found.date = max(found.date, date)
    for name, entries in benchmarks.items():
        found.benchmarks.setdefault(name, {}).update(entries)


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
        files = sorted(p for p in folder.glob("*.json") if p.name != "machine.json")
        if files or (folder / "machine.json").exists():  # sidecars alone (build --record) come before asv's
            _check_machine_json(folder / "machine.json")
        return files

    def load_all(self, machine) -> dict:
        """commit -> CommitResults for every readable file of a machine; each unreadable
        one is a problem (path and reason) and skipped."""
        files = self._files(machine)
        seen = tuple((p, p.stat().st_mtime_ns) for p in files)
        if machine in self._parsed and self._parsed[machine][0] == seen:
            return self._parsed[machine][1]
        by_commit = {}
        for path in files:
            try:
                commit, date, benchmarks = parse_results_file(path)
                _merge(by_commit.setdefault(commit, CommitResults(machine, commit, date, [])), path, date, benchmarks)
            except StoreError as e:
                self._problem(Problem(str(path), str(e).removeprefix(f"{path}: ")))
        self._parsed[machine] = (seen, {c: r for c, r in by_commit.items() if r.paths})
        return self._parsed[machine][1]

    def load(self, machine, commit) -> CommitResults | None:
        """Results of one commit (full hash or unique prefix), or None if absent (also when
        the machine has no results yet). Results beside a missing or unreadable machine.json
        are a StoreError: asv writes it first, so the folder is damaged."""
        if not (self.root / machine).is_dir():
            return None
        matches = [r for c, r in self.load_all(machine).items() if c.startswith(commit)]
        if len(matches) > 1:
            raise StoreError(f"{self.root / machine}: commit prefix '{commit}' is ambiguous")
        return matches[0] if matches else None

    def problems_of(self, commit) -> list:
        """The problems with files named for ``commit`` (asv names results files, and mlagate
        sidecars, ``<commit8>-...``): what a corrupt file of that commit would have held."""
        return [p for p in self.problems if Path(p.path).name.startswith(f"{commit[:8]}-")]

    # -- sidecars -------------------------------------------------------------

    def sidecar_path(self, machine, commit, kind) -> Path:
        return self.root / machine / f"{commit[:8]}-{kind}.sidecar"

    def write_sidecar(self, machine, commit, kind, data: dict) -> Path:
        """Write once: an existing sidecar is never replaced. Whole or not at all (write_once),
        under the store lock: it waits for a record in progress."""
        path = self.sidecar_path(machine, commit, kind)
        with store_lock(self.root):
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                write_once(path, json.dumps(data, indent=1).encode())
            except FileExistsError:
                raise StoreError(f"{path}: already recorded; the store is append-only") from None
        return path

    def read_sidecar(self, machine, commit, kind, *, strict=False) -> dict | None:
        """The sidecar's JSON object, or None when there is none. One that cannot be read, is
        not a JSON object or holds an infinite number is a problem (path named) and None; with
        ``strict`` (the gate's reads of the commits it decides) a StoreError."""
        path = self.sidecar_path(machine, commit, kind)
        if not path.exists():
            return None
        try:
            data, infinite = read_json(path)
            reason = (f"corrupt sidecar (a JSON {type(data).__name__}, not an object)" if not isinstance(data, dict)
                      else f"corrupt sidecar ({infinite}: an infinite number)" if infinite else None)
        except JSONFileError as e:  # not UTF-8, not complete JSON, a key twice, too deep
            reason = f"corrupt sidecar ({e.reason})"
        except OSError as e:
            reason = f"corrupt sidecar (unreadable: {e.strerror})"
        return data if reason is None else self._refuse(path, reason, strict)

    def read_env(self, machine, commit, *, strict=False) -> RunEnv | None:
        """The commit's env sidecar typed (store/env.py), or None when there is none. A field of the wrong
        type is a problem (path and key named) and None, as a corrupt sidecar; with ``strict`` a StoreError."""
        data = self.read_sidecar(machine, commit, "env", strict=strict)
        if data is None:
            return None
        try:
            return parse_env(data)
        except EnvRecordError as e:
            return self._refuse(self.sidecar_path(machine, commit, "env"), f"corrupt sidecar ({e})", strict)

    def _refuse(self, path: Path, reason: str, strict: bool) -> None:
        """A sidecar the store cannot use: a StoreError for a strict read, else a problem (reported once)."""
        if strict:
            raise StoreError(f"{path}: {reason}")
        self._problem(Problem(str(path), reason))
        return None

    def _problem(self, problem: Problem):
        if problem not in self.problems:  # loading twice reports once
            self.problems.append(problem)


def cases_problem(data) -> str | None:
    """Why a cases sidecar's JSON is not one (a record writes {"results": [one row per case]}), or None."""
    return None if isinstance(data, dict) and isinstance(data.get("results"), list) else "no list of results"


def refuse_recorded(root: Path, machine: str, commit: str):
    """StoreError if ``commit`` is already in the store on ``machine``: a record (or a merge) of it is refused."""
    if Store(root).load(machine, commit) is not None:
        raise StoreError(f"{Path(root) / machine}: {commit[:8]} is already recorded on '{machine}'; "
                         "the store is append-only (record a new commit)")


def pick_machine(store: Store, machine: str | None, new: bool = False, revs=("<commit>",)) -> str:
    """The machine given, else the store's only one. A machine the store lacks is refused naming those it has
    (``new``: it may be one a record is about to start); with none at all, the error gives the record command
    for each of ``revs``."""
    machines = store.machines()
    # a folder without its machine.json is let through: loading it names the missing file
    new = new or bool(machine and (store.root / machine).is_dir())
    if not machines and not (machine and new):
        record = "; ".join(f"mlagate record --rev {rev} --machine {machine or '<name>'} --results {store.root}"
                           for rev in revs)
        raise GateError(f"{store.root}: no results recorded yet, on any machine. Record first: {record}")
    if machine and machine not in machines and not new:
        raise GateError(f"{store.root}: --machine {unknown('machine', machine, machines).removeprefix('machine ')}")
    if machine:
        return machine
    if len(machines) == 1:
        return machines[0]
    raise GateError(f"{store.root}: {len(machines)} machines recorded ({', '.join(machines)}); pass --machine with "
                    f"one of them, e.g. --machine {machines[0]}")


def results_root(given=None) -> Path:
    """The results directory: the one given, else $MLAGATE_RESULTS, else .asv/results."""
    return Path(given or os.environ.get("MLAGATE_RESULTS", ROOT / ".asv" / "results"))

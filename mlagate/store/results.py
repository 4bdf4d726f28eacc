"""The results store: asv's results directory, plus sidecar files beside it.

asv writes one JSON file per machine x commit x environment; ``asv publish``
reads them, so they are the store of record. What asv cannot hold (the run's
GPU, clocks and versions, the build report, asv's own log) goes in sidecars
named ``<commit8>-<kind>.sidecar`` in the same machine folder: asv reads only
``*.json``, so it never sees them. Results are append-only: a record is staged
elsewhere and moved in whole under the store's lock (write, fsync, link; a journal
lets the next record finish one that was killed); only asv's own
``benchmarks.json``/``machine.json`` are ever replaced. Readers validate every
value and name the file and case of what they refuse.
"""

import ast
import contextlib
import fcntl
import itertools
import json
import math
import os
import re
import secrets
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from mlagate.case import case_label

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


class _Invalid(ValueError):
    """A results file that parses as JSON but holds what asv never writes; the message says where."""


# The benchmarks mlagate records measure positive quantities: seconds, TFLOPs, a ratio of TFLOPs
# (asv_suite.metric gives NaN, never 0, where one does not exist).
POSITIVE = (BENCH_TIME, BENCH_TFLOPS, BENCH_RATIO)
_KEY_TYPES = (str, int, int, str, int)  # PARAM_NAMES' types
_FULL_HASH = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def case_keys(raw_params) -> list:
    """asv's parameter lists (values as Python literals) -> case keys, in asv's result order.
    Files without the heads parameter read as heads = LEGACY_HEADS."""
    if not isinstance(raw_params, list) or not all(isinstance(v, list) for v in raw_params):
        raise _Invalid(f"params must be a list of lists, got {raw_params!r:.80}")
    if len(raw_params) == len(PARAM_NAMES) - 1:
        raw_params = [*raw_params, [repr(LEGACY_HEADS)]]
    if len(raw_params) != len(PARAM_NAMES):
        raise ValueError(f"{len(raw_params)} parameters, expected {', '.join(PARAM_NAMES)}")
    values = [[_param(name, kind, v) for v in vs] for name, kind, vs in zip(PARAM_NAMES, _KEY_TYPES, raw_params)]
    keys = list(itertools.product(*values))
    if len(set(keys)) != len(keys):
        raise _Invalid(f"params repeat a value: {raw_params!r:.120}")
    return keys


def _param(name, kind, text):
    """One parameter value: a Python literal of its type (a case key must match across commits)."""
    value = ast.literal_eval(text) if isinstance(text, str) else None
    if not isinstance(value, kind) or isinstance(value, bool) or (kind is int and value < 1):
        raise _Invalid(f"parameter {name}: {text!r} is not a {'positive integer' if kind is int else 'quoted name'}")
    return value


def _number(value, positive: bool) -> bool:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an int past float's range
        return False
    return finite and (value > 0 or not positive)


def _entry(where: str, value, samples, positive: bool) -> Entry:
    """One case: null is asv's 'failed', NaN its 'skipped'; anything else must be a finite
    number (positive for mlagate's benchmarks), and so must every raw sample."""
    if value is None:
        return Entry("failed")
    if isinstance(value, float) and math.isnan(value):
        return Entry("skipped")
    if not _number(value, positive):
        raise _Invalid(f"{where}: value {value!r:.60} is not a {'positive ' if positive else ''}finite number")
    if samples is None or samples == []:
        return Entry("ok", float(value))
    if not isinstance(samples, list):
        raise _Invalid(f"{where}: samples must be a list, got {samples!r:.60}")
    bad = next((i for i, s in enumerate(samples) if not _number(s, positive)), None)
    if bad is not None:
        raise _Invalid(f"{where}: sample {bad} of {len(samples)} is {samples[bad]!r:.60}, not a "
                       f"{'positive ' if positive else ''}finite number")
    return Entry("ok", float(value), tuple(float(s) for s in samples))


def _column(row, i, name, keys):
    """A per-case column of one benchmark's row: a list with one item per case (or None if absent)."""
    values = row[i] if i is not None and i < len(row) else None
    if values is not None and (not isinstance(values, list) or len(values) != len(keys)):
        raise _Invalid(f"{name}: {len(values) if isinstance(values, list) else type(values).__name__} "
                       f"where {len(keys)} per-case values go")
    return values


def _benchmark(name, row, columns) -> dict:
    if not isinstance(row, list):
        raise _Invalid(f"{name}: a {type(row).__name__} where asv writes a list of columns")
    keys = case_keys(row[columns.index("params")])
    results = _column(row, columns.index("result"), f"{name} results", keys)
    samples = _column(row, columns.index("samples") if "samples" in columns else None, f"{name} samples", keys)
    if results is None:
        raise _Invalid(f"{name}: no results")
    positive = name in POSITIVE
    return {key: _entry(f"{name} {case_label(key)}", value, samples[i] if samples else None, positive)
            for i, (key, value) in enumerate(zip(keys, results))}


def _header(data) -> tuple:
    """(commit, date, result_columns) of a results file, each checked."""
    if not isinstance(data, dict):
        raise _Invalid(f"a JSON {type(data).__name__}, not an object")
    commit, date, columns = data["commit_hash"], data.get("date") or 0, data["result_columns"]
    if not isinstance(commit, str) or not _FULL_HASH.fullmatch(commit):
        raise _Invalid(f"commit_hash {commit!r:.60} is not a full commit hash")
    if not _number(date, positive=False) or date < 0:
        raise _Invalid(f"date {date!r:.60} is not a timestamp")
    if not isinstance(columns, list) or not {"result", "params"} <= set(map(str, columns)):
        raise _Invalid(f"result_columns {columns!r:.80} lack result and params")
    if not isinstance(data["results"], dict):
        raise _Invalid(f"results: a {type(data['results']).__name__}, not an object")
    return commit, int(date), columns


def read_json(path: Path) -> tuple:
    """(data, where its first infinite number is or None): asv and mlagate write none, and
    Python's json reads both Infinity and 1e999 as one. The walk runs only when one was seen."""
    seen = []

    def number(text):
        value = float(text)
        if math.isinf(value):
            seen.append(text)
        return value

    def constant(name):  # NaN, Infinity, -Infinity
        if name != "NaN":
            seen.append(name)
        return float(name)

    data = json.loads(path.read_text(), parse_float=number, parse_constant=constant)
    return data, first_infinity(data) if seen else None


def first_infinity(value, where="") -> str | None:
    """Where the first infinite number in parsed JSON is (asv and mlagate write none), or None."""
    if isinstance(value, float) and math.isinf(value):
        return where or "top level"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        found = first_infinity(v, f"{where}[{k!r}]" if isinstance(k, int) else f"{where}.{k}" if where else k)
        if found:
            return found
    return None


def parse_results_file(path) -> tuple:
    """(commit, date, {bench: {case: Entry}}) from one asv results file; StoreError naming
    the path (and the benchmark and case) if it is not a complete, valid asv results file."""
    path = Path(path)
    try:
        data, infinite = read_json(path)
    except (OSError, ValueError, RecursionError) as e:  # ValueError: bad JSON or not UTF-8
        raise StoreError(f"{path}: not readable JSON ({e})") from None
    try:
        commit, date, columns = _header(data)
        benchmarks = {name: _benchmark(name, row, columns) for name, row in data["results"].items()}
        if infinite:
            raise _Invalid(f"{infinite}: an infinite number")
        return commit, date, benchmarks
    except _Invalid as e:
        raise StoreError(f"{path}: not a valid asv results file: {e}") from None
    except (KeyError, IndexError, TypeError, ValueError, SyntaxError, MemoryError, RecursionError) as e:
        raise StoreError(f"{path}: not a complete asv results file ({type(e).__name__}: {e})") from None


def _check_machine_json(path: Path):
    """asv's machine.json: asv writes it before any results of the machine, and asv publish needs it."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise StoreError(f"{path}: missing (asv writes it with a machine's first results): the folder "
                         "is damaged; restore machine.json from the results branch") from None
    except (OSError, ValueError, RecursionError) as e:
        raise StoreError(f"{path}: not readable JSON ({e}); restore it from the results branch") from None
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
        except (OSError, ValueError, RecursionError) as e:  # ValueError: bad JSON or not UTF-8
            reason = f"corrupt sidecar ({e})"
        if reason is None:
            return data
        if strict:
            raise StoreError(f"{path}: {reason}")
        self._problem(Problem(str(path), reason))
        return None

    def _problem(self, problem: Problem):
        if problem not in self.problems:  # loading twice reports once
            self.problems.append(problem)


# -- writing: one writer per store, whole files, a record installed all or nothing ----

# mlagate's own files in a store start with ".mlagate": asv reads only *.json, the readers
# here only results files and sidecars, and `results push` leaves them out.
CONTROL = ".mlagate"
LOCK = ".mlagate.lock"
JOURNAL = ".mlagate-install.journal"
TEMP = ".mlagate-tmp."
REWRITTEN = ("benchmarks.json", "machine.json")  # asv rewrites these on every run; all else is append-only


@contextlib.contextmanager
def store_lock(root, echo=None):
    """Hold the store's lock (flock on ``root/.mlagate.lock``) while writing to it; a record
    holds it from start to finish. The kernel drops a flock when its holder dies, SIGKILL
    included. Not re-entrant: a second hold in the same process waits forever."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            (echo or _to_stderr)(f"{root / LOCK}: another mlagate process is writing to this store; waiting for it")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _to_stderr(message):
    print(message, file=sys.stderr, flush=True)


def _fsync_dir(folder):
    """Make a new name in ``folder`` durable (a rename or link is in the directory, not the file)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temp_copy(path: Path, data: bytes) -> Path:
    """``data``, complete and on disk, under a control name in ``path``'s folder: a link or
    rename from there is atomic (same filesystem)."""
    tmp = path.parent / f"{TEMP}{path.name}.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # 0o666 less the umask, as open() does
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def write_once(path, data: bytes):
    """Create ``path`` holding ``data``, whole or not at all; FileExistsError if it exists."""
    path = Path(path)
    tmp = _temp_copy(path, data)
    try:
        os.link(tmp, path)  # unlike rename, link never replaces an existing file
    finally:
        os.unlink(tmp)
    _fsync_dir(path.parent)


def write_replace(path, data: bytes):
    """Replace ``path`` with ``data``: a reader sees the old file or the new one, never a mix."""
    path = Path(path)
    tmp = _temp_copy(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _staged(staging: Path, machine: str) -> list:
    """(file, write-once) of a finished record in a staging results directory: the files asv
    rewrites, then the sidecars, then the results files last, so that a reader who finds the
    results finds the rest."""
    folder = staging / machine
    mine = [p for p in folder.iterdir() if not p.name.startswith(CONTROL)] if folder.is_dir() else []
    results = sorted(p for p in mine if p.suffix == ".json" and p.name not in REWRITTEN)
    if not results:
        raise StoreError(f"{folder}: no asv results file to install")
    rewritten = [p for p in (staging / "benchmarks.json", folder / "machine.json") if p.is_file()]
    sidecars = sorted(p for p in mine if p.suffix == ".sidecar")
    return [(p, False) for p in rewritten] + [(p, True) for p in sidecars + results]


def install_record(staging, root, machine) -> Path:
    """Move a record that asv and the sidecars finished in ``staging`` (the record's private
    results_dir) into the store at ``root``; the caller holds the store lock. All or nothing,
    even under SIGKILL: the files first go into one journal, written whole (the commit point),
    then into place, results last; ``recover`` completes a journal that a killed process left.
    Returns the installed results file."""
    staging, root = Path(staging), Path(root)
    files = _staged(staging, machine)
    for path, once in files:
        if once and (root / path.relative_to(staging)).exists():
            raise StoreError(f"{root / path.relative_to(staging)}: already recorded; the store is append-only")
    entries = [{"path": str(p.relative_to(staging)), "once": once, "text": p.read_text(encoding="utf-8")}
               for p, once in files]
    write_once(root / JOURNAL, json.dumps({"files": entries}).encode())
    recover(root)
    return root / files[-1][0].relative_to(staging)


def recover(root) -> bool:
    """With the store lock held: remove the temporary files of killed writers and finish the
    install a killed record left (its journal). True if there was one to finish."""
    root = Path(root)
    for tmp in [*root.glob(f"{TEMP}*"), *root.glob(f"*/{TEMP}*")]:
        tmp.unlink(missing_ok=True)
    journal = root / JOURNAL
    try:
        entries = json.loads(journal.read_bytes())["files"]
    except FileNotFoundError:
        return False
    except (ValueError, KeyError, TypeError) as e:  # written whole, so only damage from outside gets here
        raise StoreError(f"{journal}: unreadable install journal ({e}); move it away to go on") from None
    for entry in entries:
        _install(root, entry)
    os.unlink(journal)
    _fsync_dir(root)
    return True


def _install(root: Path, entry: dict):
    rel = Path(entry["path"])
    if rel.is_absolute() or ".." in rel.parts:
        raise StoreError(f"{root / JOURNAL}: a path outside the store: {rel}")
    dest, data = root / rel, entry["text"].encode("utf-8")
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not entry["once"]:
        return write_replace(dest, data)
    try:
        write_once(dest, data)
    except FileExistsError:  # put there by this journal before a kill: fine; anything else is not ours
        if dest.read_bytes() != data:
            raise StoreError(f"{dest}: exists with other content than the record being installed; "
                             "the store is append-only") from None


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
    """Commit what records added to a results-branch worktree and push. Results files and
    sidecars are append-only: one modified or deleted is refused. benchmarks.json and
    machine.json may change (asv rewrites them on every run). mlagate's control files stay
    out. Returns False when there was nothing new."""
    path = Path(path)
    for lock in path.glob(f"**/{LOCK}"):  # every store mlagate wrote to in this worktree
        with store_lock(lock.parent):
            recover(lock.parent)  # finish a killed record's install rather than push half of it
    changed = _changes(path)
    refused = [name for status, name in changed
               if status not in ("??", "A ") and not (Path(name).name in REWRITTEN and status in (" M", "M ", "MM"))]
    if refused:
        raise StoreError(f"{path / refused[0]}: modified, not only added ({len(refused)} file(s) modified or "
                         f"deleted: {', '.join(refused[:3])}); results files and sidecars are append-only")
    if not changed:
        return False
    _git(path, "add", "--all", "--", ".", f":(exclude,glob)**/{CONTROL}*")
    _git(path, "commit", "-q", "-m", message)
    if push:
        branch = branch or _git(path, "rev-parse", "--abbrev-ref", "HEAD")
        _git(path, "push", remote, f"HEAD:{branch}")
    return True


def _changes(path) -> list:
    """(git status code, path) of every change in a worktree, mlagate's control files left out."""
    out = subprocess.run(["git", "-c", "safe.directory=*", "-C", str(path), "status", "--porcelain", "-z",
                          "--untracked-files=all"], capture_output=True, text=True)
    if out.returncode != 0:
        raise StoreError(f"git status failed in {path}: {out.stderr.strip()}")
    entries, changes = iter(out.stdout.split("\0")), []
    for entry in entries:
        if not entry:
            continue
        status, name = entry[:2], entry[3:]
        if status[0] in "RC":  # a rename or copy: its source path follows
            next(entries, None)
        if not Path(name).name.startswith(CONTROL):
            changes.append((status, name))
    return changes


def results_root(given=None) -> Path:
    """The results directory: the one given, else $MLAGATE_RESULTS, else .asv/results."""
    return Path(given or os.environ.get("MLAGATE_RESULTS", ROOT / ".asv" / "results"))

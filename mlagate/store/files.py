"""Writing to a store: one writer at a time, whole files, a record installed all or nothing.

Results are append-only: a record is staged elsewhere and moved in whole under the
store's lock (write, fsync, link); a journal lets the next record finish one that was
killed. Only asv's own ``benchmarks.json``/``machine.json`` are ever replaced.
"""

import contextlib
import fcntl
import json
import os
import sys
from pathlib import Path

from mlagate.atomic import TEMP, fsync_dir, write_once, write_replace
from mlagate.json_reader import JSONFileError, load
from mlagate.store.errors import StoreError

# mlagate's own files in a store start with ".mlagate": asv reads only *.json, the
# Store only results files and sidecars, and `results push` leaves them out.
CONTROL = ".mlagate"
LOCK = ".mlagate.lock"
JOURNAL = ".mlagate-install.journal"
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
    entries = read_journal(root)
    if entries is None:
        return False
    for entry in entries:
        _install(root, entry)
    os.unlink(root / JOURNAL)
    fsync_dir(root)
    return True


def read_journal(root) -> list | None:
    """The entries of the install journal a killed record left in the store at ``root``, None if there is none;
    StoreError naming it if it is damaged. Reads only: a caller may check before it takes the lock (a refusal
    writes nothing, not even the lock file)."""
    journal = Path(root) / JOURNAL
    try:
        entries = load(journal, "an install journal")["files"]
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise TypeError(f"files: a list of entries, got {entries!r:.60}")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except JSONFileError as e:  # written whole, so only damage from outside gets here
        raise StoreError(f"{journal}: unreadable install journal ({e.reason}); move it away to go on") from None
    except (KeyError, TypeError) as e:
        raise StoreError(f"{journal}: unreadable install journal ({type(e).__name__}: {e}); move it away to "
                         "go on") from None
    return entries


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

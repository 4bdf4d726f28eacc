"""Whole files or none: a new file is written complete and on disk under a temporary name beside
it, then linked (write_once) or renamed (write_replace) into place, and the folder synced. One
way to write for the results store and the committed tuned tables alike."""

import contextlib
import errno
import json
import os
import secrets
import shutil
from pathlib import Path

# A temporary file's name starts with this: a control name that the results store skips and cleans up.
TEMP = ".mlagate-tmp."


def fsync_dir(folder):
    """Make a new name in ``folder`` durable (a rename or link is in the directory, not the file)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_copy(path: Path, data: bytes) -> Path:
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
    tmp = temp_copy(path, data)
    try:
        os.link(tmp, path)  # unlike rename, link never replaces an existing file
    finally:
        os.unlink(tmp)
    fsync_dir(path.parent)


def write_replace(path, data: bytes):
    """Replace ``path`` with ``data``: a reader sees the old file or the new one, never a mix."""
    path = Path(path)
    tmp = temp_copy(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_json(path, data) -> None:
    """``data`` as indented JSON, replacing ``path`` whole (its folder made if need be): a killed writer
    leaves the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_replace(path, json.dumps(data, indent=1, default=str).encode())


# -- output sets: a folder of files that belong together (gate.md and its verdict.json) ---------------------

# In every output set's folder: what output_set may replace. A folder without it that holds anything is not
# ours (`--out .`, a results store) and is refused, never replaced.
SET_MARK = ".mlagate-output"
_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two folders in one step (Linux renameat2 RENAME_EXCHANGE); False where the system has no such call."""
    import ctypes

    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS):  # a filesystem without exchange
        return False
    raise OSError(err, os.strerror(err), str(b))


def _swap_in(fresh: Path, folder: Path) -> None:
    """Put ``fresh`` at ``folder``; what was there ends up at ``fresh`` (or is gone) for the caller to remove."""
    for _ in range(100):  # another writer may put or take a set between two steps: try again
        try:
            os.rename(fresh, folder)  # no folder there, or an empty one
            return
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        try:
            if _exchange(fresh, folder):
                return
        except FileNotFoundError:
            continue
        # No exchange: move the old set aside, then the new one in. A reader may find no folder for a moment,
        # never a mixed one.
        aside = fresh.with_name(fresh.name + ".old")
        try:
            os.rename(folder, aside)
        except FileNotFoundError:
            continue
        shutil.rmtree(aside, ignore_errors=True)
    raise OSError(f"{folder}: could not put the new output set in place (other writers kept replacing it)")


def check_output_folder(folder) -> None:
    """ValueError naming ``folder`` unless output_set may replace it: absent, an empty folder, or an output set."""
    folder = Path(folder)
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise ValueError(f"{folder}: not a folder; an output set replaces a folder whole")
    if folder.is_dir() and not (folder / SET_MARK).is_file() and any(folder.iterdir()):
        raise ValueError(f"{folder}: holds files that are not an mlagate output set (no {SET_MARK}); it would be "
                         "replaced whole: remove it, or write to another folder")


@contextlib.contextmanager
def output_set(folder):
    """A fresh folder beside ``folder`` to write a set of outputs into; on a clean exit it replaces ``folder`` whole
    in one rename, so a reader that opens the folder once (a dir fd, or its files in a loop that checks the set
    did not change) sees the old set or the new one, never files of two runs; concurrent writers each put a whole
    set. On an error nothing changes. Refused before anything is written: check_output_folder."""
    folder = Path(folder)
    check_output_folder(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    fresh = folder.parent / f"{TEMP}{folder.name}.{secrets.token_hex(4)}"
    os.mkdir(fresh)
    try:
        (fresh / SET_MARK).write_bytes(b"")
        yield fresh
        _swap_in(fresh, folder)
        fsync_dir(folder.parent)
    finally:
        shutil.rmtree(fresh, ignore_errors=True)  # the old set, or the unfinished new one


"""Whole files or none: a new file is written complete and on disk under a temporary name beside
it, then linked (write_once) or renamed (write_replace) into place, and the folder synced. One
way to write for the results store and the committed tuned tables alike."""

import json
import os
import secrets
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

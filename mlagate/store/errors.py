"""The two errors the store raises (the CLI catches them without importing the gate's statistics), and the
store's one reading of a JSON file it does not write itself (asv's results and machine files)."""

from mlagate.json_reader import JSONFileError, read_json


class StoreError(Exception):
    """A results file or folder that cannot be used; the message names the path."""


class GateError(Exception):
    """Results the gate cannot decide without (missing commit, machine or platform);
    the message says what to run. Defined here, not in gate.py, so that the CLI can
    catch it without importing the gate's statistics."""


def read_store_json(path, advice: str = "") -> tuple:
    """read_json's (data, first infinite number or None), or a StoreError naming ``path`` and why, ``advice``
    after it."""
    try:
        return read_json(path)
    except JSONFileError as e:
        raise StoreError(f"{path}: not readable JSON ({e.reason}){advice}") from None
    except OSError as e:
        raise StoreError(f"{path}: not readable ({e.strerror}){advice}") from None

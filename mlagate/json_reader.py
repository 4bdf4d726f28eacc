"""The one JSON reader: every JSON file the store or a command reads (results files, sidecars, machine.json,
merge journals, calibration.json, ladder files, noise files, tune candidates) goes through :func:`read_json`,
as perf.yml goes through config.reader's UniqueKeyLoader. A duplicated key is refused (Python's json keeps
the last one: a file holding a row twice would be gated on whichever came second), and so are text that is
not UTF-8, JSON that stops early and nesting deeper than any file mlagate writes; the error names the file.
And the bounds every measured number must sit in, with the check that names the key holding one outside."""

import json
import math
from pathlib import Path

MAX_DEPTH = 64  # mlagate's and asv's files nest under 10 levels; 50k levels would exhaust the parser's stack
# Physical limits of one measured call, one TFLOPs rate and one ratio of two rates: outside them a number was
# not measured, it was written (1e308 seconds, 5e-324 seconds, a vendor ratio of 1e308).
LATENCY_FLOOR_S = 1e-9  # no GPU kernel launch returns within a nanosecond
LATENCY_CEILING_S = 10.0  # no decode kernel call takes 10 s; the grid runner times out long before
TFLOPS_CEILING = 1e5  # 100 PFLOPs from one GPU: 100x an H200's dense fp16 peak
TFLOPS_FLOOR = 1e-6  # a kernel that moved a MFLOP in a second measured nothing
RATIO_CEILING = 100.0  # TileLang 100x faster or slower than the vendor kernel on one point: not a measurement


class JSONFileError(ValueError):
    """A file that is not the JSON it should be: ``path`` and ``reason`` (str: both)."""

    def __init__(self, path, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


class _Duplicate(ValueError):
    pass


def _unique(pairs) -> dict:
    found = {}
    for key, value in pairs:
        if key in found:
            raise _Duplicate(key)
        found[key] = value
    return found


def _too_deep(data) -> bool:
    stack = [(data, 1)]
    while stack:  # not recursive: the walk must not die where the file is deep
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                return True
            stack += [(v, depth + 1) for v in (value.values() if isinstance(value, dict) else value)]
    return False


def parse(text: bytes, path) -> tuple:
    """(data, where its first infinite number is or None) of a file's bytes; JSONFileError naming ``path``.
    NaN is read (asv writes it for a skipped case); infinities are located for the caller to refuse."""
    seen = []

    def number(literal):
        value = float(literal)
        if math.isinf(value):  # Python reads 1e999 as inf
            seen.append(literal)
        return value

    def constant(name):  # NaN, Infinity, -Infinity
        if name != "NaN":
            seen.append(name)
        return float(name)

    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as e:
        raise JSONFileError(path, f"not UTF-8 text (byte {e.start}: {e.reason})") from None
    try:
        data = json.loads(decoded, parse_float=number, parse_constant=constant, object_pairs_hook=_unique)
    except _Duplicate as e:
        raise JSONFileError(path, f"key {e.args[0]!r:.80} appears twice in one object (which one holds?)") from None
    except RecursionError:
        raise JSONFileError(path, f"nested deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as e:
        cut = " (truncated?)" if e.pos >= len(decoded.rstrip()) or e.msg.startswith("Unterminated") else ""
        raise JSONFileError(path, f"not complete JSON{cut}: {e.msg} (line {e.lineno}, column {e.colno})") from None
    if _too_deep(data):
        raise JSONFileError(path, f"nested deeper than {MAX_DEPTH} levels")
    return data, first_infinity(data) if seen else None


def read_json(path) -> tuple:
    """(data, where its first infinite number is or None) of the file at ``path``; OSError as open() raises
    it, JSONFileError (a ValueError) naming the file for anything that is not sound JSON."""
    return parse(Path(path).read_bytes(), path)


def load(path, what: str = "JSON", check=None):
    """The file's data, with an infinite number refused too (JSONFileError naming where it is); ``check(data)``:
    what is wrong with the data (the key, and what it holds) or None, for a JSONFileError "not <what> (...)"."""
    data, infinite = read_json(path)
    if infinite:
        raise JSONFileError(path, f"{infinite}: an infinite number, not {what}")
    problem = check(data) if check else None
    if problem:
        raise JSONFileError(path, f"not {what} ({problem})")
    return data


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


def out_of_bounds(value, low: float, high: float) -> bool:
    """Whether ``value`` is not a real number in [low, high] (NaN, an infinity, a bool, a string, None: out)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return True
    try:
        return not (math.isfinite(value) and low <= value <= high)
    except OverflowError:  # an int past float's range
        return True


def bounded(value, where: str, low: float, high: float, unit: str = "") -> float:
    """``value`` as a float, or a ValueError naming ``where`` and the bounds."""
    if out_of_bounds(value, low, high):
        raise ValueError(f"{where}: {value!r:.40} is not a number within [{low:g}, {high:g}]{unit}")
    return float(value)

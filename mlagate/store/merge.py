"""`mlagate results merge`: the shards of one commit's record (`mlagate record --shard I/N` on N
runners, each into its own store) joined into one record. In a shard's asv results file the other
shards' cases are skipped (NaN), or absent where asv's parameter lists hold only its own points.
Every shard is read with the checked reader (Store); the set must be shards 1..N of one commit,
machine.json and grid; each case comes from the one shard that measured it. The merged file (asv
0.6's ``result_columns`` layout, the shards' file name) is read back case by case, then installed
with the sidecars as `mlagate record` installs: all or nothing, a recorded commit refused. A refusal
names the shard or file and writes nothing in ``into``."""

import ast
import json
import math
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mlagate.case import Case, case_label
from mlagate.json_reader import parse, read_json
from mlagate.measure.shards import parse_shard, runner_shard
from mlagate.store.errors import StoreError, read_store_json
from mlagate.store.files import install_record, read_journal, recover, store_lock
from mlagate.store.results import Store, cases_problem, refuse_recorded
from mlagate.store.results_file import WORKLOAD_BENCH, Entry, _number, case_keys

# Columns of a results row with one value per benchmark; every other column has one per case.
PER_BENCHMARK = ("params", "version", "started_at", "duration", "profile")
# What every shard's results file agrees on: one commit, asv environment and layout.
SAME_HEADER = ("commit_hash", "env_name", "date", "params", "python", "requirements", "env_vars", "result_columns",
               "version")
SAME_GRID = ("grid", "dtypes", "impls", "platform")  # of the env sidecar: the grid the shards split
_FULL_HASH = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


@dataclass
class Shard:
    root: Path
    index: int  # I - 1
    count: int  # N
    path: Path  # its asv results file
    data: dict  # that file's JSON, checked by results_file
    entries: dict  # {benchmark: {case key: Entry}}
    machine_json: bytes
    benchmarks_json: dict
    sidecars: dict  # env, asv-log and cases (None: there is none)
    label: str = ""  # "shard I/N (root)", for messages


def merge_shards(shard_roots: list, into: Path, machine: str, commit: str) -> Path:
    """Merge the shard stores' records of ``commit`` (a full hash) on ``machine`` into the store ``into``;
    the installed results file. Bad input: StoreError or ValueError, nothing written in ``into``."""
    if not _FULL_HASH.fullmatch(commit or "") or not shard_roots:
        raise ValueError(f"a merge takes a full commit hash (not {commit!r:.60}) and at least one shard store")
    shards = sorted((_read(Path(root), machine, commit) for root in shard_roots), key=lambda s: s.index)
    _check_set(shards)
    refuse_recorded(into := Path(into), machine, commit)  # before the lock: a refusal writes nothing
    read_journal(into)  # a damaged journal too, which recover() would refuse under the lock it creates
    with tempfile.TemporaryDirectory(prefix="mlagate-merge-") as tmp:
        staging = _stage(Path(tmp) / "results", machine, commit, shards)
        with store_lock(into):
            recover(into)
            refuse_recorded(into, machine, commit)  # again: a record we waited for may have stored it
            return install_record(staging, into, machine)


def _read(root: Path, machine: str, commit: str) -> Shard:
    """One shard store's record of ``commit``, every file checked."""
    if not root.is_dir():
        raise StoreError(f"{root}: no such shard store")
    store = Store(root)
    found = store.load(machine, commit)  # StoreError for a missing or unreadable machine.json
    if store.problems_of(commit):  # e.g. a truncated results file
        raise StoreError(f"shard store {root}: {store.problems_of(commit)[0]}")
    if found is None:
        held = ", ".join(c[:8] for c in store.load_all(machine)) if (root / machine).is_dir() else ""
        raise StoreError(f"{root / machine}: no results of {commit[:8]} on machine '{machine}' in this shard store "
                         f"(commits: {held or 'none'}; machines: {', '.join(store.machines()) or 'none'})")
    if len(found.paths) != 1:
        raise StoreError(f"{root / machine}: {len(found.paths)} results files of {commit[:8]}; a shard has one")
    machine_path = root / machine / "machine.json"
    if _json_object(machine_path).get("machine") != machine:
        raise StoreError(f"{machine_path}: not asv's machine.json of '{machine}'")
    sidecars = {kind: store.read_sidecar(machine, commit, kind, strict=True) for kind in ("env", "asv-log", "cases")}
    for kind in ("env", "asv-log"):
        if sidecars[kind] is None:
            raise StoreError(f"{store.sidecar_path(machine, commit, kind)}: missing; every record writes it")
    try:
        index, count = parse_shard(sidecars["env"].get("shard") or "1/1")  # no --shard: all of the grid
    except ValueError as e:
        raise StoreError(f"{store.sidecar_path(machine, commit, 'env')}: {e}") from None
    problem = sidecars["cases"] is not None and cases_problem(sidecars["cases"])
    if problem:
        raise StoreError(f"{store.sidecar_path(machine, commit, 'cases')}: {problem}")
    path = Path(found.paths[0])
    return Shard(root, index, count, path, read_json(path)[0], found.benchmarks, machine_path.read_bytes(),
                 _json_object(root / "benchmarks.json"), sidecars, f"shard {index + 1}/{count} ({root})")


def _json_object(path: Path) -> dict:
    data, infinite = read_store_json(path)
    if not isinstance(data, dict) or infinite:
        raise StoreError(f"{path}: not the JSON object asv writes")
    return data


def _check_set(shards: list):
    """Exactly shards 1..N (n shards, each I within 1..n, none twice) of one commit, machine and grid."""
    first, n = shards[0], len(shards)
    for i, s in enumerate(shards):  # sorted by I
        if s.count != n or s.index != i:
            raise StoreError(f"{', '.join(x.label for x in shards)}: not shards 1..{n} of one record, each once "
                             f"(as `mlagate record --shard I/N` wrote them in their env sidecars)")
    for s in shards[1:]:
        for key in SAME_HEADER:
            if s.data.get(key) != first.data.get(key):
                raise StoreError(f"{s.path}: {key} {s.data.get(key)!r:.80} differs from {first.path}'s "
                                 f"{first.data.get(key)!r:.80}")
        mine, theirs = (parse(x.machine_json, x.path.parent / "machine.json")[0] for x in (s, first))
        if mine != theirs:  # one machine name per GPU model: the runners must be the same machine to asv
            keys = sorted(k for k in {*mine, *theirs} if mine.get(k) != theirs.get(k))
            raise StoreError(f"{s.path.parent / 'machine.json'}: differs from {first.label}'s in {', '.join(keys)}")
        here, there = set(s.data["results"]), set(first.data["results"])
        if here != there:
            raise StoreError(f"{s.label}: benchmarks differ from {first.label}'s: only here {sorted(here - there)}, "
                             f"only there {sorted(there - here)}")
        for what, a, b in (("results file name", s.path.name, first.path.name),
                           ("grid", *([x.sidecars["env"].get(k) for k in SAME_GRID] for x in (s, first))),
                           ("cases sidecar", *(x.sidecars["cases"] is not None for x in (s, first)))):
            if a != b:
                raise StoreError(f"{s.label}: {what} {a!r:.120} differs from {first.label}'s {b!r:.120}")


def _union_params(lists: list, where: str) -> list:
    """asv's parameter lists of several shards: per parameter, every value once, in shard order."""
    if len({len(p) if isinstance(p, list) and all(isinstance(v, list) for v in p) else -1 for p in lists}) != 1:
        raise StoreError(f"{where}: the shards have different parameters")
    merged = []
    for values in zip(*lists):
        seen, out = set(), []
        for text in (t for vs in values for t in vs):
            try:
                literal = ast.literal_eval(text)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                raise StoreError(f"{where}: parameter value {text!r:.60} is not a Python literal") from None
            if (type(literal), repr(literal)) not in seen:
                seen.add((type(literal), repr(literal)))
                out.append(text)
        merged.append(out)
    return merged


def _columns(shard: Shard, row: list, columns: list, cases: int) -> dict:
    """{column: value} of one shard's row; a per-case column is None or one value per case."""
    out = {c: row[i] if i < len(row) else None for i, c in enumerate(columns)}
    for c, values in out.items():
        if c not in PER_BENCHMARK and values is not None and (not isinstance(values, list) or len(values) != cases):
            raise StoreError(f"{shard.path}: column {c} of a benchmark is not one value per case")
    return out


def _merge_row(name: str, shards: list, columns: list) -> tuple:
    """(merged row, {case key: Entry} it must read back as) of one benchmark."""
    p, n = columns.index("params"), len(shards)
    rows = [s.data["results"][name] for s in shards]
    read_as = WORKLOAD_BENCH.get(name, name)  # a workload benchmark is read into the dense one
    params = _union_params([r[p] for r in rows], f"{name} in {', '.join(str(s.path) for s in shards)}")
    keys = case_keys(params)
    places = [{key: i for i, key in enumerate(case_keys(r[p]))} for r in rows]
    shard_columns = [_columns(s, r, columns, len(place)) for s, r, place in zip(shards, rows, places)]
    per_case = {c: [None] * len(keys) for c in columns if c not in PER_BENCHMARK}
    per_case["result"] = [math.nan] * len(keys)  # asv's "skipped", for a case no shard holds
    expected = {}
    for j, key in enumerate(keys):
        held = [(s, place[key], cols) for s, place, cols in zip(shards, places, shard_columns) if key in place]
        measured = [h for h in held if h[0].entries[read_as][key].status != "skipped"]
        if len(measured) > 1:
            raise StoreError(f"{name} {case_label(key)}: measured by {measured[0][0].label} and by "
                             f"{measured[1][0].label}; one runner measures each grid point")
        owner = runner_shard(Case(*key), n)
        if measured and measured[0][0].index != owner:
            raise StoreError(f"{measured[0][0].path}: {name} {case_label(key)} is measured in shard "
                             f"{measured[0][0].index + 1}/{n}, but its grid point is shard {owner + 1}/{n}'s")
        source = (measured or held)[:1]  # the measuring shard; a skipped case from the first that has it
        expected[key] = source[0][0].entries[read_as][key] if source else Entry("skipped")
        for s, i, cols in source:
            for c in per_case:
                per_case[c][j] = cols[c][i] if cols[c] is not None else None
    merged = []
    for c in columns:
        values = [cols[c] for cols in shard_columns if cols[c] is not None]
        if (c in ("started_at", "duration") and not all(_number(v, positive=False) for v in values)) or (
                c == "version" and len({json.dumps(v) for v in values}) > 1):  # one benchmark code
            raise StoreError(f"{name}: the shards' {c} values {values!r:.120} do not merge")
        merged.append(params if c == "params" else min(values, default=None) if c == "started_at"
                      else max(values, default=None) if c == "duration"  # the shards ran side by side
                      else (values or [None])[0] if c in PER_BENCHMARK
                      else None if all(v is None for v in per_case[c]) else per_case[c])
    while merged and merged[-1] is None:  # as asv writes a row
        merged.pop()
    return merged, expected


def _benchmarks_json(shards: list) -> dict:
    """asv's benchmarks.json: the same in every shard but for the parameter lists, which are joined."""
    def but_params(data):
        return {k: {**v, "params": None} if isinstance(v, dict) else v for k, v in data.items()}

    first = shards[0]
    for s in shards:
        if but_params(s.benchmarks_json) != but_params(first.benchmarks_json):
            raise StoreError(f"{s.root / 'benchmarks.json'}: differs from {first.label}'s in more than params")
    return {name: {**spec, "params": _union_params([s.benchmarks_json[name]["params"] for s in shards], name)}
            if isinstance(spec, dict) and spec.get("params") else spec for name, spec in first.benchmarks_json.items()}


def _durations(shards: list) -> dict:
    found = [s.data.get("durations") or {} for s in shards]
    for s, d in zip(shards, found):
        if not isinstance(d, dict) or not all(_number(v, positive=False) for v in d.values()):
            raise StoreError(f"{s.path}: durations {d!r:.80} are not numbers")
    return {k: max(d[k] for d in found if k in d) for d in found for k in d}  # the shards ran side by side


def _stage(staging: Path, machine: str, commit: str, shards: list) -> Path:
    """The merged record in a private results directory, read back and compared case by case."""
    first = shards[0]
    results, expected = {}, {}
    for name in first.data["results"]:
        results[name], cases = _merge_row(name, shards, first.data["result_columns"])
        expected.setdefault(WORKLOAD_BENCH.get(name, name), {}).update(cases)
    (folder := staging / machine).mkdir(parents=True)
    (staging / "benchmarks.json").write_text(json.dumps(_benchmarks_json(shards), indent=4))
    (folder / "machine.json").write_bytes(first.machine_json)
    (folder / first.path.name).write_text(json.dumps({**first.data, "results": results,
                                                      "durations": _durations(shards)}))
    store, envs = Store(staging), [s.sidecars["env"] for s in shards]
    logs = [(f"{s.index + 1}/{s.count}", s, s.sidecars["asv-log"]) for s in shards]
    store.write_sidecar(machine, commit, "env", {**envs[0], "shards": envs})
    code = next((g["exit_code"] for *_, g in logs if g.get("exit_code")), 0)  # the first shard's that failed
    store.write_sidecar(machine, commit, "asv-log", {"command": logs[0][2].get("command"), "exit_code": code,
        "log": "".join(f"===== shard {i} ({s.root}) =====\n{g.get('log', '')}\n" for i, s, g in logs),
        "shards": [{"shard": i, "command": g.get("command"), "exit_code": g.get("exit_code")} for i, _, g in logs]})
    if first.sidecars["cases"] is not None:  # every shard has one, or none has (_check_set)
        store.write_sidecar(machine, commit, "cases", {"results": [r for s in shards
                                                                   for r in s.sidecars["cases"]["results"]]})
    back = store.load(machine, commit)
    if store.problems or back is None or back.benchmarks != expected:
        raise StoreError(f"{folder}: the merged results do not read back as the shards' ({store.problems})")
    return staging

"""Does each window's SM clock explain the untouched cases' noise? Their changes raw, normalized, binned (CPU).

Raw, clock-normalized and within-clock-bin changes between recorded commits.

For every commit of a results store against ``--base`` (default: the one recorded first), per TileLang case both
recorded, the change three ways (mlagate/decide/clock_compare.py); then, over the cases no ``--touched`` pattern
names (case labels as gate.md prints them, fnmatch), the rms change of each way in percentage points. An untouched
case's change is the runner's noise: the way with the smallest rms reads it best. Then each record's shift (the
mean raw change of its untouched cases) and the raw rms without it: what a record as a whole adds. A ladder's stores are
OUT/rep*/results; its base is `ladder.json`'s `base`.

    python -m lab.clock_study demo/results --touched 'tilelang-seesaw h=* float16'
"""

import argparse
import fnmatch
import math
import statistics


def study(store_path: str, base: str | None, touched: list) -> dict:
    from mlagate.case import case_label
    from mlagate.decide import clock_compare
    from mlagate.store.env import RunEnv
    from mlagate.store.results import Store
    from mlagate.store.results_file import BENCH_TIME

    store = Store(store_path)
    rows = {}
    for machine in store.machines():
        recorded = store.load_all(machine)
        first = next((c for c in recorded if base and c.startswith(base)), None) if base else \
            min(recorded, key=lambda c: (store.read_env(machine, c) or RunEnv()).time or "")
        if first is None:
            raise SystemExit(f"{store_path}: no commit {base} recorded on {machine}")
        sidecars = {c: store.read_sidecar(machine, c, "cases") for c in recorded}
        for commit, results in recorded.items():
            if commit == first:
                continue
            keys = [k for k in results.entries(BENCH_TIME) if k[0].startswith("tilelang")]
            changed = clock_compare.case_changes(recorded[first], sidecars[first], results, sidecars[commit], keys)
            for key, got in changed.items():
                label = case_label(key)
                rows[(machine, commit[:10], label)] = (got, any(fnmatch.fnmatchcase(label, p) for p in touched))
    return rows


def main(argv=None):
    from mlagate.decide.clock_compare import VARIANTS, rms_pp

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("store", help="a results store (mlagate record --results)")
    p.add_argument("--base", default=None, help="the commit (prefix) every other one is compared with")
    p.add_argument("--touched", action="append", default=[], help="labels of cases the change touched (fnmatch)")
    args = p.parse_args(argv)
    rows = study(args.store, args.base, args.touched)
    print("| commit | case | touched | " + " | ".join(VARIANTS) + " |\n|---|---|---|" + "---:|" * len(VARIANTS))
    for (_, commit, label), (got, touched) in sorted(rows.items()):
        cells = " | ".join("–" if got[v] is None else f"{100 * got[v]:+.2f}%" for v in VARIANTS)
        print(f"| {commit} | {label} | {'yes' if touched else ''} | {cells} |")
    untouched = [got for got, touched in rows.values() if not touched]
    print(f"\nuntouched cases: {len(untouched)}; rms change (pp): " + ", ".join(
        f"{v} {rms_pp(g[v] for g in untouched):.3f} over {sum(g[v] is not None for g in untouched)}"
        if any(g[v] is not None for g in untouched) else f"{v} –" for v in VARIANTS))
    clocked = [g for g in untouched if g["normalized"] is not None and abs(g["normalized"] - g["raw"]) > 1e-9]
    print(f"of them, {len(clocked)} read differently normalized (their windows read more than one clock)")
    # what the record as a whole adds: the mean raw change of each commit's untouched cases, and the rest
    by_record = {}
    for (machine, commit, _), (got, touched) in rows.items():
        if not touched and got["raw"] is not None:
            by_record.setdefault((machine, commit), []).append(got["raw"])
    shifts = {record: statistics.mean(changes) for record, changes in by_record.items()}
    if shifts:
        print("each record's shift (its untouched cases' mean raw change): " + ", ".join(
            f"{commit} {100 * shift:+.3f} pp" for (_, commit), shift in sorted(shifts.items())))
        rest = rms_pp(change - shifts[record] for record, changes in by_record.items() for change in changes)
        print(f"raw rms with each record's shift taken out: {rest:.3f} pp")
        print(spread_line(rows, shifts))


def spread_line(rows: dict, shifts: dict) -> str:
    """Each untouched case's sd over every record, the base's (change 0) included, pooled over the cases: unlike
    the changes against one base, it does not carry that base's own noise, so two stores (an A/B) compare on it."""
    per_case = {}
    for (machine, commit, label), (got, touched) in rows.items():
        if not touched and got["raw"] is not None:
            per_case.setdefault((machine, label), {})[(machine, commit)] = got["raw"]
    pooled = []
    for shifted in (False, True):
        ss = dof = 0
        for changes in per_case.values():
            values = [1.0] + [1 + x - (shifts[r] if shifted else 0) for r, x in changes.items()]
            mean = statistics.mean(values)
            ss += sum((v / mean - 1) ** 2 for v in values)
            dof += len(values) - 1
        pooled.append(100 * math.sqrt(ss / (dof - (len(shifts) if shifted else 0))))
    return (f"each untouched case's sd over the {len(shifts) + 1} records, pooled over {len(per_case)} cases: "
            f"{pooled[0]:.3f} %, {pooled[1]:.3f} % with each record's shift taken out (x sqrt 2: the rms change "
            "expected between two records)")


if __name__ == "__main__":
    main()

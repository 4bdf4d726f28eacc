"""Does the SM clock explain the noise between two records? Three ways to read one case's change (pure).

A record keeps, per sampling window, the SM clock read while it ran and how many timed calls it holds
(``Samples.windows``, the cases sidecar); the samples themselves (asv's results) are the kept windows' times in
order. From those, head against base:

* **raw**: median(head) / median(base) - 1, what the latency rule reads;
* **normalized**: every time scaled by its window's clock over a reference (time x clock / reference: cycles,
  as nvbench reads a change), the same reference on both sides;
* **binned**: per SM clock both sides read, the change of the medians of the windows at that clock, averaged
  weighted by the samples the smaller side holds there; None where the sides share no clock.

Which of them, if any, the gate uses is docs/gate.md's ("Clocks and the latency rule"), measured on untouched
cases with lab/clock_study.py and the ladder's table.
"""

import math

import numpy as np

VARIANTS = ("raw", "normalized", "binned")


def windowed(samples, windows) -> list:
    """[(SM clock MHz or None, times)] per kept window, in order; None where the windows do not add up to the
    samples (a record written before windows were kept, or a foreign one)."""
    kept = [w for w in windows or () if isinstance(w, dict) and w.get("kept", True)]
    counts = [w.get("samples") for w in kept]
    if not kept or not all(isinstance(c, int) and c > 0 for c in counts) or sum(counts) != len(samples):
        return None
    out, start = [], 0
    for w, count in zip(kept, counts):
        clock = w.get("sm_mhz")
        out.append((float(clock) if isinstance(clock, (int, float)) and clock > 0 else None,
                    np.asarray(samples[start:start + count], dtype=float)))
        start += count
    return out


def _normalized(parts, reference: float):
    if any(clock is None for clock, _ in parts):
        return None
    return np.concatenate([times * clock / reference for clock, times in parts])


def _binned(base_parts, head_parts):
    bins = {}
    for side, parts in ((0, base_parts), (1, head_parts)):
        for clock, times in parts:
            if clock is not None:
                bins.setdefault(clock, ([], []))[side].append(times)
    changes, weights = [], []
    for b, h in bins.values():
        if b and h:
            b, h = np.concatenate(b), np.concatenate(h)
            changes.append(math.log(np.median(h) / np.median(b)))
            weights.append(min(len(b), len(h)))
    return math.exp(np.average(changes, weights=weights)) - 1 if changes else None


def changes(base_samples, base_windows, head_samples, head_windows) -> dict:
    """{variant: head/base - 1 or None} for one case (VARIANTS); normalized and binned are None without
    per-window clocks on both sides."""
    raw = float(np.median(head_samples) / np.median(base_samples)) - 1
    b, h = windowed(base_samples, base_windows), windowed(head_samples, head_windows)
    if b is None or h is None:
        return {"raw": raw, "normalized": None, "binned": None}
    reference = max((c for c, _ in (*b, *h) if c is not None), default=None)  # no clock: _normalized gives None
    nb, nh = _normalized(b, reference), _normalized(h, reference)
    normalized = None if nb is None or nh is None else float(np.median(nh) / np.median(nb)) - 1
    return {"raw": raw, "normalized": normalized, "binned": _binned(b, h)}


def rms_pp(values) -> float | None:
    """Root mean square of changes, in percentage points (untouched cases: each change is its own error)."""
    values = [v for v in values if v is not None]
    return math.sqrt(sum((100 * v) ** 2 for v in values) / len(values)) if values else None


def case_changes(base, base_cases: dict | None, head, head_cases: dict | None, keys) -> dict:
    """{case key: changes(...)} for ``keys`` both records measured: ``base``/``head`` are store CommitResults,
    ``*_cases`` their cases sidecars (the windows); a case without windows on a side reads raw only."""
    from mlagate.case import Case
    from mlagate.store.results_file import BENCH_TIME

    def windows(sidecar):  # keyed as the store keys a case (Case.key: a row without q_len or kv_dtype reads as before)
        rows = (sidecar or {}).get("results") if isinstance(sidecar, dict) else None
        return {Case.from_dict(r).key:
                (r.get("samples") or {}).get("windows") for r in rows or () if isinstance(r, dict)}

    bw, hw = windows(base_cases), windows(head_cases)
    b_t, h_t = base.entries(BENCH_TIME), head.entries(BENCH_TIME)
    out = {}
    for key in keys:
        b, h = b_t.get(tuple(key)), h_t.get(tuple(key))
        if b is not None and h is not None and b.status == h.status == "ok" and b.samples and h.samples:
            out[tuple(key)] = changes(b.samples, bw.get(tuple(key)), h.samples, hw.get(tuple(key)))
    return out


def store_changes(store, machine: str, base: str, head: str, cases) -> dict:
    """case_changes of two commits of a results store (store.results.Store), for a verdict's ``cases``."""
    sides = [(store.load(machine, c), store.read_sidecar(machine, c, "cases")) for c in (base, head)]
    keys = [cv.case for cv in cases]
    return case_changes(*sides[0], *sides[1], keys) if all(r is not None for r, _ in sides) else {}

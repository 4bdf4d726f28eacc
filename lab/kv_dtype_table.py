"""Whether the fp8 KV cache is faster than the same kernel on a 16-bit cache, and its ratio to the vendor's fp8 (CPU).

    python -m lab.kv_dtype_table docs/bench/h200-2026-12-07-fp8-quick.csv [--impl tilelang-hopper]

From one `mlagate bench --out` CSV holding both caches of a TileLang implementation (and the fp8 vendor kernel), per
point (workload, s_q, batch, heads, seqlen): the median µs on the 16-bit cache (the query's dtype) and on each fp8
cache, fp8 over 16-bit (>1: the fp8 cache is faster), the vendor's fp8 median and the CSV's vendor ratio (TileLang
TFLOPs over the vendor's on the same point, GPU and formats). The formats are the CSV's: the query's dtype and the
cache's. Issue 44 asks for fp8 faster than 16-bit at 16 heads and at least 0.95x the vendor's fp8 path.
"""

import argparse
import csv


def table(path: str, impl: str) -> list:
    """[(point, query dtype, cache dtype, 16-bit µs, fp8 µs, fp8 over 16-bit, vendor, vendor µs, ratio)]."""
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["status"] == "ok"]
    point = ("workload", "q_len", "batch", "heads", "seqlen", "dtype")
    us = {(r["impl"], r["kv_dtype"], *(r[k] for k in point)): float(r["median_ms"]) * 1e3 for r in rows}
    out = []
    for r in rows:
        if r["impl"] != impl or r["kv_dtype"] == r["dtype"]:
            continue
        at = tuple(r[k] for k in point)
        base = us.get((impl, r["dtype"], *at))
        vendor = next(((name, t) for (name, kv, *p), t in us.items()
                       if kv == r["kv_dtype"] and tuple(p) == at and not name.startswith("tilelang")), (None, None))
        fp8 = float(r["median_ms"]) * 1e3
        out.append((at[:5], r["dtype"], r["kv_dtype"], base, fp8, base / fp8 if base else None, *vendor,
                    float(r["vendor_ratio"]) if r["vendor_ratio"] else None))
    return sorted(out, key=lambda row: (row[0][0], int(row[0][1]), int(row[0][3]), int(row[0][2])))


def markdown(rows) -> str:
    def num(x, form):
        return "—" if x is None else format(x, form)

    lines = ["| workload | s_q | b | heads | seqlen | query / cache | µs, 16-bit cache | µs, fp8 cache "
             "| fp8 over 16-bit | vendor (its µs) | TileLang / vendor TFLOPs |",
             "|---|---:|---:|---:|---:|---|---:|---:|---:|---|---:|"]
    for (workload, q_len, b, heads, seqlen), dtype, kv, base, fp8, speedup, vendor, vendor_us, ratio in rows:
        lines.append(f"| {workload} | {q_len} | {b} | {heads} | {seqlen} | {dtype} / {kv} | {num(base, '.1f')} | "
                     f"{fp8:.1f} | {num(speedup, '.2f')}x | {vendor or '—'} ({num(vendor_us, '.1f')}) | "
                     f"{num(ratio, '.2f')} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv", help="an `mlagate bench --out` CSV with both caches of --impl")
    p.add_argument("--impl", default="tilelang-hopper", help="the TileLang implementation (default tilelang-hopper)")
    args = p.parse_args(argv)
    try:
        rows = table(args.csv, args.impl)
    except (OSError, KeyError, ValueError) as e:  # named, no traceback: a missing column, a cell not a number
        raise SystemExit(f"{args.csv}: not an `mlagate bench --out` CSV ({type(e).__name__}: {e})") from None
    if not rows:
        raise SystemExit(f"{args.csv}: no fp8-cache rows of {args.impl}")
    print(markdown(rows))
    faster = sum(1 for r in rows if r[5] and r[5] > 1)
    print(f"\nfp8 faster than the 16-bit cache at {faster} of {len(rows)} points; " + "; ".join(
        f"{what} {min(xs):.2f}-{max(xs):.2f}x" for what, xs in (
            ("fp8 over 16-bit", [r[5] for r in rows if r[5]]),
            ("TileLang over the vendor's fp8", [r[8] for r in rows if r[8]])) if xs))


if __name__ == "__main__":
    main()

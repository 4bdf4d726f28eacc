"""Where a kernel's warps wait, from Nsight Compute's per-instruction SASS page (CPU).

The seesaw's gap to FlashMLA at 128 heads and short caches is an open question. This reads the SASS page that
lab/ncu_probe.py's profile gives (`ncu -i K.ncu-rep --page source --csv --print-source sass | xz > K.sass.csv.xz`:
line 0 names the kernel, then a CSV of one row per instruction) and prints the warp-stall samples by reason, then
the instructions holding the most samples with the reason that dominates each. An mbarrier wait shows as `@!P BRA`
after a SYNCS...TRYWAIT (reason long_sb); a wgmma wait as WARPGROUP.DEPBAR (reason barrier).

    python -m lab.ncu_stalls main_no_split.sass.csv.xz [--top 25]
"""

import argparse
import collections
import csv
import io
import lzma

SAMPLES = "Warp Stall Sampling (All Samples)"


def rows(path):
    lines = lzma.open(path, "rt").read().splitlines()
    return list(csv.DictReader(io.StringIO("\n".join(lines[1:]))))  # line 0 names the kernel


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sass_csv_xz")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    table = rows(args.sass_csv_xz)
    reasons = [c for c in table[0] if c.startswith("stall_") and "Not Issued" not in c]
    count = lambda row, col: int(row[col] or 0)  # noqa: E731
    total = sum(count(r, SAMPLES) for r in table)
    by_reason = collections.Counter({c[6:]: sum(count(r, c) for r in table) for c in reasons})
    print(f"{total} samples over {len(table)} instructions")
    for reason, n in by_reason.most_common(10):
        print(f"  {reason:18s} {n:6d} {100 * n / total:5.1f}%")
    top = sorted(range(len(table)), key=lambda i: -count(table[i], SAMPLES))[:args.top]
    for i in sorted(top):
        row = table[i]
        reason = max(reasons, key=lambda c: count(row, c))[6:]
        before = table[i - 1]["Source"].strip()[:48] if i else ""
        print(f"{i:5d} {count(row, SAMPLES):5d} {100 * count(row, SAMPLES) / total:4.1f}% {reason:12s} "
              f"{row['Source'].strip()[:52]:52s} | after: {before}")


if __name__ == "__main__":
    main()

"""Top SASS instructions by warp-stall samples from `ncu --page source --csv --print-source sass`.

Usage: python3 bench/ncu_top_stalls.py source.csv [N]
"""
import csv
import sys


def main():
    lines = open(sys.argv[1], newline="").read().splitlines()
    if lines and lines[0].startswith('"Kernel Name"'):  # ncu puts the kernel's name on a line of its own
        lines = lines[1:]
    rows = list(csv.DictReader(lines))
    if not rows:
        sys.exit("no rows in " + sys.argv[1])
    keys = list(rows[0].keys())
    samp = next((k for k in keys if k.startswith("Warp Stall Sampling (All")), None)
    src = next((k for k in keys if k == "Source"), keys[1])
    if samp is None:
        sys.exit("no warp stall sampling column; columns: " + ", ".join(keys))

    def val(r):
        try:
            return float(r[samp].replace(",", ""))
        except ValueError:
            return 0.0

    total = sum(val(r) for r in rows)
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    stall_cols = [k for k in keys if k.startswith("stall_") and "Not Issued" not in k]
    for i, r in enumerate(sorted(range(len(rows)), key=lambda i: -val(rows[i]))[:n]):
        rr = rows[r]
        top = sorted(stall_cols, key=lambda k: -float(rr[k].replace(",", "") or 0))[:2]
        why = " ".join(f"{k[6:]}={rr[k]}" for k in top if float(rr[k].replace(",", "") or 0) > 0)
        print(f"{100 * val(rr) / max(total, 1):5.1f}%  #{r:5d}  {rr[src][:80]:80s} {why}")
    print(f"total samples {total:.0f} over {len(rows)} instructions")


if __name__ == "__main__":
    main()

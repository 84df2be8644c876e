"""Per case of a bench_grouped_gemm JSON: the fastest tile overall and of each kernel family.

Usage: python3 bench/tile_summary.py bench_decode.json
"""
import json
import sys


def family(tile):
    # the kind is the name's part after _c<ctas>_ (a chunk suffix such as _ch128 may follow)
    parts = tile.split("_")
    if "ws" in parts:
        return "ws mma.sync" if "sync" in parts else "ws wgmma"
    if "wgmma" in parts:
        return "all-warps wgmma"
    return "all-warps mma.sync"


def main():
    d = json.load(open(sys.argv[1]))
    for c in d["cases"]:
        ts = sorted(c["tiles"], key=lambda t: t["median_ms"])
        if not ts:
            continue
        fl = c["floor_ms"]
        line = f'{c["gemm"]:6s} T={c["tokens"]:5d} floor {fl:.4f} ms | best {ts[0]["tile"]} {ts[0]["median_ms"]:.4f} ({100 * fl / ts[0]["median_ms"]:.0f}%)'
        seen = set()
        for t in ts:
            f = family(t["tile"])
            if f in seen:
                continue
            seen.add(f)
            line += f' | {f}: {t["median_ms"]:.4f}'
        print(line)


if __name__ == "__main__":
    main()

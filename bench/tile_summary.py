import json,sys
d=json.load(open(sys.argv[1]))
for c in d["cases"]:
    ts=sorted(c["tiles"],key=lambda t:t["median_ms"])
    fl=c["floor_ms"]
    aw=[t for t in ts if not t["tile"].endswith("_ws") and "_ws" not in t["tile"] and "wgmma" not in t["tile"]]
    sy=[t for t in ts if t["tile"].endswith("_ws_sync")]
    s=f'{c["gemm"]} T={c["tokens"]:5d} floor {fl:.4f} | best {ts[0]["tile"]} {ts[0]["median_ms"]:.4f} ({100*fl/ts[0]["median_ms"]:.0f}%)'
    if aw: s+=f' | all-warps {aw[0]["tile"]} {aw[0]["median_ms"]:.4f} ({100*fl/aw[0]["median_ms"]:.0f}%)'
    if sy: s+=f' | ws_sync {sy[0]["tile"]} {sy[0]["median_ms"]:.4f} ({100*fl/sy[0]["median_ms"]:.0f}%)'
    print(s)

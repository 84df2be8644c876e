#!/usr/bin/env python3
"""Peers measured in the same run: torch._grouped_mm on bf16 weights, same routing
(the per-expert row counts written by bench_decode_gemm). Benchmark tool only:
PyTorch is never part of fp4moe itself. Prints the combined table last."""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--in", dest="inp", required=True, help="bench_decode_gemm JSON")
    ap.add_argument("--out", required=True, help="JSON with torch timings added")
    ap.add_argument("--table", default=None, help="write the markdown table here too")
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    rep = json.load(open(args.inp))
    try:
        import torch
    except ImportError:
        print("peers.py: PyTorch not present: torch peer skipped")
        torch = None

    if torch is not None:
        dev = torch.device("cuda")
        E = rep["experts"]
        weights = {}
        for c in rep["cases"]:
            key = (c["n"], c["k"])
            if key not in weights:
                weights.clear()
                torch.cuda.empty_cache()
                g = torch.Generator(device=dev).manual_seed(7)
                # [E, N, K] contiguous, used as [E, K, N] (column-major B), as MoE layers store them
                weights[key] = (torch.randn(E, c["n"], c["k"], device=dev, dtype=torch.bfloat16, generator=g) * 0.02)
            w = weights[key]
            counts = torch.tensor(c["counts"], dtype=torch.int32)
            offs = torch.cumsum(counts, 0).to(torch.int32).to(dev)
            x = torch.randn(c["pairs"], c["k"], device=dev, dtype=torch.bfloat16)
            fn = lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)
            try:
                for _ in range(5):
                    fn()
                torch.cuda.synchronize()
                ts = []
                for _ in range(args.reps):
                    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    s.record()
                    fn()
                    e.record()
                    e.synchronize()
                    ts.append(s.elapsed_time(e))
                ts.sort()
                c["torch_grouped_mm_ms"] = ts[len(ts) // 2]
                c["speedup_vs_torch"] = c["torch_grouped_mm_ms"] / c["median_ms"]
            except Exception as ex:  # report, never hide
                c["torch_error"] = str(ex).splitlines()[0]
                print(f"peers.py: torch._grouped_mm failed for {c['gemm']} T={c['tokens']}: {c['torch_error']}")
        rep["torch_version"] = torch.__version__
    json.dump(rep, open(args.out, "w"), indent=1)

    ce = rep["ceilings"]
    lines = [
        f"GPU: {rep['device']}; ceilings this run: copy {ce['copy_tb_per_s']:.2f} TB/s, cuBLAS bf16 {ce['bf16_tflop_per_s']:.0f} TFLOP/s",
        "",
        "| GEMM | T | active experts | fp4moe ms | TB/s | TFLOP/s | floor ms | % of floor | tile | vs cuBLAS bf16 | vs torch._grouped_mm |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in rep["cases"]:
        tv = f"{c['speedup_vs_torch']:.2f}x" if "speedup_vs_torch" in c else c.get("torch_error", "n/a")[:30]
        lines.append(
            f"| {c['gemm']} N={c['n']} K={c['k']} | {c['tokens']} | {c['active_experts']} | {c['median_ms']:.4f} "
            f"| {c['tb_per_s']:.2f} | {c['tflop_per_s']:.0f} | {c['floor_ms']:.4f} | {100 * c['floor_fraction']:.0f}% "
            f"| {c['best_tile']} | {c['speedup_vs_cublas']:.2f}x | {tv} |")
    table = "\n".join(lines)
    if args.table:
        open(args.table, "w").write(table + "\n")
    print(table)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Peers measured in the same run, on the same routing, for fp4moe's benchmarks:
torch._grouped_mm on bf16 weights for each expert GEMM, and a PyTorch bf16 MoE
layer (permute, grouped_mm, SiLU * up, weighted index_add, dense shared expert).
Benchmark tool only: PyTorch is never part of fp4moe.

  --layer-in F : the JSON of `fp4moe bench` (adds torch_ms / speedup_vs_torch to
                 each GEMM and to the layer), written to --out.
  --in F       : the JSON of bench_grouped_gemm (one GEMM per case); prints a table.
"""
import argparse
import json
import sys
import time


def timed(torch, fn, reps, graph=False, warm_seconds=0.0):
    """Median ms per call. graph=True replays fn captured in a CUDA graph, as
    fp4moe's GEMMs are timed (no host launch cost); falls back to eager calls
    where fn cannot be captured (data-dependent shapes). warm_seconds: calls
    back to back for that long first (the steady state at the power cap, as
    fp4moe's benchmarks time their headline)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    run = fn
    if graph:
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                fn()
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn()
            run = g.replay
            run()
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - any capture failure: time eagerly, say so
            print(f"peers: CUDA graph capture failed ({exc}); timing eagerly", file=sys.stderr)
            run = fn
    start = time.monotonic()
    while time.monotonic() - start < warm_seconds:
        for _ in range(16):
            run()
        torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        run()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    ts.sort()
    return ts[len(ts) // 2]


def grouped_mm_ms(torch, w, counts, k, reps, rotation=None, warm_seconds=0.0):
    """torch._grouped_mm per launch; with `rotation` (a list of count vectors,
    bench_grouped_gemm --rotate) one launch per routing, back to back in one graph."""
    dev = w.device
    routings = rotation or [counts]
    offs = [torch.cumsum(torch.tensor(c, dtype=torch.int32), 0).to(torch.int32).to(dev) for c in routings]
    x = torch.randn(int(sum(routings[0])), k, device=dev, dtype=torch.bfloat16)
    wt = w.transpose(-2, -1)

    def run():
        for o in offs:
            torch._grouped_mm(x, wt, offs=o)

    return timed(torch, run, reps, graph=True, warm_seconds=warm_seconds) / len(routings)


def torch_moe_layer(torch, w13, w2, ws13, ws2, x, ids, wts):
    """The PyTorch bf16 MoE layer: permute, grouped_mm, SiLU * up, weighted
    index_add, dense shared expert (ws13/ws2, or None). w13 [E, 2I, H] (gate;
    up), w2 [E, H, I]; ids int64 [T, k], wts fp32 [T, k]."""
    T, H = x.shape
    E, two_i, _ = w13.shape
    I, k = two_i // 2, ids.shape[1]
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    offs = torch.cumsum(torch.bincount(flat, minlength=E), 0).to(torch.int32)
    tok = order // k
    y1 = torch._grouped_mm(x[tok], w13.transpose(-2, -1), offs=offs)
    a2 = torch.nn.functional.silu(y1[:, :I]) * y1[:, I:]
    y2 = torch._grouped_mm(a2, w2.transpose(-2, -1), offs=offs)
    out = torch.zeros(T, H, device=x.device, dtype=torch.float32)
    out.index_add_(0, tok, y2.float() * wts.reshape(-1)[order, None])
    if ws13 is not None:
        Is = ws13.shape[0] // 2
        s1 = x @ ws13.t()
        out += ((torch.nn.functional.silu(s1[:, :Is]) * s1[:, Is:]) @ ws2.t()).float()
    return out.to(torch.bfloat16)


def layer_peers(torch, rep, reps):
    """The torch peers of `fp4moe bench`'s cases, at the steady state the run timed fp4moe at."""
    warm = rep.get("timing", {}).get("warm_seconds", 0.0)
    dev = torch.device("cuda")
    H, I, E, k, Is = rep["hidden"], rep["intermediate"], rep["experts"], rep["top_k"], rep["shared_intermediate"]
    g = torch.Generator(device=dev).manual_seed(3)
    w13 = torch.randn(E, 2 * I, H, device=dev, dtype=torch.bfloat16, generator=g) * 0.02
    w2 = torch.randn(E, H, I, device=dev, dtype=torch.bfloat16, generator=g) * 0.02
    ws13 = torch.randn(2 * Is, H, device=dev, dtype=torch.bfloat16, generator=g) * 0.02 if Is else None
    ws2 = torch.randn(H, Is, device=dev, dtype=torch.bfloat16, generator=g) * 0.02 if Is else None

    def layer(x, ids, wts):
        return torch_moe_layer(torch, w13, w2, ws13, ws2, x, ids, wts)

    for c in rep["cases"]:
        T = c["tokens"]
        try:
            for gm, w in zip(c["gemms"], (w13, w2)):
                if "time" not in gm:
                    continue
                gm["torch_ms"] = grouped_mm_ms(torch, w, gm["counts"], gm["k"], reps, warm_seconds=warm)
                gm["speedup_vs_torch"] = gm["torch_ms"] / gm["time"]["median_ms"]
            x = torch.randn(T, H, device=dev, dtype=torch.bfloat16)
            ids = torch.tensor(c["topk_ids"], dtype=torch.int64, device=dev).reshape(T, k)
            wts = torch.tensor(c["topk_weights"], dtype=torch.float32, device=dev).reshape(T, k)
            c["layer"]["torch_ms"] = timed(torch, lambda: layer(x, ids, wts), reps, warm_seconds=warm)
            c["layer"]["speedup_vs_torch"] = c["layer"]["torch_ms"] / c["layer"]["time"]["median_ms"]
        except Exception as ex:  # report, never hide
            c["torch_error"] = str(ex).splitlines()[0]
            print(f"peers.py: torch failed at T={T}: {c['torch_error']}")
    rep["torch_version"] = torch.__version__


def gemm_peers(torch, rep, reps):
    """torch._grouped_mm for bench_grouped_gemm's cases, at the steady state the run timed fp4moe at."""
    warm = rep.get("warm_seconds", 0.0)
    dev = torch.device("cuda")
    E = rep["experts"]
    weights = {}
    for c in rep["cases"]:
        key = (c["n"], c["k"])
        if key not in weights:
            weights.clear()
            torch.cuda.empty_cache()
            g = torch.Generator(device=dev).manual_seed(7)
            weights[key] = torch.randn(E, c["n"], c["k"], device=dev, dtype=torch.bfloat16, generator=g) * 0.02
        try:
            c["torch_grouped_mm_ms"] = grouped_mm_ms(torch, weights[key], c["counts"], c["k"], reps,
                                                     c.get("counts_rotation"), warm_seconds=warm)
            c["speedup_vs_torch"] = c["torch_grouped_mm_ms"] / c["median_ms"]
        except Exception as ex:
            c["torch_error"] = str(ex).splitlines()[0]
            print(f"peers.py: torch._grouped_mm failed for {c['gemm']} T={c['tokens']}: {c['torch_error']}")
    rep["torch_version"] = torch.__version__


def gemm_table(rep):
    ce = rep["ceilings"]
    beside = [c["bf16_tflop_per_s_adjacent"] for c in rep["cases"] if "bf16_tflop_per_s_adjacent" in c]
    beside = f", {min(beside):.0f}..{max(beside):.0f} beside the cases" if beside else ""
    start = (f" (at the start: {ce['copy_tb_per_s_burst']:.2f} TB/s, {ce['bf16_tflop_per_s_burst']:.0f} TFLOP/s)"
             if "copy_tb_per_s_burst" in ce else "")
    lines = [f"GPU: {rep['device']}; ceilings this run at steady state: copy {ce['copy_tb_per_s']:.2f} TB/s, "
             f"cuBLAS bf16 {ce['bf16_tflop_per_s']:.0f} TFLOP/s{start}{beside}",
             "", "| GEMM | T | active experts | launches per graph | fp4moe ms | one launch per graph ms | TB/s | TFLOP/s | % of dense bf16 (steady-state ceiling / beside the case) | floor ms | % of floor | tile | vs cuBLAS bf16 | vs torch._grouped_mm | vs best all-warps tile |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in rep["cases"]:
        act = c['active_experts']
        act = f"{act:.0f}" if isinstance(act, (int, float)) else act
        tv = f"{c['speedup_vs_torch']:.2f}x" if "speedup_vs_torch" in c else c.get("torch_error", "n/a")[:30]
        adj = f"{100 * c['dense_fraction_adjacent']:.0f}%" if "dense_fraction_adjacent" in c else "n/a"
        lines.append(f"| {c['gemm']} N={c['n']} K={c['k']} | {c['tokens']} | {act} | {c.get('routings', 1)} | {c['median_ms']:.4f} | {c.get('single_launch_ms', c['median_ms']):.4f} "
                     f"| {c['tb_per_s']:.2f} | {c['tflop_per_s']:.0f} | {100 * c.get('dense_fraction', 0):.0f}% / {adj} | {c['floor_ms']:.4f} | {100 * c['floor_fraction']:.0f}% "
                     f"| {c['best_tile']} | {c['speedup_vs_cublas']:.2f}x | {tv} | {c.get('speedup_vs_all_warps', c.get('speedup_vs_mma_sync', 0)):.2f}x |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--in", dest="inp", help="bench_grouped_gemm JSON")
    ap.add_argument("--layer-in", help="fp4moe bench JSON")
    ap.add_argument("--out", required=True)
    ap.add_argument("--table", default=None)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    if bool(a.inp) == bool(a.layer_in):
        sys.exit("peers.py: give exactly one of --in and --layer-in")
    rep = json.load(open(a.layer_in or a.inp))
    try:
        import torch
        if not torch.cuda.is_available():
            raise ImportError("no CUDA device for PyTorch")
    except ImportError as ex:
        torch = None
        print(f"peers.py: PyTorch peer skipped ({ex})")
    if torch is not None:
        (layer_peers if a.layer_in else gemm_peers)(torch, rep, a.reps)
    json.dump(rep, open(a.out, "w"), indent=None if a.layer_in else 1)
    if a.inp:
        table = gemm_table(rep)
        if a.table:
            open(a.table, "w").write(table + "\n")
        print(table)


if __name__ == "__main__":
    main()

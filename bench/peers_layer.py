#!/usr/bin/env python3
"""PyTorch bf16 MoE layer on the same routing as bench_moe_layer (its JSON),
measured in the same run: permute by expert, torch._grouped_mm for the two
expert GEMMs, SiLU * up, weighted index_add, plus the dense shared expert.
A peer for benchmarks only; PyTorch is never part of fp4moe. Prints a table last."""
import argparse
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--in", dest="inp", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--table", default=None)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    rep = json.load(open(a.inp))
    try:
        import torch
    except ImportError:
        torch = None
        print("peers_layer.py: PyTorch not present: torch peer skipped")
    if torch is not None:
        dev = torch.device("cuda")
        H, I, E, k, Is = rep["hidden"], rep["intermediate"], rep["experts"], rep["top_k"], rep["shared_intermediate"]
        g = torch.Generator(device=dev).manual_seed(3)
        w13 = torch.randn(E, 2 * I, H, device=dev, dtype=torch.bfloat16, generator=g) * 0.02
        w2 = torch.randn(E, H, I, device=dev, dtype=torch.bfloat16, generator=g) * 0.02
        ws13 = torch.randn(2 * Is, H, device=dev, dtype=torch.bfloat16, generator=g) * 0.02 if Is else None
        ws2 = torch.randn(H, Is, device=dev, dtype=torch.bfloat16, generator=g) * 0.02 if Is else None

        def layer(x, ids, wts):
            T = x.shape[0]
            flat = ids.reshape(-1)
            order = torch.argsort(flat, stable=True)
            counts = torch.bincount(flat, minlength=E)
            offs = torch.cumsum(counts, 0).to(torch.int32)
            tok = order // k
            y1 = torch._grouped_mm(x[tok], w13.transpose(-2, -1), offs=offs)
            a2 = torch.nn.functional.silu(y1[:, :I]) * y1[:, I:]
            y2 = torch._grouped_mm(a2, w2.transpose(-2, -1), offs=offs)
            out = torch.zeros(T, H, device=dev, dtype=torch.float32)
            out.index_add_(0, tok, y2.float() * wts.reshape(-1)[order, None])
            if Is:
                s1 = x @ ws13.t()
                out += ((torch.nn.functional.silu(s1[:, :Is]) * s1[:, Is:]) @ ws2.t()).float()
            return out.to(torch.bfloat16)

        for c in rep["cases"]:
            T = c["tokens"]
            x = torch.randn(T, H, device=dev, dtype=torch.bfloat16)
            ids = torch.tensor(c["topk_ids"], dtype=torch.int64, device=dev).reshape(T, k)
            wts = torch.tensor(c["topk_weights"], dtype=torch.float32, device=dev).reshape(T, k)
            try:
                for _ in range(3):
                    layer(x, ids, wts)
                torch.cuda.synchronize()
                ts = []
                for _ in range(a.reps):
                    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    s.record()
                    layer(x, ids, wts)
                    e.record()
                    e.synchronize()
                    ts.append(s.elapsed_time(e))
                ts.sort()
                c["torch_layer_ms"] = ts[len(ts) // 2]
                c["speedup_vs_torch"] = c["torch_layer_ms"] / c["graph_ms"]
            except Exception as ex:
                c["torch_error"] = str(ex).splitlines()[0]
                print(f"peers_layer.py: torch layer failed at T={T}: {c['torch_error']}")
        rep["torch_version"] = torch.__version__
    for c in rep["cases"]:
        c.pop("topk_ids", None)
        c.pop("topk_weights", None)
    json.dump(rep, open(a.out, "w"), indent=1)
    ce = rep["ceilings"]
    lines = [f"GPU: {rep['device']}; model {rep['model']} ({rep['finalize']} finalize); ceilings this run: "
             f"copy {ce['copy_tb_per_s']:.2f} TB/s, cuBLAS bf16 {ce['bf16_tflop_per_s']:.0f} TFLOP/s", "",
             "| T | active experts | layer ms (graph) | eager ms | expert GEMMs ms | routing+permute+finalize | TB/s | % of floor | vs PyTorch bf16 layer |",
             "|---|---|---|---|---|---|---|---|---|"]
    for c in rep["cases"]:
        tv = f"{c['speedup_vs_torch']:.2f}x" if "speedup_vs_torch" in c else c.get("torch_error", "n/a")[:30]
        lines.append(f"| {c['tokens']} | {c['active_experts']} | {c['graph_ms']:.4f} | {c['eager_ms']:.4f} | "
                     f"{c['gemms_ms']:.4f} | {100 * c['overhead_fraction']:.1f}% | {c['tb_per_s']:.2f} | "
                     f"{100 * c['floor_fraction']:.0f}% | {tv} |")
    table = "\n".join(lines)
    if a.table:
        open(a.table, "w").write(table + "\n")
    print(table)


if __name__ == "__main__":
    main()

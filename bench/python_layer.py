"""The MoE layer through Python, with its peers in the same run: fp4moe through
torch.ops.fp4moe (router logits in, the layer's own router), the PyTorch bf16
layer (bench/peer_engines/torch_bf16.py: routing, permute, grouped_mm, SwiGLU, weighted sum) on the same logits, and
torch._grouped_mm for each expert GEMM; the ceilings (device copy bandwidth,
bf16 matmul rate) measured by PyTorch at the start of the run and at steady
state. Each figure is the steady state (after --warm-seconds of back-to-back
calls, as `fp4moe bench` times its headline), against the steady-state
ceilings. Random FP4
weights drawn directly on the GPU (codes, e4m3 block scales around 1,
weight_scale_2 2^-8), GLM-5 shapes by default. Reproduces the README's layer
table from Python: python3 bench/python_layer.py [--model glm5] [--tokens ...]."""

import argparse
import json
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import fp4moe  # noqa: E402
import fp4moe.torch as ft  # noqa: E402
from peer_engines import torch_bf16  # noqa: E402
from peer_engines.base import Case, MoeProblem, Projection  # noqa: E402
from peer_engines.reference import DequantizedProjection  # noqa: E402
from peer_engines.timing import timed as timed_graph  # noqa: E402


def timed(torch_, fn, reps, graph=False, warm_seconds=0.0):
    return timed_graph(torch_, fn, reps, graph=graph, warm_seconds=warm_seconds)[0]


def random_fp4(E, n, k, g):
    codes = torch.randint(0, 256, (E, n, k // 2), dtype=torch.uint8, device="cuda", generator=g)
    # e4m3 bytes with exponent field 6..8 (scales 0.5 to 3.75): realistic, never zero
    scales = (torch.randint(6 * 8, 9 * 8, (E, n, k // 16), dtype=torch.uint8, device="cuda", generator=g))
    return codes, scales.view(torch.float8_e4m3fn)


def sensors():
    """The SM clock (MHz) and board power (W) now, where PyTorch can read them (through pynvml); else None."""
    try:
        return {"sm_clock_mhz": torch.cuda.clock_rate(), "power_w": torch.cuda.power_draw() / 1000}
    except Exception:  # noqa: BLE001 - no pynvml on this machine: the columns say n/a
        return None


def ceilings(warm_seconds):
    """Copy and bf16 matmul rates at the start of the run (`_burst`) and after warm_seconds back to back."""
    n = 1 << 30
    a, b = torch.empty(n, dtype=torch.uint8, device="cuda"), torch.empty(n, dtype=torch.uint8, device="cuda")
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    copy = lambda: b.copy_(a)  # noqa: E731
    mm = lambda: x @ x  # noqa: E731
    copy_rate = lambda ms: 2 * n / ms / 1e9  # noqa: E731
    mm_rate = lambda ms: 2 * 8192 ** 3 / ms / 1e9  # noqa: E731
    c = {"copy_tb_per_s_burst": copy_rate(timed(torch, copy, 20)), "bf16_tflop_per_s_burst": mm_rate(timed(torch, mm, 20))}
    c["copy_tb_per_s"] = copy_rate(timed(torch, copy, 20, warm_seconds=warm_seconds))
    c["bf16_tflop_per_s"] = mm_rate(timed(torch, mm, 20, warm_seconds=warm_seconds))
    c["warm_seconds"] = warm_seconds
    del a, b, x
    return c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="glm5")
    ap.add_argument("--tokens", default="1,8,32,128,512,1024,2048")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warm-seconds", type=float, default=2.0,
                    help="back-to-back calls before each timing (the steady state); 0: none")
    ap.add_argument("--out")
    a = ap.parse_args()
    if not (a.warm_seconds >= 0 and a.warm_seconds < float("inf")):
        ap.error(f"--warm-seconds {a.warm_seconds} must be finite and at least 0")
    tokens = [int(t) for t in a.tokens.split(",")]
    cfg = fp4moe.preset(a.model)
    E, H, I, k = cfg["num_experts"], cfg["hidden"], cfg["intermediate"], cfg["top_k"]
    Is = cfg["shared_intermediate"] if cfg["shared_expert"] else 0
    g = torch.Generator(device="cuda").manual_seed(1)
    w13, s13 = random_fp4(E, 2 * I, H, g)
    w2, s2 = random_fp4(E, H, I, g)
    g13 = torch.full((E, 2), 2.0 ** -8, device="cuda")
    g2 = torch.full((E,), 2.0 ** -8, device="cuda")
    shared = None
    if Is:
        a13, b13 = random_fp4(1, 2 * Is, H, g)
        a2_, b2 = random_fp4(1, H, Is, g)
        shared = (a13, b13, torch.full((1, 2), 2.0 ** -8, device="cuda"), a2_, b2, torch.full((1,), 2.0 ** -8, device="cuda"))
    bias = torch.randn(E, device="cuda", generator=g) * 0.05 if cfg["use_correction_bias"] else None
    layer = fp4moe.MoeLayer.from_tensors(cfg, w13, s13, g13, w2, s2, g2, shared_expert=shared,
                                         e_score_correction_bias=bias, max_tokens=max(tokens), finalize="split")
    lid = ft.register(layer)
    ceil = ceilings(a.warm_seconds)
    # the torch peer (bench/peer_engines/torch_bf16.py) on the same weights, dequantized once
    u8 = lambda t: t.view(torch.uint8)  # noqa: E731
    problem = MoeProblem(
        model=a.model, format="nvfp4", hidden=H, intermediate=I, experts=E, top_k=k,
        w13=Projection(w13, u8(s13), g13), w2=Projection(w2, u8(s2), g2),
        shared13=Projection(shared[0], u8(shared[1]), shared[2]) if Is else None,
        shared2=Projection(shared[3], u8(shared[4]), shared[5]) if Is else None,
        scoring=cfg["scoring"], renormalize=cfg["renormalize"], n_group=cfg["n_group"], topk_group=cfg["topk_group"],
        correction_bias=bias, routed_scaling_factor=cfg["routed_scaling_factor"])
    dq = {n: DequantizedProjection(torch, getattr(problem, n), "nvfp4") for n in ("w13", "w2", "shared13", "shared2")
          if getattr(problem, n) is not None}
    peer = torch_bf16.make(problem, torch_bf16.variants(problem)[0], dequantized=dq)
    fp4_bytes_per_expert = (2 * I * H + H * I) * (0.5 + 1 / 16)
    rows = []
    for T in tokens:
        x = torch.randn(T, H, device="cuda", generator=g).to(torch.bfloat16)
        logits = torch.randn(T, E, device="cuda", generator=g)
        out = torch.empty_like(x)
        w = a.warm_seconds
        fp4_ms = timed(torch, lambda: torch.ops.fp4moe.moe_forward_out(x, logits, lid, out), a.reps, graph=True,
                       warm_seconds=w)
        fp4_sensors = sensors()
        ids, wts = layer.topk(T)
        active = int(torch.unique(ids).numel())
        case = Case(tokens=T, x=x, logits=logits, topk_ids=ids.to(torch.int32), topk_weights=wts,
                    a2=torch.randn(T * k, I, device="cuda", generator=g).to(torch.bfloat16))
        torch_ms = timed(torch, peer.layer(case).run, a.reps, graph=True, warm_seconds=w)
        g1_ms = timed(torch, peer.gemm1(case).run, a.reps, graph=True, warm_seconds=w)
        g2_ms = timed(torch, peer.gemm2(case).run, a.reps, graph=True, warm_seconds=w)
        nbytes = active * fp4_bytes_per_expert + (3 * Is * H * (0.5 + 1 / 16) if Is else 0) + 2 * 2 * T * H
        flops = 2 * T * (k * 3 * I * H + 3 * Is * H)
        floor_ms = max(nbytes / (ceil["copy_tb_per_s"] * 1e9), flops / (ceil["bf16_tflop_per_s"] * 1e9))
        rows.append({"tokens": T, "active_experts": active, "fp4moe_ms": fp4_ms, "floor_ms": floor_ms,
                     "floor_fraction": floor_ms / fp4_ms, "sensors": fp4_sensors, "torch_layer_ms": torch_ms,
                     "speedup_vs_torch_layer": torch_ms / fp4_ms, "torch_gemm1_ms": g1_ms,
                     "torch_gemm2_ms": g2_ms})
    print(f"{torch.cuda.get_device_name()}: {a.model} through torch.ops.fp4moe; ceilings this run at steady state: copy "
          f"{ceil['copy_tb_per_s']:.2f} TB/s, bf16 matmul {ceil['bf16_tflop_per_s']:.0f} TFLOP/s (at the start: "
          f"{ceil['copy_tb_per_s_burst']:.2f}, {ceil['bf16_tflop_per_s_burst']:.0f}); each time the median of {a.reps} "
          f"after {a.warm_seconds:g} s back to back (fp4moe: CUDA-graph replays)")
    print("\n| T | active experts | fp4moe layer ms | % of floor | SM MHz, W after it | PyTorch bf16 layer ms | vs PyTorch layer | "
          "torch GEMM1 (gather + grouped_mm) + GEMM2 ms |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        sens = f"{r['sensors']['sm_clock_mhz']:.0f}, {r['sensors']['power_w']:.0f}" if r["sensors"] else "n/a"
        print(f"| {r['tokens']} | {r['active_experts']} | {r['fp4moe_ms']:.4f} | {100 * r['floor_fraction']:.0f}% | {sens} | "
              f"{r['torch_layer_ms']:.4f} | {r['speedup_vs_torch_layer']:.2f}x | "
              f"{r['torch_gemm1_ms'] + r['torch_gemm2_ms']:.4f} |")
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps({"device": torch.cuda.get_device_name(), "model": a.model,
                                                   "ceilings": ceil, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

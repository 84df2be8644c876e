"""The MoE layer through Python, with its peers in the same run: fp4moe through
torch.ops.fp4moe (router logits in, the layer's own router), the PyTorch bf16
layer (bench/peers.py's torch_moe_layer) on the same routing, and
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
from peers import grouped_mm_ms, timed, torch_moe_layer  # noqa: E402


def random_fp4(E, n, k, g):
    codes = torch.randint(0, 256, (E, n, k // 2), dtype=torch.uint8, device="cuda", generator=g)
    # e4m3 bytes with exponent field 6..8 (scales 0.5 to 3.75): realistic, never zero
    scales = (torch.randint(6 * 8, 9 * 8, (E, n, k // 16), dtype=torch.uint8, device="cuda", generator=g))
    return codes, scales.view(torch.float8_e4m3fn)


def dequantize_bf16(codes, scales, scale_2):
    """bf16 weights [E, n, k] for the peers (the same values, up to bf16 rounding of the global scale)."""
    lut = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], device="cuda")
    E, n, kh = codes.shape
    out = torch.empty(E, n, kh * 2, dtype=torch.bfloat16, device="cuda")
    for e in range(E):  # one expert at a time: the fp32 intermediate stays small
        v = torch.stack([lut[(codes[e] & 15).long()], lut[(codes[e] >> 4).long()]], -1).reshape(n, kh * 2)
        s = scales[e].float().repeat_interleave(16, dim=1) * scale_2[e].reshape(-1)[0]
        out[e] = (v * s).to(torch.bfloat16)
    return out


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
    # the peers' bf16 weights: the same values
    pw13, pw2 = dequantize_bf16(w13, s13, g13[:, :1]), dequantize_bf16(w2, s2, g2)
    pws13 = dequantize_bf16(shared[0], shared[1], shared[2][:, :1])[0] if Is else None
    pws2 = dequantize_bf16(shared[3], shared[4], shared[5])[0] if Is else None
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
        torch_ms = timed(torch, lambda: torch_moe_layer(torch, pw13, pw2, pws13, pws2, x, ids.long(), wts), a.reps,
                         warm_seconds=w)
        counts = torch.bincount(ids.reshape(-1).long(), minlength=E).tolist()
        g1_ms = grouped_mm_ms(torch, pw13, counts, H, a.reps, warm_seconds=w)
        g2_ms = grouped_mm_ms(torch, pw2, counts, I, a.reps, warm_seconds=w)
        nbytes = active * fp4_bytes_per_expert + (3 * Is * H * (0.5 + 1 / 16) if Is else 0) + 2 * 2 * T * H
        flops = 2 * T * (k * 3 * I * H + 3 * Is * H)
        floor_ms = max(nbytes / (ceil["copy_tb_per_s"] * 1e9), flops / (ceil["bf16_tflop_per_s"] * 1e9))
        rows.append({"tokens": T, "active_experts": active, "fp4moe_ms": fp4_ms, "floor_ms": floor_ms,
                     "floor_fraction": floor_ms / fp4_ms, "sensors": fp4_sensors, "torch_layer_ms": torch_ms,
                     "speedup_vs_torch_layer": torch_ms / fp4_ms, "torch_grouped_mm_gemm1_ms": g1_ms,
                     "torch_grouped_mm_gemm2_ms": g2_ms})
    print(f"{torch.cuda.get_device_name()}: {a.model} through torch.ops.fp4moe; ceilings this run at steady state: copy "
          f"{ceil['copy_tb_per_s']:.2f} TB/s, bf16 matmul {ceil['bf16_tflop_per_s']:.0f} TFLOP/s (at the start: "
          f"{ceil['copy_tb_per_s_burst']:.2f}, {ceil['bf16_tflop_per_s_burst']:.0f}); each time the median of {a.reps} "
          f"after {a.warm_seconds:g} s back to back (fp4moe: CUDA-graph replays)")
    print("\n| T | active experts | fp4moe layer ms | % of floor | SM MHz, W after it | PyTorch bf16 layer ms | vs PyTorch layer | "
          "torch._grouped_mm GEMM1 + GEMM2 ms |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        sens = f"{r['sensors']['sm_clock_mhz']:.0f}, {r['sensors']['power_w']:.0f}" if r["sensors"] else "n/a"
        print(f"| {r['tokens']} | {r['active_experts']} | {r['fp4moe_ms']:.4f} | {100 * r['floor_fraction']:.0f}% | {sens} | "
              f"{r['torch_layer_ms']:.4f} | {r['speedup_vs_torch_layer']:.2f}x | "
              f"{r['torch_grouped_mm_gemm1_ms'] + r['torch_grouped_mm_gemm2_ms']:.4f} |")
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps({"device": torch.cuda.get_device_name(), "model": a.model,
                                                   "ceilings": ceil, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

"""Host time per eager forward at T = 1 through Python: the native tvm-ffi call,
fp4moe.MoeLayer.__call__, and torch.ops.fp4moe.moe_forward(_out), each timed
per call as bench_host_overhead times the C++ layer's forward (the stream
synchronised every 16 calls, so the launch queue never fills; median of 2000
calls). scripts/gpu-run.sh python runs bench_host_overhead on the same preset
beside it: the difference is what Python and PyTorch add."""

import argparse
import json
import statistics
import sys
import time
import pathlib

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "python" / "gpu"))
import fp4moe  # noqa: E402
import fp4moe.torch as ft  # noqa: E402
from weights import layer_from, make  # noqa: E402


def per_call_us(f, calls=2000):
    for _ in range(32):
        f()
    torch.cuda.synchronize()
    t = []
    for i in range(calls):
        a = time.perf_counter()
        f()
        t.append((time.perf_counter() - a) * 1e6)
        if i % 16 == 15:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return statistics.median(t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="glm5-small")
    ap.add_argument("--out")
    a = ap.parse_args()
    cfg, t = make(a.model, seed=1)
    layer = layer_from(cfg, t, max_tokens=64, finalize="split")
    lid = ft.register(layer)
    x = torch.randn(1, cfg["hidden"], device="cuda").to(torch.bfloat16)
    logits = torch.randn(1, cfg["num_experts"], device="cuda")
    out = torch.empty_like(x)
    native = fp4moe._native.fn("layer_forward")
    s = torch.cuda.current_stream().cuda_stream
    variants = {
        "native tvm-ffi call": lambda: native(layer._native, x, logits, out, s),
        "MoeLayer.__call__": lambda: layer(x, logits, out=out),
        "torch.ops.fp4moe.moe_forward_out": lambda: torch.ops.fp4moe.moe_forward_out(x, logits, lid, out),
        "torch.ops.fp4moe.moe_forward": lambda: torch.ops.fp4moe.moe_forward(x, logits, lid),
    }
    # rounds that rotate through the variants, so a drift of the host or the clock moves all alike
    samples = {k: [] for k in variants}
    for _ in range(5):
        for k, f in variants.items():
            samples[k].append(per_call_us(f, calls=400))
    rows = {k: statistics.median(v) for k, v in samples.items()}
    print(f"{a.model}, T = 1: host time per eager forward (us), median of 5 rotated rounds of 400 calls")
    for k, v in rows.items():
        print(f"  {k:<36} {v:7.2f}")
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps({"model": a.model, "tokens": 1, "host_us": rows}, indent=2))


if __name__ == "__main__":
    main()

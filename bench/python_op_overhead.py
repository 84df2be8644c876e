"""Host time per eager forward at T = 1 through Python: the native tvm-ffi call,
fp4moe.MoeLayer.__call__, and torch.ops.fp4moe.moe_forward_out, each over
batches of 100 calls issued back to back (fewer launches than the launch queue
holds, so the loop's wall time is host time), median over batches. The C++
layer's own host time per forward is bench_host_overhead's figure."""

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


def per_call_us(f, batches=30, calls=100):
    for _ in range(calls):
        f()
    torch.cuda.synchronize()
    t = []
    for _ in range(batches):
        a = time.perf_counter()
        for _ in range(calls):
            f()
        t.append((time.perf_counter() - a) / calls * 1e6)
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
    rows = {
        "native tvm-ffi call": per_call_us(lambda: native(layer._native, x, logits, out, s)),
        "MoeLayer.__call__": per_call_us(lambda: layer(x, logits, out=out)),
        "torch.ops.fp4moe.moe_forward_out": per_call_us(lambda: torch.ops.fp4moe.moe_forward_out(x, logits, lid, out)),
        "torch.ops.fp4moe.moe_forward": per_call_us(lambda: torch.ops.fp4moe.moe_forward(x, logits, lid)),
    }
    print(f"{a.model}, T = 1: host time per eager forward (us), median of 30 batches of 100 calls")
    for k, v in rows.items():
        print(f"  {k:<36} {v:7.2f}")
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps({"model": a.model, "tokens": 1, "host_us": rows}, indent=2))


if __name__ == "__main__":
    main()

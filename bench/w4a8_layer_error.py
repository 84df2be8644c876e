#!/usr/bin/env python3
"""How much FP8 activations alone cost gpt-oss's layer: its shape (H = I = 2880,
top-4, clamped SwiGLU, biases), MXFP4 weights drawn as `fp4moe bench` draws
them (random_moe_weights' full-size path, src/reference/random_weights.cpp)
and held exactly in fp32, the activations of both GEMMs quantized to e4m3 per
token or per 128-wide K block as fp4moe's src/format/fp8_rows.hpp does;
norm-wise relative error of the layer's output against the unquantized one.
The yardstick for a W4A8 engine's layer error (docs/fp8.md). Needs numpy and
ml_dtypes (both on the GPU machine).
    python3 bench/w4a8_layer_error.py [--tokens 64] [--experts 8] [--seed 0]"""
import argparse

import ml_dtypes
import numpy as np


# fp4moe's full-size random weights (random_matrix_direct): a random byte per
# code, its low 7 bits pick the e2m1 magnitude with these counts out of 128 (a
# quantized Gaussian whose block max is ~6), its top bit the sign; e8m0 block
# scales of 32 values, 2^ceil(log2(U[0.5, 2))) lowered by round(log2(2.5
# sqrt(K))) exponents, so the weights' std is ~1/sqrt(K).
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], np.float32)
MAGNITUDE_COUNTS = (20, 32, 25, 19, 13, 12, 6, 1)


def mxfp4_weights(rng, shape):
    """[..., N, K] fp32 values of random MXFP4 weights, as fp4moe draws them."""
    k = shape[-1]
    magnitude = np.repeat(np.arange(8, dtype=np.uint8), MAGNITUDE_COUNTS)
    byte = rng.integers(0, 256, shape, dtype=np.uint8)
    w = E2M1[magnitude[byte & 0x7F]]
    w[byte >= 0x80] *= -1
    shift = round(np.log2(2.5 * np.sqrt(k)))
    exponent = np.ceil(np.log2(rng.uniform(0.5, 2, (*shape[:-1], k // 32)))) - shift
    w = w.reshape(*shape[:-1], k // 32, 32) * np.exp2(exponent).astype(np.float32)[..., None]
    return w.reshape(shape)


def bf16(x):
    return x.astype(ml_dtypes.bfloat16).astype(np.float32)


def e4m3(x, group):
    """x [rows, K] through e4m3 with scale amax / 448 per row (group 0) or per row and group."""
    out = np.empty_like(x)
    width = x.shape[1] if group == 0 else group
    for g0 in range(0, x.shape[1], width):
        blk = x[:, g0:g0 + width]
        s = np.abs(blk).max(1, keepdims=True) / 448
        s[s == 0] = 1
        out[:, g0:g0 + width] = (blk / s).astype(ml_dtypes.float8_e4m3fn).astype(np.float32) * s
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.tokens < 1 or a.experts < 4:
        ap.error(f"--tokens {a.tokens} must be at least 1 and --experts {a.experts} at least 4 (top-4)")
    rng = np.random.default_rng(a.seed)
    H = I = 2880
    T, k, E = a.tokens, 4, a.experts
    # as `fp4moe bench` draws them: biases uniform in [-1, 1] and hidden states
    # N(0, 1), both in bf16
    w13 = mxfp4_weights(rng, (E, 2 * I, H))
    w2 = mxfp4_weights(rng, (E, H, I))
    b13 = bf16(rng.uniform(-1, 1, (E, 2 * I)))
    b2 = bf16(rng.uniform(-1, 1, (E, H)))
    x = bf16(rng.standard_normal((T, H)))
    ids = np.stack([rng.choice(E, k, replace=False) for _ in range(T)])
    wts = rng.dirichlet(np.ones(k), T).astype(np.float32)

    def act(y):
        g, u = np.minimum(y[:, :I], 7.0), np.clip(y[:, I:], -7.0, 7.0)
        return g / (1 + np.exp(-1.702 * g)) * (u + 1)

    def layer(q1, q2):
        out = np.zeros((T, H), np.float64)
        for t in range(T):
            for j in range(k):
                e = ids[t, j]
                a2 = bf16(act(q1(x[t:t + 1]) @ w13[e].T + b13[e]))
                out[t] += wts[t, j] * (q2(a2) @ w2[e].T + b2[e])[0]
        return out

    ref = layer(lambda v: v, lambda v: v)
    print(f"gpt-oss-120b shape, {T} tokens over {E} experts, fp4moe's random MXFP4 weights (exact); "
          "relative error of the layer's output")
    for name, group in (("e4m3 per token", 0), ("e4m3 per token x 128", 128)):
        q = lambda v, g=group: e4m3(v, g)  # noqa: E731
        both = np.linalg.norm(layer(q, q) - ref) / np.linalg.norm(ref)
        first = np.linalg.norm(layer(q, lambda v: v) - ref) / np.linalg.norm(ref)
        print(f"  {name}: both GEMMs {both:.2e}, GEMM1's input only {first:.2e}")


if __name__ == "__main__":
    main()

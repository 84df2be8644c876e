"""Random FP4 expert tensors in the layout serving engines hold, quantized by
fp4moe's own (ModelOpt-exact) quantizer, as numpy and as torch on the GPU."""

import numpy as np
import torch

import fp4moe


def quantize_experts(rng, E, n, k, fmt="nvfp4", parts=1):
    """[E, n, k/2] codes, [E, n, k/block] scale bytes, [E] or [E, parts] weight_scale_2."""
    w, s, g = [], [], []
    for _ in range(E):
        rows = n // parts
        ps, ss, gs = [], [], []
        for _ in range(parts):
            x = (rng.standard_normal((rows, k)) * 0.5).astype(np.float32)
            p, sc, ws2 = fp4moe.quantize(x, fmt)
            ps.append(p), ss.append(sc), gs.append(ws2)
        w.append(np.concatenate(ps)), s.append(np.concatenate(ss)), g.append(gs)
    g = np.array(g, dtype=np.float32)
    return np.stack(w), np.stack(s), (g[:, 0] if parts == 1 else g)


def make(config, seed=0, fmt="nvfp4"):
    cfg = fp4moe.preset(config) if isinstance(config, str) else config
    rng = np.random.default_rng(seed)
    E, H, I = cfg["num_experts"], cfg["hidden"], cfg["intermediate"]
    t = {}
    t["w13"], t["w13_scale"], t["w13_scale_2"] = quantize_experts(rng, E, 2 * I, H, fmt, parts=2)
    t["w2"], t["w2_scale"], t["w2_scale_2"] = quantize_experts(rng, E, H, I, fmt)
    if fmt == "mxfp4":
        t["w13_scale_2"] = t["w2_scale_2"] = None
    if cfg["shared_expert"]:
        Is = cfg["shared_intermediate"]
        a = quantize_experts(rng, 1, 2 * Is, H, fmt, parts=2)
        b = quantize_experts(rng, 1, H, Is, fmt)
        t["shared"] = [a[0], a[1], a[2], b[0], b[1], b[2]]
    t["bias"] = (rng.standard_normal(E) * 0.05).astype(np.float32) if cfg["use_correction_bias"] else None
    return cfg, t


def cuda(a, scale=False):
    if a is None:
        return None
    t = torch.from_numpy(np.ascontiguousarray(a)).cuda()
    return t.view(torch.float8_e4m3fn) if scale else t


def layer_from(cfg, t, **kw):
    shared = None
    if "shared" in t:
        s = t["shared"]
        shared = (cuda(s[0]), cuda(s[1], True), cuda(s[2]), cuda(s[3]), cuda(s[4], True), cuda(s[5]))
    return fp4moe.MoeLayer.from_tensors(cfg, cuda(t["w13"]), cuda(t["w13_scale"], True), cuda(t["w13_scale_2"]),
                                        cuda(t["w2"]), cuda(t["w2_scale"], True), cuda(t["w2_scale_2"]),
                                        shared_expert=shared, e_score_correction_bias=cuda(t["bias"]), **kw)


def reference(cfg, t, x, **routing):
    return fp4moe.moe_forward(cfg, t["w13"], t["w13_scale"], t["w13_scale_2"], t["w2"], t["w2_scale"], t["w2_scale_2"],
                              x, shared_expert=t.get("shared"), e_score_correction_bias=t["bias"], **routing)


def rel_err(got, ref):
    got = np.asarray(got, dtype=np.float64)
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))

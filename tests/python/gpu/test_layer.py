"""fp4moe.MoeLayer from GPU tensors against the CPU reference; the engine's
routing; held experts; the scale layouts and gate/up orders; bad arguments."""

import numpy as np
import pytest
import torch

import fp4moe
from weights import cuda, layer_from, make, reference, rel_err


def inputs(cfg, T, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, cfg["hidden"], generator=g).to(torch.bfloat16)
    logits = torch.randn(T, cfg["num_experts"], generator=g)
    return x, logits


@pytest.mark.parametrize("name", ["glm5-small", "deepseek-v3-small", "mixtral-small"])
@pytest.mark.parametrize("T", [1, 37, 256])
def test_router_logits_against_reference(name, T):
    cfg, t = make(name, seed=T)
    layer = layer_from(cfg, t, max_tokens=256, finalize="split")
    x, logits = inputs(cfg, T, T + 1)
    out = torch.full((T, cfg["hidden"]), float("nan"), dtype=torch.bfloat16, device="cuda")
    layer(x.cuda(), logits.cuda(), out=out)
    layer.check_status()
    ids, w = layer.topk(T)
    rid, rw = fp4moe.route(cfg, logits.numpy(), t["bias"])
    np.testing.assert_array_equal(ids.cpu().numpy(), rid)
    np.testing.assert_array_equal(w.cpu().numpy(), rw)
    ref = reference(cfg, t, x.float().numpy(), router_logits=logits.numpy())
    got = out.float().cpu().numpy()
    assert not np.isnan(got).any(), "an output element was not written"
    assert rel_err(got, ref) < 1e-2


def test_engine_routing_held_experts_and_int32_ids():
    cfg, t = make("mixtral-small", seed=3)
    T, begin, count = 50, 2, 4
    x, logits = inputs(cfg, T, 4)
    ids, w = fp4moe.route(cfg, logits.numpy())
    held = {k: (v[begin:begin + count] if isinstance(v, np.ndarray) and v.shape[:1] == (cfg["num_experts"],) else v)
            for k, v in t.items()}
    layer = layer_from(cfg, held, local_experts=(begin, count), max_tokens=T, finalize="split")
    assert layer.local_experts == (begin, count)
    out = layer(x.cuda(), topk_ids=torch.from_numpy(ids).cuda(), topk_weights=torch.from_numpy(w).cuda())
    layer.check_status()
    w0 = w.copy()
    w0[(ids < begin) | (ids >= begin + count)] = 0
    ref = reference(cfg, t, x.float().numpy(), topk_ids=ids, topk_weights=w0)
    assert rel_err(out.float().cpu().numpy(), ref) < 1e-2
    with pytest.raises(ValueError, match="topk_ids.*int32"):
        layer(x.cuda(), topk_ids=torch.from_numpy(ids).long().cuda(), topk_weights=torch.from_numpy(w).cuda())


def swizzle(s):
    """vLLM's swizzle_blockscale: [B, M, K] -> 128x4 tiles, rows padded to 128 and columns to 4."""
    B, M, K = s.shape
    Mp, Kp = (M + 127) // 128 * 128, (K + 3) // 4 * 4
    p = np.zeros((B, Mp, Kp), dtype=s.dtype)
    p[:, :M, :K] = s
    return p.reshape(B, Mp // 128, 4, 32, Kp // 4, 4).transpose(0, 1, 4, 3, 2, 5).reshape(B, Mp, Kp).copy()


def test_swizzled_scales_and_up_gate_order_are_bitwise_the_same_layer():
    cfg, t = make("glm5-small", seed=5)
    T = 40
    x, logits = inputs(cfg, T, 6)
    base = layer_from(cfg, t, max_tokens=T, finalize="split")
    want = base(x.cuda(), logits.cuda())
    I = cfg["intermediate"]
    u = dict(t)
    u["w13"] = np.concatenate([t["w13"][:, I:], t["w13"][:, :I]], axis=1)
    u["w13_scale"] = swizzle(np.concatenate([t["w13_scale"][:, I:], t["w13_scale"][:, :I]], axis=1))
    u["w13_scale_2"] = t["w13_scale_2"][:, ::-1].copy()
    u["w2_scale"] = swizzle(t["w2_scale"])
    s = t["shared"]
    u["shared"] = [np.concatenate([s[0][:, I:], s[0][:, :I]], axis=1),
                   swizzle(np.concatenate([s[1][:, I:], s[1][:, :I]], axis=1)), s[2][:, ::-1].copy(), s[3], swizzle(s[4]),
                   s[5]]
    other = layer_from(cfg, u, max_tokens=T, finalize="split", w13_order="up_gate", scale_layout="swizzled_128x4")
    assert torch.equal(other(x.cuda(), logits.cuda()), want)


def mxfp4_scales(t):
    """A random MXFP4 layer's block scales on the GPU as float8_e8m0fnu, as engines hold them."""
    return tuple(torch.from_numpy(t[k]).cuda().view(torch.float8_e8m0fnu) for k in ("w13_scale", "w2_scale"))


def test_mxfp4_against_reference():
    cfg, t = make("mixtral-small", seed=7, fmt="mxfp4")
    T = 33
    x, logits = inputs(cfg, T, 8)
    w13s, w2s = mxfp4_scales(t)
    layer = fp4moe.MoeLayer.from_tensors(cfg, cuda(t["w13"]), w13s, None, cuda(t["w2"]), w2s, None, max_tokens=T)
    out = layer(x.cuda(), logits.cuda())
    ref = reference(cfg, t, x.float().numpy(), router_logits=logits.numpy())
    assert rel_err(out.float().cpu().numpy(), ref) < 1e-2


def test_fp8_activations_against_their_reference():
    import fp4moe.torch as ft
    cfg, t = make("mixtral-small", seed=11, fmt="mxfp4")
    T = 33
    x, logits = inputs(cfg, T, 12)
    w13s, w2s = mxfp4_scales(t)
    layer = fp4moe.MoeLayer.from_tensors(cfg, cuda(t["w13"]), w13s, None, cuda(t["w2"]), w2s, None, max_tokens=T,
                                         finalize="split", deterministic=True, activations="fp8")
    out = layer(x.cuda(), logits.cuda())
    got = out.float().cpu().numpy()
    ref8 = reference(cfg, t, x.float().numpy(), router_logits=logits.numpy(), activations="fp8")
    ref = reference(cfg, t, x.float().numpy(), router_logits=logits.numpy())
    # the same e4m3 roundings as the reference: far closer to it than to bf16's layer
    assert rel_err(got, ref8) < 1e-2 and rel_err(got, ref8) < 0.5 * rel_err(got, ref)
    # the torch op with the same option and this layer's routing: the same layer, bitwise
    ids, w = layer.topk(T)
    op = ft.fused_moe(x.cuda(), cuda(t["w13"]), w13s, None, cuda(t["w2"]), w2s, None, w, ids, activations="fp8")
    assert torch.equal(op, out)


def test_bad_arguments_name_themselves():
    cfg, t = make("mixtral-small", seed=9)
    layer = layer_from(cfg, t, max_tokens=16)
    x, logits = inputs(cfg, 8, 10)
    x, logits = x.cuda(), logits.cuda()
    cases = [
        (lambda: layer(x.float(), logits), "hidden_states.*bfloat16"),
        (lambda: layer(torch.cat([x, x, x]), torch.cat([logits, logits, logits])), "max_tokens = 16"),
        (lambda: layer(x.t().contiguous().t(), logits), "hidden_states"),
        (lambda: layer(x[:, ::2], logits), "not contiguous"),
        (lambda: layer(x, logits.cpu()), "router_logits.*cuda"),
        (lambda: layer(x, logits[:, :3].contiguous()), "router_logits"),
        (lambda: layer(x, logits, out=torch.empty(8, 7, dtype=torch.bfloat16, device="cuda")), "out:"),
    ]
    for call, pattern in cases:
        with pytest.raises(ValueError, match=pattern):
            call()
    with pytest.raises(ValueError, match="w13_order"):
        layer_from(cfg, t, w13_order="gate-up")
    with pytest.raises(ValueError, match="w2_scale"):
        fp4moe.MoeLayer.from_tensors(cfg, cuda(t["w13"]), cuda(t["w13_scale"], True), cuda(t["w13_scale_2"]),
                                     cuda(t["w2"]), cuda(t["w2_scale"][:, :, :-1].copy(), True), cuda(t["w2_scale_2"]))

"""The Python package without a GPU or PyTorch: formats, the planner, configs,
the CPU reference router and layer on numpy arrays (through DLPack), and every
argument error naming the argument."""

import json
import os

import numpy as np
import pytest

import fp4moe


def test_version_and_presets():
    assert fp4moe.__version__.count(".") == 2
    names = fp4moe.preset_names()
    assert {"glm5", "deepseek-v3", "mixtral"} <= set(names)
    g = fp4moe.preset("glm5")
    assert (g["hidden"], g["intermediate"], g["num_experts"], g["top_k"]) == (6144, 2048, 256, 8)
    assert g["scoring"] == "sigmoid" and g["use_correction_bias"] and g["routed_scaling_factor"] == 2.5
    assert fp4moe.checkpoint_format("glm5") == "nvfp4"
    assert fp4moe.checkpoint_format(fp4moe.preset("gpt-oss-120b")) == "mxfp4"


def test_hf_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "hidden_size": 512, "moe_intermediate_size": 128, "n_routed_experts": 16, "num_experts_per_tok": 4,
        "scoring_func": "sigmoid", "topk_method": "noaux_tc", "n_group": 4, "topk_group": 2, "norm_topk_prob": True,
        "routed_scaling_factor": 2.5, "n_shared_experts": 1}))
    c = fp4moe.config_from_hf(tmp_path)
    assert (c["hidden"], c["num_experts"], c["top_k"], c["n_group"], c["topk_group"]) == (512, 16, 4, 4, 2)
    with pytest.raises(ValueError, match="missing"):
        fp4moe.config_from_hf(tmp_path / "missing")


E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], np.float32)


def e4m3(b):
    """float8_e4m3fn bits -> fp32 (no NaN among block scales)."""
    b = b.astype(np.int32)
    e, m = (b >> 3) & 15, b & 7
    v = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))
    return np.where(b & 0x80, -v, v).astype(np.float32)


def test_quantize_shapes_and_exact_dequantize():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 256)).astype(np.float32)
    p, s, ws2 = fp4moe.quantize(x)
    assert p.shape == (64, 128) and s.shape == (64, 16) and p.dtype == np.uint8
    assert ws2 == np.float32(np.abs(x).max()) * np.float32(1 / 2688)  # ModelOpt: amax * fl(1/2688)
    y = fp4moe.dequantize(p, s, ws2)
    # independently: e2m1(code) * fl(scale * weight_scale_2), in fp32
    codes = np.stack([p & 15, p >> 4], -1).reshape(64, 256)
    want = E2M1[codes] * np.repeat(e4m3(s) * np.float32(ws2), 16, axis=1)
    assert np.array_equal(y, want)
    assert np.linalg.norm(y - x) / np.linalg.norm(x) < 0.15
    pm, sm, _ = fp4moe.quantize(x, "mxfp4")
    assert sm.shape == (64, 8)
    ym = fp4moe.dequantize(pm, sm, 1.0, "mxfp4")
    codes = np.stack([pm & 15, pm >> 4], -1).reshape(64, 256)
    assert np.array_equal(ym, E2M1[codes] * np.repeat(2.0 ** (sm.astype(np.float32) - 127), 32, axis=1))
    assert np.linalg.norm(ym - x) / np.linalg.norm(x) < 0.2


def test_quantize_errors_name_the_value():
    with pytest.raises(ValueError, match="multiple of the nvfp4 block 16"):
        fp4moe.quantize(np.ones((4, 24), np.float32))
    with pytest.raises(ValueError, match="format 'fp8'"):
        fp4moe.quantize(np.ones((4, 32), np.float32), "fp8")
    with pytest.raises(ValueError, match="2-D"):
        fp4moe.quantize(np.ones(32, np.float32))
    x = np.ones((4, 32), np.float32)
    x[1, 3] = np.nan
    with pytest.raises(ValueError, match="NaN|nan"):
        fp4moe.quantize(x)


def test_plan_gives_the_planners_terms():
    r = fp4moe.plan("sm120", tile="128x256x128", epilogue="finalize")
    assert r["capacity"] == 101376 and not r["fits"] and r["headroom"] == -1024
    assert any(s["kind"] == "stages" for s in r["suggestions"])
    d = fp4moe.plan("sm90", kernel="grouped", sweep=True, n=4096, k=6144)
    assert isinstance(d, list) and len(d) > 10 and all("terms" in p for p in d)
    # a GEMM's activation type: a sweep of its own tiles; a tile of the other type refused by name
    f = fp4moe.plan("sm90", kernel="grouped", sweep=True, n=4096, k=6144, activations="fp8")
    assert 0 < len(f) < len(d) and all(p["tile"].endswith("_fp8") and p["fits"] for p in f)
    b = fp4moe.plan("sm90", kernel="grouped", tile="bm256_nt64_bk128_mt1_c1_ws_fp8", n=4096, k=6144, activations="bf16")
    assert not b["fits"] and "multiplies e4m3 activations; this GEMM's are bf16" in b["explanation"]
    with pytest.raises(ValueError, match="activations 'fp4'"):
        fp4moe.plan("sm90", kernel="grouped", sweep=True, activations="fp4")
    with pytest.raises(ValueError, match="unknown argument 'tiles'"):
        fp4moe.plan("sm90", tiles="1")
    with pytest.raises(ValueError, match="sm77"):
        fp4moe.plan("sm77")


def random_layer(cfg, rng):
    E, H, I = cfg["num_experts"], cfg["hidden"], cfg["intermediate"]

    def q(E, n, k, parts):
        w, s, g = [], [], []
        for _ in range(E):
            ps = [fp4moe.quantize(rng.standard_normal((n // parts, k)).astype(np.float32) * 0.5) for _ in range(parts)]
            w.append(np.concatenate([p[0] for p in ps])), s.append(np.concatenate([p[1] for p in ps]))
            g.append([p[2] for p in ps])
        g = np.array(g, np.float32)
        return np.stack(w), np.stack(s), g if parts == 2 else g[:, 0].copy()

    return q(E, 2 * I, H, 2) + q(E, H, I, 1)


def dense_reference(cfg, t, x, ids, w):
    """The layer in float64 numpy from dequantized weights: an independent check of the native reference."""
    w13, s13, g13, w2, s2, g2 = t
    I = cfg["intermediate"]
    out = np.zeros(x.shape, np.float64)
    for tok in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = ids[tok, j]
            gate = fp4moe.dequantize(w13[e, :I], s13[e, :I], g13[e, 0]).astype(np.float64)
            up = fp4moe.dequantize(w13[e, I:], s13[e, I:], g13[e, 1]).astype(np.float64)
            down = fp4moe.dequantize(w2[e], s2[e], g2[e]).astype(np.float64)
            a, b = gate @ x[tok], up @ x[tok]
            h = a / (1 + np.exp(-a)) * b
            out[tok] += w[tok, j] * (down @ h)
    return out


def mixtral_small_case(seed, T):
    """mixtral-small's config, a random layer, T random hidden rows and router logits."""
    cfg = dict(fp4moe.preset("mixtral-small"))
    rng = np.random.default_rng(seed)
    t = random_layer(cfg, rng)
    x = rng.standard_normal((T, cfg["hidden"])).astype(np.float32)
    logits = rng.standard_normal((T, cfg["num_experts"])).astype(np.float32)
    return cfg, t, x, logits


def test_reference_layer_and_router():
    T = 5
    cfg, t, x, logits = mixtral_small_case(1, T)
    ids, w = fp4moe.route(cfg, logits)
    assert ids.shape == (T, cfg["top_k"]) and ids.dtype == np.int32
    # softmax over the chosen logits (renormalised): the top-k by logit, weights summing to 1
    assert np.array_equal(ids, np.argsort(-logits, axis=1, kind="stable")[:, : cfg["top_k"]])
    assert np.allclose(w.sum(axis=1), 1.0, atol=1e-6)
    y = fp4moe.moe_forward(cfg, *t, x, router_logits=logits)
    y2 = fp4moe.moe_forward(cfg, *t, x, topk_ids=ids, topk_weights=w)
    assert np.array_equal(y, y2)
    ref = dense_reference(cfg, t, x.astype(np.float64), ids, w)
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < 1e-6


def test_reference_layer_errors_name_the_argument():
    cfg, t, x, logits = mixtral_small_case(2, 3)
    with pytest.raises(ValueError, match="w2_scale: expected"):
        fp4moe.moe_forward(cfg, t[0], t[1], t[2], t[3], t[4][:, :, :-1].copy(), t[5], x, router_logits=logits)
    with pytest.raises(ValueError, match="w13: expected a contiguous uint8"):
        fp4moe.moe_forward(cfg, t[0].astype(np.int32), *t[1:], x, router_logits=logits)
    with pytest.raises(ValueError, match="router_logits"):
        fp4moe.moe_forward(cfg, *t, x, router_logits=logits[:, :3].copy())
    with pytest.raises(ValueError, match="topk_ids"):
        fp4moe.moe_forward(cfg, *t, x, topk_ids=np.zeros((3, 2), np.int64), topk_weights=np.ones((3, 2), np.float32))
    with pytest.raises(ValueError, match="expert id"):
        fp4moe.moe_forward(cfg, *t, x, topk_ids=np.full((3, 2), 99, np.int32), topk_weights=np.ones((3, 2), np.float32))
    with pytest.raises(ValueError, match="unknown key 'hiden'"):
        fp4moe.moe_forward(dict(cfg, hiden=3), *t, x, router_logits=logits)
    with pytest.raises(ValueError, match="NVFP4 needs"):
        fp4moe.moe_forward(cfg, t[0], t[1], None, t[3], t[4], t[5], x, router_logits=logits, format="nvfp4")


def test_reference_with_fp8_activations():
    cfg, t, x, logits = mixtral_small_case(5, 4)
    y = fp4moe.moe_forward(cfg, *t, x, router_logits=logits)
    y8 = fp4moe.moe_forward(cfg, *t, x, router_logits=logits, activations="fp8")
    assert np.array_equal(y8, fp4moe.moe_forward(cfg, *t, x, router_logits=logits, activations="fp8"))
    # two e4m3 roundings in series (3 mantissa bits, 2^-4 relative each): a few percent, never zero
    assert 5e-3 < np.linalg.norm(y8 - y) / np.linalg.norm(y) < 8e-2
    with pytest.raises(ValueError, match="activations 'int8'"):
        fp4moe.moe_forward(cfg, *t, x, router_logits=logits, activations="int8")


def test_gpu_layer_without_a_gpu_says_so():
    if os.path.exists("/dev/nvidia0"):
        pytest.skip("a GPU is present: the GPU tests cover the layer")
    cfg = dict(fp4moe.preset("mixtral-small"))
    t = random_layer(cfg, np.random.default_rng(3))
    with pytest.raises(ValueError, match="w13: expected a CUDA tensor"):
        fp4moe.MoeLayer.from_tensors(cfg, *t)


def test_parallel_layer_arguments_are_named_without_a_gpu():
    cfg = fp4moe.preset("glm5-small")  # E = 32, I = 128
    uid = fp4moe.nccl_unique_id()
    assert isinstance(uid, bytes) and len(uid) == 128
    cases = [
        (dict(mode="ep", rank=0, ranks=1, unique_id=uid), "mode: 'ep'"),
        (dict(mode="tp"), "group="),
        (dict(mode="tp", rank=0, ranks=1), "unique_id"),
        (dict(mode="tp", rank=0, ranks=1, unique_id=b"short"), "unique_id: 5 bytes"),
        (dict(mode="tp", rank=2, ranks=2, unique_id=uid), "rank 2 of 2"),
        (dict(mode="allgather", rank=0, ranks=3, unique_id=uid), "E = 32 experts do not divide among 3 ranks"),
        (dict(mode="tp", rank=0, ranks=2, unique_id=uid), "the expert width I = 128 over 2 ranks"),
    ]
    for kwargs, needle in cases:
        with pytest.raises(ValueError) as e:
            fp4moe.ParallelMoeLayer.random(cfg, **kwargs)
        assert needle in str(e.value), (kwargs, str(e.value))


def test_activations_option_is_checked_by_name():
    cfg = dict(fp4moe.preset("gpt-oss-small"))
    t = random_layer(cfg, np.random.default_rng(4))
    with pytest.raises(ValueError, match="activations 'int8' is not one of bf16, fp8"):
        fp4moe.MoeLayer.from_tensors(cfg, *t, activations="int8")
    with pytest.raises(ValueError, match="activations 'e5m2'"):
        fp4moe.MoeLayer.random(cfg, activations="e5m2")
    with pytest.raises(ValueError, match="activations 'fp16'"):
        fp4moe.ParallelMoeLayer.random(cfg, rank=0, ranks=1, unique_id=fp4moe.nccl_unique_id(), activations="fp16")


def test_layer_options_are_checked_by_name():
    cfg = dict(fp4moe.preset("glm5-small"))
    with pytest.raises(ValueError, match="max_plans -1 is negative"):
        fp4moe.MoeLayer.random(cfg, max_plans=-1)


def test_every_layer_option_is_a_key_the_library_reads():
    # The native side refuses an unknown key by name before it checks values,
    # and max_tokens 0 is the first value it refuses: every key was read.
    cfg = dict(fp4moe.preset("glm5-small"))
    every = dict(finalize="split", deterministic=True, split_k=False, activations="fp8", shared_expert_in_routed=True,
                 balanced_split=True, fp8_rounds_nvfp4=True, max_plans=0, use_tune_cache=False)
    with pytest.raises(ValueError, match="max_tokens = 0 must be at least 1"):
        fp4moe.MoeLayer.random(cfg, max_tokens=0, **every)

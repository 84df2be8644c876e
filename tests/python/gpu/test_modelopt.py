"""fp4moe.MoeLayer.from_modelopt on a checkpoint that `fp4moe quantize` writes
(ModelOpt NVFP4 layout), against a layer from the same tensors on the GPU;
describe and tune through Python."""

import json
import os
import subprocess

import numpy as np
import pytest
import torch

import fp4moe

safetensors_torch = pytest.importorskip("safetensors.torch")
CLI = os.environ.get("FP4MOE_CLI")
H, I, E, K = 256, 128, 8, 2
CONFIG = {"model_type": "tiny_glm", "hidden_size": H, "moe_intermediate_size": I, "n_routed_experts": E,
          "num_experts_per_tok": K, "scoring_func": "sigmoid", "topk_method": "noaux_tc", "n_group": 1,
          "topk_group": 1, "norm_topk_prob": True, "routed_scaling_factor": 2.5, "n_shared_experts": 1,
          "num_hidden_layers": 2, "first_k_dense_replace": 1}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    if not CLI or not os.path.exists(CLI):
        pytest.skip("FP4MOE_CLI (the fp4moe command that writes the checkpoint) is not set")
    d = tmp_path_factory.mktemp("ck")
    src, out = d / "fp32", d / "nvfp4"
    src.mkdir()
    rng = np.random.default_rng(0)
    w = {}
    for p in ("gate_proj", "up_proj", "down_proj"):
        shape = (H, I) if p == "down_proj" else (I, H)
        w[f"model.layers.1.mlp.shared_experts.{p}.weight"] = (rng.standard_normal(shape) / np.sqrt(shape[1])).astype(np.float32)
        for e in range(E):
            w[f"model.layers.1.mlp.experts.{e}.{p}.weight"] = (
                rng.standard_normal(shape) * (0.5 + rng.random()) / np.sqrt(shape[1])).astype(np.float32)
    w["model.layers.1.mlp.gate.e_score_correction_bias"] = (rng.standard_normal(E) * 0.05).astype(np.float32)
    w["model.layers.1.mlp.gate.weight"] = (rng.standard_normal((E, H)) / np.sqrt(H)).astype(np.float32)
    safetensors_torch.save_file({k: torch.from_numpy(v) for k, v in w.items()}, str(src / "model.safetensors"))
    (src / "config.json").write_text(json.dumps(CONFIG))
    p = subprocess.run([CLI, "quantize", "--in", str(src), "--out", str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    return out


def test_from_modelopt_equals_from_tensors(checkpoint):
    q = safetensors_torch.load_file(str(checkpoint / "model.safetensors"), device="cuda")
    pre = "model.layers.1.mlp."

    def proj(prefix, names):
        w = torch.cat([q[f"{prefix}{n}.weight"] for n in names])
        s = torch.cat([q[f"{prefix}{n}.weight_scale"] for n in names])
        g = torch.stack([q[f"{prefix}{n}.weight_scale_2"].reshape(()) for n in names])
        return w, s, g

    def experts(prefix_of, count):
        w13 = [proj(prefix_of(e), ("gate_proj", "up_proj")) for e in range(count)]
        w2 = [proj(prefix_of(e), ("down_proj",)) for e in range(count)]
        return (torch.stack([a[0] for a in w13]), torch.stack([a[1] for a in w13]), torch.stack([a[2] for a in w13]),
                torch.stack([a[0] for a in w2]), torch.stack([a[1] for a in w2]), torch.stack([a[2][0] for a in w2]))

    routed = experts(lambda e: f"{pre}experts.{e}.", E)
    shared = experts(lambda e: f"{pre}shared_experts.", 1)
    cfg = fp4moe.config_from_hf(checkpoint)
    T = 48
    a = fp4moe.MoeLayer.from_modelopt(str(checkpoint), 1, max_tokens=T, finalize="split")
    b = fp4moe.MoeLayer.from_tensors(cfg, *routed, shared_expert=shared,
                                     e_score_correction_bias=q[pre + "gate.e_score_correction_bias"].float().contiguous(),
                                     max_tokens=T, finalize="split")
    assert a.config == b.config
    x = torch.randn(T, H, device="cuda").to(torch.bfloat16)
    logits = torch.randn(T, E, device="cuda")
    assert torch.equal(a(x, logits), b(x, logits))
    # the checkpoint's router weight: logits computed on the GPU
    assert a.info["has_router_weight"]
    y = a(x)
    a.check_status()
    assert y.isfinite().all()


def test_describe_and_tune(checkpoint, tmp_path):
    layer = fp4moe.MoeLayer.from_modelopt(str(checkpoint), 1, max_tokens=64, tune_cache=str(tmp_path / "tune.json"))
    text = layer.describe(16)
    assert "GEMM1" in text and "GEMM2" in text and "shared" in text
    rows = layer.tune([16])
    assert rows and all(r["tuned_ms"] > 0 and r["tuned_ms"] <= r["default_ms"] * 1.5 for r in rows)
    assert (tmp_path / "tune.json").exists()
    assert "tuned" in layer.describe(16)
    with pytest.raises(ValueError, match="max_tokens"):
        layer.describe(65)

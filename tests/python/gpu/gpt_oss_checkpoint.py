"""Writes a random gpt-oss MoE checkpoint in OpenAI's own MXFP4 layout with the
``safetensors`` package (independent of fp4moe's writer), and dequantizes it as
transformers' MXFP4 integration does: the reference side of the gpt-oss tests.

Layout per MoE layer L (model.layers.L.mlp.):
  experts.gate_up_proj_blocks U8 [E, 2I, H/32, 16]  rows interleaved: 2i gate_i, 2i+1 up_i;
                                                  byte j holds elements 2j (low nibble) and 2j+1
  experts.gate_up_proj_scales U8 [E, 2I, H/32]      e8m0: 2^(s - 127)
  experts.gate_up_proj_bias   BF16 [E, 2I]          interleaved likewise
  experts.down_proj_{blocks,scales,bias}           [E, H, I/32, 16], [E, H, I/32], [E, H]
  router.weight BF16 [E, H], router.bias BF16 [E]
"""

import json
import os

import numpy as np
import torch

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def _bf16(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)


def write(path, *, hidden, intermediate, experts, top_k, layers=(0,), seed=0):
    """config.json and model.safetensors for `layers` MoE layers; returns the tensors written."""
    from safetensors.torch import save_file

    rng = np.random.default_rng(seed)
    H, I, E = hidden, intermediate, experts
    tensors = {}
    for L in layers:
        pre = f"model.layers.{L}.mlp."
        for name, rows, k in (("gate_up_proj", 2 * I, H), ("down_proj", H, I)):
            tensors[pre + f"experts.{name}_blocks"] = torch.from_numpy(
                rng.integers(0, 256, size=(E, rows, k // 32, 16), dtype=np.uint8))
            # block scales 2^-8 .. 2^-5: weights of the order of 0.05
            tensors[pre + f"experts.{name}_scales"] = torch.from_numpy(
                rng.integers(127 - 8, 127 - 4, size=(E, rows, k // 32), dtype=np.uint8))
            tensors[pre + f"experts.{name}_bias"] = _bf16(rng.normal(0, 1.0, size=(E, rows)))
        tensors[pre + "router.weight"] = _bf16(rng.normal(0, 0.05, size=(E, H)))
        tensors[pre + "router.bias"] = _bf16(rng.normal(0, 0.5, size=(E,)))
    os.makedirs(path, exist_ok=True)
    save_file(tensors, os.path.join(path, "model.safetensors"))
    config = {"model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "hidden_size": H,
              "intermediate_size": I, "num_local_experts": E, "num_experts_per_tok": top_k,
              "num_hidden_layers": max(layers) + 1, "swiglu_limit": 7.0, "num_attention_heads": 8,
              "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 512,
              "quantization_config": {"quant_method": "mxfp4"}}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    return tensors


def dequantize(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """[E, N, K/32, 16] codes and [E, N, K/32] e8m0 scales -> fp32 [E, N, K], as transformers' MXFP4 integration."""
    lut = torch.tensor(E2M1, dtype=torch.float32, device=blocks.device)
    b = blocks.long()
    v = torch.stack([lut[b & 15], lut[b >> 4]], dim=-1).reshape(*blocks.shape[:-1], 32)
    v = v * torch.exp2(scales.float() - 127.0)[..., None]
    return v.reshape(blocks.shape[0], blocks.shape[1], -1)


def load_into(block: torch.nn.Module, tensors, layer=0):
    """The layer's exact dequantized weights and its biases into a transformers GptOssMLP (fp32)."""
    pre = f"model.layers.{layer}.mlp."
    dev = block.experts.gate_up_proj.device
    with torch.no_grad():
        gu = dequantize(tensors[pre + "experts.gate_up_proj_blocks"].to(dev), tensors[pre + "experts.gate_up_proj_scales"].to(dev))
        dn = dequantize(tensors[pre + "experts.down_proj_blocks"].to(dev), tensors[pre + "experts.down_proj_scales"].to(dev))
        block.experts.gate_up_proj.copy_(gu.transpose(1, 2))  # [E, H, 2I]: gate the even columns, up the odd
        block.experts.down_proj.copy_(dn.transpose(1, 2))     # [E, I, H]
        block.experts.gate_up_proj_bias.copy_(tensors[pre + "experts.gate_up_proj_bias"].float())
        block.experts.down_proj_bias.copy_(tensors[pre + "experts.down_proj_bias"].float())
        block.router.weight.copy_(tensors[pre + "router.weight"].float())
        block.router.bias.copy_(tensors[pre + "router.bias"].float())

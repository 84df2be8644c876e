"""fp4moe behind transformers' MoE blocks (GLM-5 ``GlmMoeDsaMoE``, DeepSeek-V3
``DeepseekV3MoE``, gpt-oss ``GptOssMLP``, and any block whose ``experts`` is called as
``experts(hidden_states, top_k_index, top_k_weights)`` over ``gate_up_proj``
[E, 2I, H] (gate first) and ``down_proj`` [E, H, I]).

The block keeps its own router (``.gate``) and shared experts; only ``.experts``
becomes an fp4moe layer whose FP4 weights come from a ModelOpt NVFP4 checkpoint
(``load_modelopt``: transformers cannot load those itself), or from quantizing
the module's own weights (``use_fp4moe``: ModelOpt's NVFP4 arithmetic; the
module's weights are then replaced by their dequantized values, so both compute
the same function; NVFP4 by default, MXFP4 with ``format="mxfp4"``; FP8
activations, ``activations="fp8"``, take MXFP4 exactly and NVFP4 only with
``fp8_rounds_nvfp4=True``, each weight rounded to e4m3). gpt-oss's experts come from its own MXFP4 checkpoint
(``load_gpt_oss``), their biases and clamped SwiGLU computed in fp4moe's GEMM
epilogues.
"""

from __future__ import annotations

import json
import os
import re
from typing import Dict, Iterable, List, Optional

import numpy as np
import torch

from . import torch as fp4moe_torch
from .layer import MoeLayer
from .reference import dequantize, quantize


class FP4MoEExperts(torch.nn.Module):
    """Drop-in for a transformers experts module: forward(hidden_states [T, H],
    top_k_index [T, k], top_k_weights [T, k]) -> [T, H], through torch.ops.fp4moe."""

    def __init__(self, layer: MoeLayer, num_experts: int):
        super().__init__()
        self.layer = layer
        self.layer_id = fp4moe_torch.register(layer)
        self.num_experts = num_experts

    def forward(self, hidden_states: torch.Tensor, top_k_index: Optional[torch.Tensor] = None,
                top_k_weights: Optional[torch.Tensor] = None, *, router_indices: Optional[torch.Tensor] = None,
                routing_weights: Optional[torch.Tensor] = None) -> torch.Tensor:
        # (gpt-oss's block passes them as router_indices and routing_weights)
        top_k_index = router_indices if top_k_index is None else top_k_index
        top_k_weights = routing_weights if top_k_weights is None else top_k_weights
        if top_k_index is None or top_k_weights is None:
            raise ValueError("FP4MoEExperts: the top-k ids and weights are required")
        x = hidden_states.to(torch.bfloat16).contiguous()
        ids = top_k_index.to(torch.int32).contiguous()
        w = top_k_weights.to(torch.float32).contiguous()
        y = torch.ops.fp4moe.moe_forward_routed(x, ids, w, self.layer_id)
        return y.to(hidden_states.dtype)


def _quantize_projection(w: torch.Tensor, halves: int, format: str = "nvfp4"):
    """[E, N, K] float -> FP4 codes [E, N, K/2], block scales [E, N, K/block], scale_2 ([E] or [E, 2]; None
    for MXFP4) and the dequantized weights. NVFP4: gate and up share one amax per expert, as ModelOpt's
    export does; MXFP4: power-of-two block scales of 32, no global scale."""
    E = w.shape[0]
    codes, scales, scale_2, deq = [], [], [], []
    for e in range(E):
        x = w[e].detach().float().cpu().numpy()
        if format == "mxfp4":
            c, s, _ = quantize(x, "mxfp4")
            codes.append(c), scales.append(s), deq.append(dequantize(c, s, 1.0, "mxfp4"))
            continue
        amax = float(np.abs(x).max())
        parts = np.split(x, halves)
        q = [quantize(p, "nvfp4", amax=amax) for p in parts]
        codes.append(np.concatenate([a[0] for a in q])), scales.append(np.concatenate([a[1] for a in q]))
        scale_2.append([a[2] for a in q])
        deq.append(np.concatenate([dequantize(a[0], a[1], a[2]) for a in q]))
    if format == "mxfp4":
        return np.stack(codes), np.stack(scales), None, np.stack(deq)
    s2 = np.array(scale_2, np.float32)
    return np.stack(codes), np.stack(scales), (s2 if halves == 2 else s2[:, 0].copy()), np.stack(deq)


def quantize_experts(experts: torch.nn.Module, top_k: int, *, max_tokens: int = 1024, finalize: str = "split",
                     format: str = "nvfp4", activations: str = "bf16", fp8_rounds_nvfp4: bool = False) -> FP4MoEExperts:
    """Quantizes a transformers experts module (gate_up_proj [E, 2I, H], down_proj [E, H, I])
    to ``format`` (nvfp4 or mxfp4), writes the dequantized values back into it, and
    returns the fp4moe module that computes the same experts, with ``activations``
    bf16 or fp8 (W4A8; NVFP4 with ``fp8_rounds_nvfp4=True``, each weight rounded to e4m3;
    docs/fp8.md)."""
    if format not in ("nvfp4", "mxfp4"):
        raise ValueError(f"format '{format}' is not nvfp4 or mxfp4")
    gu, dp = experts.gate_up_proj, experts.down_proj
    E, two_i, H = gu.shape
    dev = gu.device
    c13, s13, g13, d13 = _quantize_projection(gu, 2, format)
    c2, s2, g2, d2 = _quantize_projection(dp, 1, format)
    with torch.no_grad():
        gu.copy_(torch.from_numpy(d13).to(gu.dtype))
        dp.copy_(torch.from_numpy(d2).to(dp.dtype))
    cfg = {"name": "transformers", "hidden": H, "intermediate": two_i // 2, "num_experts": E, "top_k": int(top_k),
           "scoring": "softmax", "renormalize": False}

    def t(a, fp8=False):
        if a is None:
            return None
        x = torch.from_numpy(np.ascontiguousarray(a)).to(dev)
        return x.view(torch.float8_e4m3fn) if fp8 else x

    nv = format == "nvfp4"  # (MXFP4's e8m0 scales go as their bytes)
    layer = MoeLayer.from_tensors(cfg, t(c13), t(s13, nv), t(g13), t(c2), t(s2, nv), t(g2), format=format,
                                  max_tokens=max_tokens, finalize=finalize, activations=activations,
                                  fp8_rounds_nvfp4=fp8_rounds_nvfp4)
    return FP4MoEExperts(layer, E)


def moe_blocks(model: torch.nn.Module) -> List[torch.nn.Module]:
    """The MoE blocks of a transformers model: modules with .gate and .experts.gate_up_proj."""
    return [m for m in model.modules() if hasattr(m, "gate") and hasattr(getattr(m, "experts", None), "gate_up_proj")]


def use_fp4moe(model: torch.nn.Module, *, max_tokens: int = 1024, blocks: Optional[Iterable[torch.nn.Module]] = None,
               format: str = "nvfp4", activations: str = "bf16", fp8_rounds_nvfp4: bool = False):
    """Puts fp4moe behind every MoE block of ``model`` (its experts quantized to
    ``format`` in place, computed with ``activations``: see quantize_experts).
    Returns the blocks changed."""
    changed = []
    for block in blocks if blocks is not None else moe_blocks(model):
        block.experts = quantize_experts(block.experts, block.gate.top_k, max_tokens=max_tokens, format=format,
                                         activations=activations, fp8_rounds_nvfp4=fp8_rounds_nvfp4)
        changed.append(block)
    return changed


# ---- ModelOpt NVFP4 checkpoints ------------------------------------------------
_EXPERT = re.compile(r"^(.*)\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.(weight|weight_scale|weight_scale_2|input_scale)$")
_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def _checkpoint_files(path: str) -> Dict[str, str]:
    """tensor name -> shard file, from model.safetensors.index.json or model.safetensors."""
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            return {n: os.path.join(path, s) for n, s in json.load(f)["weight_map"].items()}
    single = os.path.join(path, "model.safetensors")
    if not os.path.exists(single):
        raise ValueError(f"{path}: neither model.safetensors.index.json nor model.safetensors")
    from safetensors import safe_open

    with safe_open(single, framework="pt") as f:
        return {n: single for n in f.keys()}


def _dequantize(codes: torch.Tensor, scales: torch.Tensor, scale_2: torch.Tensor) -> torch.Tensor:
    """NVFP4 [N, K/2] codes, e4m3 [N, K/16] scales, fp32 scale_2 -> fp32 [N, K]: e2m1 * block scale * scale_2."""
    lut = torch.tensor(_E2M1, device=codes.device)
    v = torch.stack([lut[(codes & 15).long()], lut[(codes >> 4).long()]], -1).reshape(codes.shape[0], -1)
    return v * scales.float().repeat_interleave(16, dim=1) * scale_2.float().reshape(())


def load_modelopt(model: torch.nn.Module, path: str, *, experts: str = "fp4moe", max_tokens: int = 1024,
                  device: str = "cuda") -> List[torch.nn.Module]:
    """Loads a ModelOpt NVFP4 checkpoint directory into a transformers model built
    from its config: the routed experts of every MoE block as fp4moe layers
    (``experts="dequantize"`` puts their exact dequantized values into the
    module instead: the reference), every other NVFP4 linear (shared experts,
    dense MLPs) dequantized into the module, every other tensor copied. A tensor
    the model does not have, or a parameter the checkpoint leaves out, is an
    error naming it. Returns the MoE blocks."""
    if experts not in ("fp4moe", "dequantize"):
        raise ValueError(f"experts '{experts}' is not fp4moe or dequantize")
    from safetensors import safe_open

    files = _checkpoint_files(path)
    handles = {}

    def tensor(name: str) -> torch.Tensor:
        f = files[name]
        if f not in handles:
            handles[f] = safe_open(f, framework="pt", device=device)
        return handles[f].get_tensor(name)

    state = model.state_dict(keep_vars=True)  # parameters and buffers, tied names included
    per_block: Dict[str, Dict[int, Dict[str, str]]] = {}
    loaded = set()
    for name in files:
        m = _EXPERT.match(name)
        if m:
            per_block.setdefault(m.group(1), {}).setdefault(int(m.group(2)), {})[m.group(3) + "." + m.group(4)] = name
            continue
        if name.endswith((".weight_scale", ".weight_scale_2", ".input_scale")):
            continue
        base = name[: -len(".weight")] if name.endswith(".weight") else None
        if name not in state:
            raise ValueError(f"{path}: tensor {name} has no parameter in the model")
        with torch.no_grad():
            if base is not None and base + ".weight_scale" in files:
                v = _dequantize(tensor(name), tensor(base + ".weight_scale"), tensor(base + ".weight_scale_2"))
            else:
                v = tensor(name)
            if tuple(v.shape) != tuple(state[name].shape):
                raise ValueError(f"{path}: {name} is {list(v.shape)}, the model's parameter is {list(state[name].shape)}")
            state[name].copy_(v.to(state[name].dtype))
        loaded.add(name)

    blocks = []
    for prefix, by_expert in sorted(per_block.items()):
        block = model.get_submodule(prefix)
        E = len(by_expert)
        if sorted(by_expert) != list(range(E)) or E != block.experts.gate_up_proj.shape[0]:
            raise ValueError(f"{path}: {prefix}.experts holds experts {sorted(by_expert)[:4]}..., "
                             f"the model has {block.experts.gate_up_proj.shape[0]}")

        def get(e, key):
            n = by_expert[e].get(key)
            if n is None:
                raise ValueError(f"{path}: {prefix}.experts.{e}.{key} is missing")
            return tensor(n)

        w13 = torch.stack([torch.cat([get(e, "gate_proj.weight"), get(e, "up_proj.weight")]) for e in range(E)])
        s13 = torch.stack([torch.cat([get(e, "gate_proj.weight_scale"), get(e, "up_proj.weight_scale")]) for e in range(E)])
        g13 = torch.stack([torch.stack([get(e, "gate_proj.weight_scale_2").reshape(()),
                                        get(e, "up_proj.weight_scale_2").reshape(())]) for e in range(E)]).float()
        w2 = torch.stack([get(e, "down_proj.weight") for e in range(E)])
        s2 = torch.stack([get(e, "down_proj.weight_scale") for e in range(E)])
        g2 = torch.stack([get(e, "down_proj.weight_scale_2").reshape(()) for e in range(E)]).float()
        if experts == "dequantize":
            with torch.no_grad():
                I = w13.shape[1] // 2
                for e in range(E):
                    gate = _dequantize(w13[e, :I], s13[e, :I], g13[e, 0])
                    up = _dequantize(w13[e, I:], s13[e, I:], g13[e, 1])
                    block.experts.gate_up_proj[e].copy_(torch.cat([gate, up]).to(block.experts.gate_up_proj.dtype))
                    block.experts.down_proj[e].copy_(_dequantize(w2[e], s2[e], g2[e]).to(block.experts.down_proj.dtype))
        else:
            H = w13.shape[2] * 2
            cfg = {"name": "transformers", "hidden": H, "intermediate": w13.shape[1] // 2, "num_experts": E,
                   "top_k": int(block.gate.top_k), "scoring": "softmax", "renormalize": False}
            layer = MoeLayer.from_tensors(cfg, w13.contiguous(), s13.contiguous(), g13.contiguous(), w2.contiguous(),
                                          s2.contiguous(), g2.contiguous(), max_tokens=max_tokens, finalize="split")
            block.experts = FP4MoEExperts(layer, E)
        loaded.update(f"{prefix}.experts.{p}" for p in ("gate_up_proj", "down_proj"))
        blocks.append(block)
    missing = [n for n in dict(model.named_parameters()) if n not in loaded and ".experts." not in n]
    missing += [n for n in dict(model.named_parameters()) if ".experts." in n and not any(n.startswith(b) for b in per_block)]
    if missing:
        raise ValueError(f"{path}: the checkpoint has no tensor for {len(missing)} parameters of the model, "
                         f"e.g. {missing[:3]}")
    return blocks


def load_gpt_oss(block: torch.nn.Module, path: str, *, layer: int, max_tokens: int = 1024,
                 finalize: str = "split", activations: str = "bf16") -> torch.nn.Module:
    """Replaces a transformers ``GptOssMLP``'s experts with MoE layer ``layer`` of
    the gpt-oss checkpoint directory ``path`` (OpenAI's MXFP4 layout, read by
    fp4moe: the same validation and errors as ``fp4moe inspect``). The block
    keeps its router, whose top-k ids and weights the experts receive. Returns
    the block."""
    experts = getattr(block, "experts", None)
    if experts is None or not hasattr(experts, "gate_up_proj_bias") or not hasattr(block, "router"):
        raise ValueError(f"load_gpt_oss: {type(block).__name__} is not a gpt-oss MoE block (router, experts with biases)")
    layer_ = MoeLayer.from_modelopt(path, layer, max_tokens=max_tokens, finalize=finalize, activations=activations)
    E = int(layer_.config["num_experts"])
    if E != experts.gate_up_proj.shape[0] or int(layer_.config["hidden"]) != experts.gate_up_proj.shape[1]:
        raise ValueError(f"load_gpt_oss: {path} layer {layer} has E = {E}, H = {layer_.config['hidden']}; the block has "
                         f"E = {experts.gate_up_proj.shape[0]}, H = {experts.gate_up_proj.shape[1]}")
    block.experts = FP4MoEExperts(layer_, E)
    return block

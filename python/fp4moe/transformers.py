"""fp4moe behind transformers' MoE blocks (GLM-5 ``GlmMoeDsaMoE``, DeepSeek-V3
``DeepseekV3MoE``, and any block whose ``experts`` is called as
``experts(hidden_states, top_k_index, top_k_weights)`` over ``gate_up_proj``
[E, 2I, H] (gate first) and ``down_proj`` [E, H, I]).

The block keeps its own router (``.gate``) and shared experts; only ``.experts``
becomes an fp4moe layer whose FP4 weights come either from quantizing the
module's own weights (ModelOpt's NVFP4 arithmetic; the module's weights are then
replaced by their dequantized values, so both compute the same function) or
from FP4 tensors the caller already holds.
"""

from __future__ import annotations

from typing import Iterable, List, Optional

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

    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor) -> torch.Tensor:
        x = hidden_states.to(torch.bfloat16).contiguous()
        ids = top_k_index.to(torch.int32).contiguous()
        w = top_k_weights.to(torch.float32).contiguous()
        y = torch.ops.fp4moe.moe_forward_routed(x, ids, w, self.layer_id)
        return y.to(hidden_states.dtype)


def _quantize_projection(w: torch.Tensor, halves: int):
    """[E, N, K] float -> FP4 codes [E, N, K/2], scales [E, N, K/16], scale_2 [E] or [E, 2] and the dequantized weights.
    Gate and up share one amax per expert, as ModelOpt's export does."""
    E, N, K = w.shape
    codes, scales, scale_2, deq = [], [], [], []
    for e in range(E):
        x = w[e].detach().float().cpu().numpy()
        amax = float(np.abs(x).max())
        parts = np.split(x, halves)
        q = [quantize(p, "nvfp4", amax=amax) for p in parts]
        codes.append(np.concatenate([a[0] for a in q])), scales.append(np.concatenate([a[1] for a in q]))
        scale_2.append([a[2] for a in q])
        deq.append(np.concatenate([dequantize(a[0], a[1], a[2]) for a in q]))
    s2 = np.array(scale_2, np.float32)
    return np.stack(codes), np.stack(scales), (s2 if halves == 2 else s2[:, 0].copy()), np.stack(deq)


def quantize_experts(experts: torch.nn.Module, top_k: int, *, max_tokens: int = 1024,
                     finalize: str = "split") -> FP4MoEExperts:
    """Quantizes a transformers experts module (gate_up_proj [E, 2I, H], down_proj [E, H, I])
    to NVFP4, writes the dequantized values back into it, and returns the fp4moe
    module that computes the same experts."""
    gu, dp = experts.gate_up_proj, experts.down_proj
    E, two_i, H = gu.shape
    dev = gu.device
    c13, s13, g13, d13 = _quantize_projection(gu, 2)
    c2, s2, g2, d2 = _quantize_projection(dp, 1)
    with torch.no_grad():
        gu.copy_(torch.from_numpy(d13).to(gu.dtype))
        dp.copy_(torch.from_numpy(d2).to(dp.dtype))
    cfg = {"name": "transformers", "hidden": H, "intermediate": two_i // 2, "num_experts": E, "top_k": int(top_k),
           "scoring": "softmax", "renormalize": False}

    def t(a, fp8=False):
        x = torch.from_numpy(np.ascontiguousarray(a)).to(dev)
        return x.view(torch.float8_e4m3fn) if fp8 else x

    layer = MoeLayer.from_tensors(cfg, t(c13), t(s13, True), t(g13), t(c2), t(s2, True), t(g2), max_tokens=max_tokens,
                                  finalize=finalize)
    return FP4MoEExperts(layer, E)



def moe_blocks(model: torch.nn.Module) -> List[torch.nn.Module]:
    """The MoE blocks of a transformers model: modules with .gate and .experts.gate_up_proj."""
    return [m for m in model.modules() if hasattr(m, "gate") and hasattr(getattr(m, "experts", None), "gate_up_proj")]


def use_fp4moe(model: torch.nn.Module, *, max_tokens: int = 1024, blocks: Optional[Iterable[torch.nn.Module]] = None):
    """Puts fp4moe behind every MoE block of ``model`` (its experts quantized to NVFP4
    in place: see quantize_experts). Returns the blocks changed."""
    changed = []
    for block in blocks if blocks is not None else moe_blocks(model):
        block.experts = quantize_experts(block.experts, block.gate.top_k, max_tokens=max_tokens)
        changed.append(block)
    return changed

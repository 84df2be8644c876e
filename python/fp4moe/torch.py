"""fp4moe as PyTorch ops: ``import fp4moe.torch`` registers

    torch.ops.fp4moe.moe_forward(hidden_states, router_logits, layer) -> Tensor
    torch.ops.fp4moe.moe_forward_routed(hidden_states, topk_ids, topk_weights, layer) -> Tensor
    torch.ops.fp4moe.moe_forward_out(hidden_states, router_logits, layer, out) -> ()
    torch.ops.fp4moe.moe_forward_routed_out(hidden_states, topk_ids, topk_weights, layer, out) -> ()

each with a CUDA implementation and a fake one (torch.compile, CUDA graphs), registered
straight on a torch.library.Library as vLLM registers its own ops (torch.library.custom_op's
Python dispatch costs tens of microseconds a call). ``layer`` is the id register() gives.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch

from . import _native
from ._registry import LayerRegistry, PreparedLayers
from .layer import MoeLayer

_layers = LayerRegistry()
_forward = _native.fn("layer_forward")
_forward_routed = _native.fn("layer_forward_routed")


def register(layer: MoeLayer) -> int:
    """An id for ``layer`` that the ops take (the layer stays alive while registered).
    Ids are never reused, so an unregistered layer's id is refused rather than running another layer."""
    return _layers.register(layer)


def unregister(lid: int) -> None:
    _layers.unregister(lid)


def _native_layer(lid: int) -> Any:
    return _layers[lid]._native


def _stream(t: torch.Tensor) -> int:
    return torch._C._cuda_getCurrentRawStream(t.device.index)


def _moe_forward_out(hidden_states: torch.Tensor, router_logits: torch.Tensor, layer: int, out: torch.Tensor) -> None:
    _forward(_native_layer(layer), hidden_states, router_logits, out, _stream(hidden_states))


def _moe_forward_routed_out(hidden_states: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, layer: int,
                            out: torch.Tensor) -> None:
    _forward_routed(_native_layer(layer), hidden_states, topk_ids, topk_weights, out, _stream(hidden_states))


def _moe_forward(hidden_states: torch.Tensor, router_logits: torch.Tensor, layer: int) -> torch.Tensor:
    out = torch.empty_like(hidden_states)
    _moe_forward_out(hidden_states, router_logits, layer, out)
    return out


def _moe_forward_routed(hidden_states: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                        layer: int) -> torch.Tensor:
    out = torch.empty_like(hidden_states)
    _moe_forward_routed_out(hidden_states, topk_ids, topk_weights, layer, out)
    return out


def _fake_forward(hidden_states, *args):
    return torch.empty_like(hidden_states)


def _fake_none(*args):
    return None


_lib = torch.library.Library("fp4moe", "FRAGMENT")
_OPS = (
    ("moe_forward", "(Tensor hidden_states, Tensor router_logits, int layer) -> Tensor", _moe_forward, _fake_forward),
    ("moe_forward_routed", "(Tensor hidden_states, Tensor topk_ids, Tensor topk_weights, int layer) -> Tensor",
     _moe_forward_routed, _fake_forward),
    ("moe_forward_out", "(Tensor hidden_states, Tensor router_logits, int layer, Tensor(a!) out) -> ()",
     _moe_forward_out, _fake_none),
    ("moe_forward_routed_out",
     "(Tensor hidden_states, Tensor topk_ids, Tensor topk_weights, int layer, Tensor(a!) out) -> ()",
     _moe_forward_routed_out, _fake_none),
)
for _name, _schema, _impl, _fake in _OPS:
    _lib.define(_name + _schema)
    _lib.impl(_name, _impl, "CUDA")
    _lib._register_fake(_name, _fake)


class FP4MoE(torch.nn.Module):
    """A module around a registered layer: forward(hidden_states, router_logits=None, *, topk_ids, topk_weights)."""

    def __init__(self, layer: MoeLayer):
        super().__init__()
        self.layer = layer
        self.layer_id = register(layer)

    def forward(self, hidden_states: torch.Tensor, router_logits: Optional[torch.Tensor] = None, *,
                topk_ids: Optional[torch.Tensor] = None, topk_weights: Optional[torch.Tensor] = None) -> torch.Tensor:
        if router_logits is not None:
            return torch.ops.fp4moe.moe_forward(hidden_states, router_logits, self.layer_id)
        return torch.ops.fp4moe.moe_forward_routed(hidden_states, topk_ids, topk_weights, self.layer_id)


# ---- the serving engines' functional form ----------------------------------------
_prepared = PreparedLayers()


def fused_moe(hidden_states: torch.Tensor, w13: torch.Tensor, w13_scale: torch.Tensor, w13_scale_2: Optional[torch.Tensor],
              w2: torch.Tensor, w2_scale: torch.Tensor, w2_scale_2: Optional[torch.Tensor], topk_weights: torch.Tensor,
              topk_ids: torch.Tensor, *, top_k: Optional[int] = None, global_num_experts: int = -1,
              local_experts: Optional[Tuple[int, int]] = None, w13_order: str = "gate_up",
              scale_layout: str = "linear", output: Optional[torch.Tensor] = None, max_tokens: int = 4096,
              deterministic: bool = True, activations: str = "bf16", fp8_rounds_nvfp4: bool = False) -> torch.Tensor:
    """What vLLM's fused_marlin_moe and FlashInfer's cutlass_fused_moe take: hidden
    states bf16 [T, H], the engine's FP4 expert tensors (docs/python.md), its top-k
    weights fp32 and ids int32 [T, k] (global expert ids), ``output=``. The first call
    for a set of weights prepares them once on the GPU, kept while those weights' memory
    lives; later calls only run the layer. ``activations="fp8"`` with NVFP4 tensors needs
    ``fp8_rounds_nvfp4=True`` (each weight rounded to e4m3; docs/fp8.md)."""
    E_local = w13.shape[0]
    E = global_num_experts if global_num_experts > 0 else E_local
    begin, count = local_experts if local_experts is not None else (0, E_local)
    T = hidden_states.shape[0]
    key = (w13.data_ptr(), w2.data_ptr(), w13_scale.data_ptr(), w2_scale.data_ptr(), tuple(w13.shape), tuple(w2.shape),
           E, begin, w13_order, scale_layout, activations, fp8_rounds_nvfp4)
    # The storages, not the tensors: an engine may pass a new view of the same weights every call.
    owners = tuple(t.untyped_storage() for t in (w13, w2, w13_scale, w2_scale))
    layer = _prepared.get(key, owners)
    if layer is None or layer.max_tokens < T:
        k = top_k if top_k is not None else topk_ids.shape[1]
        cfg = {"name": "engine", "hidden": hidden_states.shape[1], "intermediate": w2.shape[2] * 2, "num_experts": E,
               "top_k": k, "scoring": "softmax", "renormalize": False}
        layer = MoeLayer.from_tensors(cfg, w13, w13_scale, w13_scale_2, w2, w2_scale, w2_scale_2, w13_order=w13_order,
                                      scale_layout=scale_layout, local_experts=(begin, count),
                                      max_tokens=max(T, max_tokens), finalize="split" if deterministic else "fused",
                                      activations=activations, fp8_rounds_nvfp4=fp8_rounds_nvfp4)
        _prepared.put(key, owners, layer)
    out = output if output is not None else torch.empty_like(hidden_states)
    _forward_routed(layer._native, hidden_states, topk_ids, topk_weights, out, _stream(hidden_states))
    return out

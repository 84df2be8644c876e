"""The host side on numpy arrays: FP4 quantize and dequantize (NVFP4 exactly as
ModelOpt's export, MXFP4), the CPU reference router and the CPU reference
layer (weights dequantized exactly, accumulation in double)."""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import _native
from .config import as_config_json

_BLOCK = {"nvfp4": 16, "mxfp4": 32}


def _block(fmt: str) -> int:
    if fmt not in _BLOCK:
        raise ValueError(f"format '{fmt}' is not nvfp4 or mxfp4")
    return _BLOCK[fmt]


def quantize(x: np.ndarray, format: str = "nvfp4", amax: Optional[float] = None) -> Tuple[np.ndarray, np.ndarray, float]:
    """x fp32 [N, K] -> (packed uint8 [N, K/2], block scales uint8 [N, K/block], weight_scale_2).
    NVFP4 with ``amax`` given uses it (ModelOpt shares gate/up's amax)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise ValueError(f"x: expected a 2-D array [N, K], got shape {x.shape}")
    b = _block(format)
    packed = np.empty((x.shape[0], x.shape[1] // 2), dtype=np.uint8)
    scales = np.empty((x.shape[0], x.shape[1] // b), dtype=np.uint8)
    ws2 = _native.fn("quantize")(x, format, float(amax) if amax is not None else -1.0, packed, scales)
    return packed, scales, float(ws2)


def dequantize(packed: np.ndarray, scales: np.ndarray, scale_2: float = 1.0, format: str = "nvfp4") -> np.ndarray:
    """The exact fp32 values of an FP4 matrix: e2m1 * fl(block scale * weight_scale_2)."""
    out = np.empty((packed.shape[0], packed.shape[1] * 2), dtype=np.float32)
    _native.fn("dequantize")(packed, scales, float(scale_2), format, out)
    return out


def route(config: Any, router_logits: np.ndarray, e_score_correction_bias: Optional[np.ndarray] = None):
    """The reference router: (topk_ids int32 [T, k], topk_weights fp32 [T, k]), bitwise the GPU router's."""
    cfg = as_config_json(config)
    import json

    k = json.loads(cfg)["top_k"]
    logits = np.ascontiguousarray(router_logits, dtype=np.float32)
    ids = np.empty((logits.shape[0], k), dtype=np.int32)
    w = np.empty((logits.shape[0], k), dtype=np.float32)
    _native.fn("route_reference")(cfg, logits, e_score_correction_bias, ids, w)
    return ids, w


def moe_forward(config: Any, w13: np.ndarray, w13_scale: np.ndarray, w13_scale_2: Optional[np.ndarray],
                w2: np.ndarray, w2_scale: np.ndarray, w2_scale_2: Optional[np.ndarray], hidden_states: np.ndarray, *,
                router_logits: Optional[np.ndarray] = None, topk_ids: Optional[np.ndarray] = None,
                topk_weights: Optional[np.ndarray] = None, shared_expert: Optional[Sequence[Any]] = None,
                e_score_correction_bias: Optional[np.ndarray] = None, format: Optional[str] = None,
                activations: str = "bf16") -> np.ndarray:
    """The CPU reference MoE layer, fp32 [T, H], on the tensors MoeLayer.from_tensors
    takes (w13 [gate; up], linear scales), as numpy arrays. hidden_states fp32 [T, H].
    ``activations="fp8"``: each routed GEMM's input rows rounded to e4m3 with one
    scale per row, and NVFP4 weights each rounded to e4m3 through the kernels'
    table, as the layer built with that option (and ``fp8_rounds_nvfp4``)
    computes (docs/fp8.md)."""
    fmt = format or ("mxfp4" if w13_scale_2 is None else "nvfp4")
    x = np.ascontiguousarray(hidden_states, dtype=np.float32)
    out = np.empty(x.shape, dtype=np.float32)
    s = list(shared_expert) if shared_expert is not None else [None] * 6
    if shared_expert is not None:
        for i, r in enumerate((3, 3, 1, 3, 3, 1)):
            if s[i] is not None and np.ndim(s[i]) == r - 1:
                s[i] = np.asarray(s[i]).reshape((1,) + np.shape(s[i]))
    _native.fn("reference_forward")(as_config_json(config), fmt, w13, w13_scale, w13_scale_2, w2, w2_scale, w2_scale_2,
                                     s[0], s[1], s[2], s[3], s[4], s[5], e_score_correction_bias, x, router_logits,
                                     topk_ids, topk_weights, out, activations)
    return out

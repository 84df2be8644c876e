"""fp4moe.MoeLayer: the whole MoE layer on the GPU, built from a ModelOpt
checkpoint or from FP4 tensors a serving engine already holds on the device."""

from __future__ import annotations

import json
import sys
from typing import Any, Optional, Sequence, Tuple

from . import _native
from .config import as_config_json


ACTIVATIONS = ("bf16", "fp8")


def _options_json(*, max_tokens, finalize, deterministic, tune_cache, use_tune_cache, device, split_k,
                  activations="bf16", shared_expert_in_routed=False, balanced_split=False, fp8_rounds_nvfp4=False,
                  max_plans=256) -> str:
    """LayerOptions as the native module reads them (python/native/config_json.cpp), each named."""
    if activations not in ACTIVATIONS:
        raise ValueError(f"activations '{activations}' is not one of {', '.join(ACTIVATIONS)}")
    if int(max_plans) < 0:
        raise ValueError(f"max_plans {max_plans} is negative (0 keeps every plan)")
    o = {"max_tokens": int(max_tokens), "finalize": finalize, "deterministic": bool(deterministic),
         "use_tune_cache": bool(use_tune_cache), "split_k": bool(split_k), "activations": activations,
         "shared_expert_in_routed_gemms": bool(shared_expert_in_routed), "balanced_split": bool(balanced_split),
         "fp8_rounds_nvfp4": bool(fp8_rounds_nvfp4), "max_plans": int(max_plans)}
    if tune_cache is not None:
        o["tune_cache"] = str(tune_cache)
    if device is not None:
        o["device"] = int(device)
    return json.dumps(o)


def _is_torch(t: Any) -> bool:
    return type(t).__module__.startswith("torch")


def _bytes_view(t: Any) -> Any:
    """FP8 block scales as uint8 bytes (the same memory): every DLPack version takes those."""
    if t is not None and _is_torch(t) and t.element_size() == 1 and t.is_floating_point():
        import torch

        return t.view(torch.uint8)
    return t


def _with_expert_dim(t: Any, rank: int) -> Any:
    """A shared expert's tensor with a leading expert dimension of 1 (a view)."""
    if t is None:
        return None
    if len(t.shape) == rank - 1:
        return t.reshape((1,) + tuple(t.shape))
    return t


def _current_stream(t: Any) -> int:
    """The caller's current CUDA stream for a torch tensor; -1 (tvm-ffi's current stream) otherwise."""
    if _is_torch(t):
        import torch

        try:
            return torch._C._cuda_getCurrentRawStream(t.device.index)
        except AttributeError:
            return torch.cuda.current_stream(t.device).cuda_stream
    return -1


class MoeLayer:
    """An MoE layer: routing (or the caller's routing), permutation, GEMM1 +
    SwiGLU, GEMM2, the shared expert and the weighted sum, on one GPU.

    Forward runs on the caller's current stream, synchronises nothing and
    allocates nothing when ``out`` is given; it refuses T above max_tokens,
    wrong dtypes, shapes, devices and non-contiguous tensors, naming the argument.
    """

    def __init__(self, native: Any):
        self._native = native
        self._info = json.loads(_native.fn("layer_info")(native))

    # ---- construction -------------------------------------------------------
    @classmethod
    def from_modelopt(cls, path: str, layer: int, *, max_tokens: int = 1024, finalize: str = "auto",
                      deterministic: bool = False, tune_cache: Optional[str] = None, use_tune_cache: bool = True,
                      device: Optional[int] = None, split_k: bool = True, activations: str = "bf16",
                      shared_expert_in_routed: bool = False, balanced_split: bool = False,
                      fp8_rounds_nvfp4: bool = False, max_plans: int = 256) -> "MoeLayer":
        """MoE layer ``layer`` of a ModelOpt NVFP4 checkpoint directory (config.json, safetensors),
        or of a gpt-oss checkpoint in OpenAI's own MXFP4 layout (config.json quant_method mxfp4).
        ``activations="fp8"``: the routed experts' GEMMs read e4m3 rows (sm_90; docs/fp8.md); NVFP4
        weights need ``fp8_rounds_nvfp4=True`` (each weight rounded to e4m3). ``max_plans``: forward
        plans kept (LayerOptions::max_plans; 0 keeps all). ``shared_expert_in_routed`` and
        ``balanced_split``: LayerOptions::shared_expert_in_routed_gemms and ::balanced_split, off by
        default (measured slower: docs/planner.md, docs/kernels.md)."""
        opts = _options_json(max_tokens=max_tokens, finalize=finalize, deterministic=deterministic,
                             tune_cache=tune_cache, use_tune_cache=use_tune_cache, device=device, split_k=split_k,
                             activations=activations, shared_expert_in_routed=shared_expert_in_routed,
                             balanced_split=balanced_split, fp8_rounds_nvfp4=fp8_rounds_nvfp4, max_plans=max_plans)
        return cls(_native.fn("layer_from_modelopt")(str(path), int(layer), opts))

    @classmethod
    def random(cls, config: Any, *, seed: int = 1, format: str = "nvfp4", max_tokens: int = 1024,
               finalize: str = "auto", deterministic: bool = False, tune_cache: Optional[str] = None,
               use_tune_cache: bool = True, device: Optional[int] = None, split_k: bool = True,
               activations: str = "bf16", shared_expert_in_routed: bool = False, balanced_split: bool = False,
               fp8_rounds_nvfp4: bool = False, max_plans: int = 256) -> "MoeLayer":
        """A layer of random FP4 weights (the same for the same config, format and seed as
        the CLI's ``--seed`` and ``ParallelMoeLayer.random``): for tests and benchmarks."""
        opts = _options_json(max_tokens=max_tokens, finalize=finalize, deterministic=deterministic,
                             tune_cache=tune_cache, use_tune_cache=use_tune_cache, device=device, split_k=split_k,
                             activations=activations, shared_expert_in_routed=shared_expert_in_routed,
                             balanced_split=balanced_split, fp8_rounds_nvfp4=fp8_rounds_nvfp4, max_plans=max_plans)
        return cls(_native.fn("layer_from_random")(as_config_json(config), str(format), int(seed), opts))

    @classmethod
    def from_tensors(cls, config: Any, w13: Any, w13_scale: Any, w13_scale_2: Any, w2: Any, w2_scale: Any,
                     w2_scale_2: Any, *, w13_order: str = "gate_up", scale_layout: str = "linear",
                     w13_bias: Any = None, w2_bias: Any = None, router_bias: Any = None,
                     format: Optional[str] = None, router_weight: Any = None, e_score_correction_bias: Any = None,
                     shared_expert: Optional[Sequence[Any]] = None, local_experts: Optional[Tuple[int, int]] = None,
                     max_tokens: int = 1024, finalize: str = "auto", deterministic: bool = False,
                     tune_cache: Optional[str] = None, use_tune_cache: bool = True, split_k: bool = True,
                     activations: str = "bf16", shared_expert_in_routed: bool = False,
                     balanced_split: bool = False, fp8_rounds_nvfp4: bool = False,
                     max_plans: int = 256) -> "MoeLayer":
        """A layer from FP4 expert tensors on the GPU, in the layout vLLM and SGLang hold them:

        - w13 uint8 [E, 2I, H/2] (gate and up, ``w13_order``), w13_scale float8_e4m3fn (NVFP4)
          or float8_e8m0fnu (MXFP4) [E, 2I, H/block] (``scale_layout`` "linear", or
          "swizzled_128x4" with rows padded to 128 and scale columns to 4), w13_scale_2
          fp32 [E] or [E, 2] (one per half, in w13's order; None for MXFP4);
        - w2 uint8 [E, H, I/2], w2_scale [E, H, I/block], w2_scale_2 fp32 [E].

        ``w13_order``: "gate_up", "up_gate" (w13's halves), or "interleaved" (gate and up
        rows alternating, as gpt-oss's checkpoint holds them). ``w13_bias`` [E, 2I] in
        w13's row order and ``w2_bias`` [E, H], fp32 or bf16: the models with expert
        biases (gpt-oss) need them; ``router_bias`` fp32 [E] goes with ``router_weight``
        (gpt-oss's router). H and I need not be multiples of 128 (gpt-oss's
        2880): on sm_90 the layer runs them as they are (to the next multiple of
        64); elsewhere the prepare pads with zero weights, as from host weights.

        ``local_experts=(offset, count)``: the tensors hold only those experts of the
        model's E (expert parallelism inside an engine that dispatches itself); ids
        outside contribute nothing. ``shared_expert``: (w13, w13_scale, w13_scale_2,
        w2, w2_scale, w2_scale_2) of the shared expert, with or without the leading 1.
        The prepare into the kernels' layout runs on the GPU.
        """
        fmt = format or ("mxfp4" if w13_scale_2 is None else "nvfp4")
        begin, count = local_experts if local_experts is not None else (0, -1)
        s = [None] * 6
        if shared_expert is not None:
            if len(shared_expert) != 6:
                raise ValueError(f"shared_expert: expected 6 tensors (w13, w13_scale, w13_scale_2, w2, w2_scale, "
                                 f"w2_scale_2), got {len(shared_expert)}")
            s = [_with_expert_dim(shared_expert[i], r) for i, r in enumerate((3, 3, 1, 3, 3, 1))]
            if s[2] is not None and len(s[2].shape) == 0:
                s[2] = s[2].reshape((1,))
            if s[5] is not None and len(s[5].shape) == 0:
                s[5] = s[5].reshape((1,))
        device = w13.device.index if _is_torch(w13) else None
        opts = _options_json(max_tokens=max_tokens, finalize=finalize, deterministic=deterministic,
                             tune_cache=tune_cache, use_tune_cache=use_tune_cache, device=device, split_k=split_k,
                             activations=activations, shared_expert_in_routed=shared_expert_in_routed,
                             balanced_split=balanced_split, fp8_rounds_nvfp4=fp8_rounds_nvfp4, max_plans=max_plans)
        native = _native.fn("layer_from_tensors")(
            as_config_json(config), opts, fmt, w13, _bytes_view(w13_scale), w13_scale_2, w2, _bytes_view(w2_scale),
            w2_scale_2, w13_order, scale_layout, int(begin), int(count), s[0], _bytes_view(s[1]), s[2], s[3],
            _bytes_view(s[4]), s[5], e_score_correction_bias, router_weight, w13_bias, w2_bias, router_bias)
        return cls(native)

    # ---- forward --------------------------------------------------------------
    def __call__(self, hidden_states: Any, router_logits: Any = None, *, topk_ids: Any = None,
                 topk_weights: Any = None, out: Any = None, stream: Optional[int] = None) -> Any:
        """out = MoE(hidden_states): bf16 [T, H]. Give router_logits fp32 [T, E]
        (fp4moe routes), or topk_ids int32 [T, k] and topk_weights fp32 [T, k]
        (the engine's own routing, global expert ids), or neither when the layer
        holds a router weight. ``out`` bf16 [T, H] is written in place."""
        if out is None:
            if not _is_torch(hidden_states):
                raise ValueError("out: required unless hidden_states is a torch tensor")
            import torch

            out = torch.empty_like(hidden_states)
        s = _current_stream(hidden_states) if stream is None else int(stream)
        if router_logits is not None:
            if topk_ids is not None or topk_weights is not None:
                raise ValueError("give router_logits or topk_ids and topk_weights, not both")
            _native.fn("layer_forward")(self._native, hidden_states, router_logits, out, s)
        elif topk_ids is not None or topk_weights is not None:
            if topk_ids is None or topk_weights is None:
                raise ValueError("topk_ids and topk_weights come together")
            _native.fn("layer_forward_routed")(self._native, hidden_states, topk_ids, topk_weights, out, s)
        else:
            if not self._info["has_router_weight"]:
                raise ValueError("router_logits: required (the layer holds no router_weight)")
            _native.fn("layer_forward_from_hidden")(self._native, hidden_states, out, s)
        return out

    forward = __call__

    def topk(self, tokens: int, ids_out: Any = None, weights_out: Any = None, stream: Optional[int] = None):
        """The routing of the last forward that routed (ids int32 [T, k], weights fp32 [T, k])."""
        k = self.config["top_k"]
        if ids_out is None or weights_out is None:
            import torch

            dev = torch.device("cuda", self._info["device"])
            ids_out = torch.empty((tokens, k), dtype=torch.int32, device=dev)
            weights_out = torch.empty((tokens, k), dtype=torch.float32, device=dev)
        s = _current_stream(ids_out) if stream is None else int(stream)
        _native.fn("layer_topk")(self._native, ids_out, weights_out, s)
        return ids_out, weights_out

    def check_status(self, stream: Optional[int] = None) -> None:
        """Reads and clears the status on ``stream`` (default: torch's current stream on the layer's
        device where torch is loaded, as the forwards use; else tvm-ffi's), synchronising that stream;
        raises naming a NaN/Inf router logit, an expert id out of range, or the first token whose
        output is NaN or Inf."""
        if stream is None:
            torch = sys.modules.get("torch")
            stream = torch.cuda.current_stream(self._info["device"]).cuda_stream if torch is not None else -1
        _native.fn("layer_check_status")(self._native, int(stream))

    # ---- what it is -------------------------------------------------------------
    def describe(self, tokens: int) -> str:
        """The tiles each GEMM runs for ``tokens`` tokens (tuned or the planner's default)."""
        return str(_native.fn("layer_describe")(self._native, int(tokens)))

    def tune(self, tokens: Sequence[int]) -> list:
        """Times every tile the planner accepts per GEMM and token bucket; keeps the fastest in the tune cache."""
        return json.loads(_native.fn("layer_tune")(self._native, json.dumps([int(t) for t in tokens])))

    @property
    def config(self) -> dict:
        return dict(self._info["config"])

    @property
    def info(self) -> dict:
        return dict(self._info)

    @property
    def max_tokens(self) -> int:
        return int(self._info["max_tokens"])

    @property
    def local_experts(self) -> Tuple[int, int]:
        b, c = self._info["local_experts"]
        return int(b), int(c)

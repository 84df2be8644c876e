"""What every peer engine module provides, and what it is given.

A peer engine (torch_bf16, humming, openai_triton_kernels) is a module with
  NAME: str                       the engine, as tables name it
  version() -> str                its pinned version (raises PeerUnavailable when not installed)
  variants(problem) -> list[Variant]
                                  every mode it has for this problem; one it cannot run
                                  carries `unsupported` (the reason the table prints)
  make(problem, variant) -> Peer  prepares the weights once (not timed)

The harness (bench/peers.py) checks each Step's output against the exact
reference (bench/peer_engines/reference.py) before it times `run`, replayed from a
CUDA graph at the run's steady state. Everything an engine does per call
(routing alignment, metadata, activation quantization, row gathers) must be
inside `run`; what it does once per weight set belongs in make().
"""
from dataclasses import dataclass, field
from typing import Any, Callable, Optional


class PeerUnavailable(Exception):
    """The engine cannot run here (not installed, no GPU, wrong arch): the reason."""


@dataclass
class Variant:
    name: str                        # "humming w4a8 g128": engine and mode
    activations: str = "bf16"        # "bf16" or "fp8" (the tolerance follows it)
    unsupported: Optional[str] = None  # why this mode cannot run this problem
    options: dict = field(default_factory=dict)  # engine-private settings


@dataclass
class Projection:
    """One stacked FP4 projection, as fp4moe holds it (and checkpoints do):
    codes  uint8 [E, N, K/2], element 2i in the low nibble (e2m1: sign bit 3)
    scales uint8 [E, N, K/G]: e4m3fn bits (nvfp4, G = 16) or e8m0 bits (mxfp4, G = 32)
    global_scale fp32 [E] (nvfp4's weight_scale_2; ones for mxfp4)
    bias fp32 [E, N] or None
    A weight is e2m1(code) * scale(block) * global_scale[e]."""
    codes: Any
    scales: Any
    global_scale: Any
    bias: Any = None

    @property
    def experts(self):
        return self.codes.shape[0]

    @property
    def n(self):
        return self.codes.shape[1]

    @property
    def k(self):
        return self.codes.shape[2] * 2


@dataclass
class MoeProblem:
    """The layer benchmarked, on the GPU. w13's rows are gate (0..I-1) then up
    (I..2I-1), not interleaved; w2 is [E, H, I]. Routing rule as MoeConfig holds it."""
    model: str
    format: str                # "nvfp4" or "mxfp4"
    hidden: int                # H
    intermediate: int          # I
    experts: int               # E
    top_k: int                 # k
    w13: Projection            # [E, 2I, H]
    w2: Projection             # [E, H, I]
    shared13: Optional[Projection] = None   # [1, 2Is, H]
    shared2: Optional[Projection] = None    # [1, H, Is]
    scoring: str = "softmax"   # "softmax" or "sigmoid"
    renormalize: bool = True
    n_group: int = 1
    topk_group: int = 1
    correction_bias: Any = None   # fp32 [E] or None (sigmoid rule: added only to choose)
    routed_scaling_factor: float = 1.0
    activation: str = "swiglu"    # "swiglu" or "clamped_swiglu" (gpt-oss)
    swiglu_limit: float = 7.0
    swiglu_alpha: float = 1.702

    @property
    def group_size(self):
        return 16 if self.format == "nvfp4" else 32


@dataclass
class Case:
    """One token count of the benchmark, on the GPU.
    x bf16 [T, H]; logits fp32 [T, E] (the router's input, as fp4moe got it);
    topk_ids int32 [T, k] and topk_weights fp32 [T, k]: fp4moe's routing of these
    logits (the GEMM steps use it, so every engine multiplies the same rows);
    a2 bf16 [T*k, I]: GEMM2's input, row t*k + j for token t's j-th choice."""
    tokens: int
    x: Any
    logits: Any
    topk_ids: Any
    topk_weights: Any
    a2: Any = None


@dataclass
class Step:
    """One timed sequence. run() does every per-call thing and returns the
    output; to_reference(output) maps it to the reference layout of `kind`:
      "gemm1"           fp32 [T, k, 2I]: x @ w13[e].T + bias, gate then up
      "gemm1_activated" fp32 [T, k, I]: the activation applied to that
      "gemm2"           fp32 [T, k, H]: a2 @ w2[e].T + bias (not yet weighted)
      "gemm2_weighted"  fp32 [T, H]: sum over j of topk_weights[t, j] * that
      "layer"           fp32 [T, H]: the layer's output (routing from logits, shared expert)
    note: what the step includes, for the table (e.g. "align + GEMM + SwiGLU")."""
    kind: str
    run: Callable[[], Any]
    to_reference: Callable[[Any], Any]
    note: str = ""


class Peer:
    """A prepared engine for one problem and variant."""

    def gemm1(self, case: Case) -> Step:
        raise NotImplementedError

    def gemm2(self, case: Case) -> Step:
        raise NotImplementedError

    def layer(self, case: Case) -> Step:
        raise NotImplementedError

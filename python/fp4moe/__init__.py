"""fp4moe: FP4 (NVFP4, MXFP4) Mixture-of-Experts layers on NVIDIA GPUs.

    import fp4moe
    layer = fp4moe.MoeLayer.from_tensors("glm5", w13, w13_scale, w13_scale_2, w2, w2_scale, w2_scale_2,
                                         e_score_correction_bias=bias, max_tokens=2048)
    out = layer(hidden_states, router_logits)                  # or topk_ids=, topk_weights=

Across GPUs: ``fp4moe.ParallelMoeLayer`` on a torch.distributed NCCL group or an
engine's NCCL communicator (expert or tensor parallelism).

Optional: ``import fp4moe.torch`` registers torch.ops.fp4moe.*; ``fp4moe.transformers``
puts fp4moe behind transformers' GLM-5 and DeepSeek-V3 MoE blocks.
"""

from . import _native
from .config import checkpoint_format, config_from_hf, preset, preset_names
from .layer import MoeLayer
from .parallel import ParallelMoeLayer, nccl_unique_id
from .planner import plan
from .reference import dequantize, moe_forward, quantize, route

__version__ = str(_native.fn("version")())

__all__ = ["MoeLayer", "ParallelMoeLayer", "nccl_unique_id", "plan", "preset", "preset_names", "checkpoint_format", "config_from_hf", "quantize", "dequantize", "route",
           "moe_forward", "__version__"]

"""A PyTorch reference of fp4moe's W4A8 arithmetic around a transformers experts
module's own weights: each GEMM's input rows quantized to e4m3 with one scale
per row (amax / 448, round to nearest even; the intermediate first rounded to
bf16, as fp4moe stores it), the products in fp32. The yardstick for fp4moe's
FP8 error against the module (docs/fp8.md): fp4moe computes the same function
on FP8 tensor cores, so its error may exceed this reference's only by its
accumulation's."""

import torch


def e4m3_rows(x: torch.Tensor) -> torch.Tensor:
    """fp32 [R, C] -> the values of its rows quantized to e4m3 with a scale per row."""
    amax = x.abs().amax(dim=1, keepdim=True)
    scale = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    return (x / scale).to(torch.float8_e4m3fn).float() * scale


def dense_weights(ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Routing weights [T, k] for ids [T, k], also when a block passes them dense [T, E]."""
    return weights.gather(1, ids.long()) if weights.shape[1] != ids.shape[1] else weights


def experts_forward(experts: torch.nn.Module, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor,
                    *, gpt_oss: bool = False, quantize: bool = True) -> torch.Tensor:
    """x [T, H] (bf16 values) through the top-k experts of a transformers experts module:
    gate_up_proj [E, 2I, H] (gate first) and down_proj [E, H, I] with SwiGLU, or
    (gpt_oss) gate_up_proj [E, H, 2I] (gate the even columns), down_proj [E, I, H],
    their biases and the clamped SwiGLU. quantize=False: the same without the e4m3 rows."""
    q = e4m3_rows if quantize else (lambda t: t)
    x = x.reshape(-1, x.shape[-1]).float()
    ids = ids.reshape(x.shape[0], -1)
    weights = weights.reshape(x.shape[0], -1)
    w = dense_weights(ids, weights).float()
    xq = q(x)
    out = torch.zeros_like(x)
    with torch.no_grad():
        for e in ids.unique().tolist():
            tok, slot = (ids == e).nonzero(as_tuple=True)
            if gpt_oss:
                limit, alpha = getattr(experts, "limit", 7.0), getattr(experts, "alpha", 1.702)
                h = xq[tok] @ experts.gate_up_proj[e].float() + experts.gate_up_proj_bias[e].float()
                g = h[:, ::2].clamp(max=limit)
                u = h[:, 1::2].clamp(-limit, limit)
                a = g * torch.sigmoid(alpha * g) * (u + 1)
            else:
                h = xq[tok] @ experts.gate_up_proj[e].float().T
                i = h.shape[1] // 2
                a = torch.nn.functional.silu(h[:, :i]) * h[:, i:]
            a = q(a.to(torch.bfloat16).float())
            if gpt_oss:
                y = a @ experts.down_proj[e].float() + experts.down_proj_bias[e].float()
            else:
                y = a @ experts.down_proj[e].float().T
            out.index_add_(0, tok, y * w[tok, slot, None])
    return out


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def expect_fp8_error_within_the_reference(name, experts, fp8_experts, x, ids, w, gpt_oss=False):
    """fp4moe's W4A8 experts against the module's own output (fp32, on the
    bf16-rounded input): at most 1.1x the error of the PyTorch reference that
    quantizes the activations as fp4moe does, and at most 6e-2. The reference
    without its quantization must be the module's function, within the
    module's own rounding (1.7e-3 on the H200 with transformers 5.17, its
    fp32 GEMMs apparently at TF32; a wrong gate/up order or activation would
    be far above)."""
    with torch.no_grad():
        xb = x.reshape(-1, x.shape[-1]).to(torch.bfloat16).float()
        module = experts(xb, ids, w) if not gpt_oss else experts(xb, router_indices=ids, routing_weights=w)
        module = module.reshape(xb.shape).float()
        unquantized = experts_forward(experts, xb, ids, w, gpt_oss=gpt_oss, quantize=False)
        quantized = experts_forward(experts, xb, ids, w, gpt_oss=gpt_oss)
        got = fp8_experts(xb, ids, w) if not gpt_oss else fp8_experts(xb, router_indices=ids, routing_weights=w)
    got = got.reshape(xb.shape)
    e_same, e_got, e_ref, e_between = rel(unquantized, module), rel(got, module), rel(quantized, module), rel(got, quantized)
    print(f"{name}: W4A8 experts rel err {e_got:.3e} against the module; the PyTorch reference quantizing the same "
          f"way {e_ref:.3e} (ratio {e_got / e_ref:.3f}); fp4moe against that reference {e_between:.3e}; the "
          f"reference unquantized against the module {e_same:.1e}")
    assert e_same < 5e-3, "the reference's unquantized form is the module's own function"
    assert e_got <= 1.1 * e_ref and e_got < 6e-2
    return e_got, e_ref


def captured_experts_call(block: torch.nn.Module, x: torch.Tensor):
    """Runs block(x) and returns what it passed its experts: (hidden_states [T, H], ids [T, k], weights)."""
    seen = {}

    def grab(module, args, kwargs):
        seen["x"] = args[0] if args else kwargs["hidden_states"]
        seen["ids"] = args[1] if len(args) > 1 else kwargs.get("top_k_index", kwargs.get("router_indices"))
        seen["w"] = args[2] if len(args) > 2 else kwargs.get("top_k_weights", kwargs.get("routing_weights"))

    h = block.experts.register_forward_pre_hook(grab, with_kwargs=True)
    try:
        with torch.no_grad():
            block(x)
    finally:
        h.remove()
    return seen["x"], seen["ids"], seen["w"]

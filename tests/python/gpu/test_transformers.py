"""fp4moe behind transformers' GLM-5 and DeepSeek-V3 MoE blocks: the module's own
router and shared experts, its experts quantized to NVFP4 (the module keeps the
dequantized values), the output within 3e-3 of the module's own; and a whole
small model's forward."""

import copy

import pytest
import torch

transformers = pytest.importorskip("transformers")
import fp4moe.transformers as fmt  # noqa: E402


def small_config(kind):
    common = dict(hidden_size=256, intermediate_size=512, moe_intermediate_size=128, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=4, n_routed_experts=16, num_experts_per_tok=4,
                  n_shared_experts=1, n_group=4, topk_group=2, first_k_dense_replace=1, vocab_size=512,
                  q_lora_rank=64, kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32,
                  routed_scaling_factor=2.5, norm_topk_prob=True)
    if kind == "deepseek_v3":
        return transformers.DeepseekV3Config(**common)
    cls = getattr(transformers, "GlmMoeDsaConfig", None)
    if cls is None:
        pytest.skip("this transformers has no GlmMoeDsaConfig")
    common.update(n_group=1, topk_group=1)
    return cls(**common)


def model_for(kind):
    torch.manual_seed(0)
    cfg = small_config(kind)
    # fp32: the module then computes with the dequantized weights exactly; fp4moe's
    # activations are bf16 (the inputs below are bf16 values, exact in either)
    model = transformers.AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32).cuda().eval()
    with torch.no_grad():  # random routers and biases, so that routing is not degenerate
        for block in fmt.moe_blocks(model):
            block.gate.weight.normal_(0, 0.05)
            if hasattr(block.gate, "e_score_correction_bias"):
                block.gate.e_score_correction_bias.normal_(0, 0.01)
            block.experts.gate_up_proj.normal_(0, 0.05)
            block.experts.down_proj.normal_(0, 0.05)
    return model


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


@pytest.mark.parametrize("kind", ["glm_moe_dsa", "deepseek_v3"])
def test_block_and_whole_model(kind):
    """The reference is the module itself in fp32 holding the dequantized weights
    exactly. fp4moe's activations are bf16 (W4A16), so its error floor is bf16
    rounding: the whole model is also run through transformers in bf16, and
    fp4moe's whole-model error must stay within 3e-3 or that bf16 model's own."""
    model = model_for(kind)
    blocks = fmt.moe_blocks(model)
    assert len(blocks) == 2
    x = torch.randn(2, 24, model.config.hidden_size, device="cuda").to(torch.bfloat16).float()
    ids = torch.randint(0, model.config.vocab_size, (2, 24), device="cuda")
    with torch.no_grad():
        # quantize in place first (the module keeps the dequantized weights), then compare module and fp4moe
        original = [b.experts for b in blocks]
        fmt.use_fp4moe(model, max_tokens=64)
        fp4 = [b.experts for b in blocks]
        for b, o in zip(blocks, original):
            b.experts = o  # the module with the dequantized weights: the reference
        want_block = blocks[0](x)
        want_model = model(ids).logits
        routing = blocks[0].gate(x.view(-1, x.shape[-1]))
        bf16_logits = copy.deepcopy(model).to(torch.bfloat16)(ids).logits.float()
        for b, f in zip(blocks, fp4):
            b.experts = f
        got_block = blocks[0](x)
        got_model = model(ids).logits
    torch.cuda.synchronize()
    top_ids = routing[-1] if isinstance(routing, tuple) else None
    assert top_ids is not None and top_ids.shape[-1] == model.config.num_experts_per_tok
    e_block, e_model, e_bf16 = rel(got_block, want_block), rel(got_model, want_model), rel(bf16_logits, want_model)
    print(f"{kind}: MoE block rel err {e_block:.2e}; whole model logits rel err {e_model:.2e} "
          f"(transformers in bf16: {e_bf16:.2e})")
    assert e_block < 3e-3
    assert e_model < max(3e-3, e_bf16)

"""fp4moe behind transformers' GLM-5 and DeepSeek-V3 MoE blocks: the module's own
router and shared experts, its experts quantized to NVFP4 (the module keeps the
dequantized values), the output within 3e-3 of the module's own; and a whole
small model's forward."""

import copy
import json
import os
import subprocess

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


def save_hf_checkpoint(model, d):
    """The model as a Hugging Face checkpoint: per-expert gate/up/down_proj (the
    layout checkpoints hold; transformers fuses them when it loads), config.json."""
    from safetensors.torch import save_file

    out = {}
    for name, t in model.state_dict().items():
        if name.endswith("mlp.experts.gate_up_proj"):
            pre, I = name[: -len("gate_up_proj")], t.shape[1] // 2
            for e in range(t.shape[0]):
                out[f"{pre}{e}.gate_proj.weight"] = t[e, :I].contiguous()
                out[f"{pre}{e}.up_proj.weight"] = t[e, I:].contiguous()
        elif name.endswith("mlp.experts.down_proj"):
            pre = name[: -len("down_proj")]
            for e in range(t.shape[0]):
                out[f"{pre}{e}.down_proj.weight"] = t[e].contiguous()
        else:
            out[name] = t.contiguous()
    os.makedirs(d)
    save_file({k: v.cpu() for k, v in out.items()}, os.path.join(d, "model.safetensors"))
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(model.config.to_json_string())


@pytest.mark.parametrize("kind", ["glm_moe_dsa", "deepseek_v3"])
def test_load_modelopt_checkpoint(kind, tmp_path):
    """A ModelOpt NVFP4 checkpoint (written by fp4moe quantize from the model's own
    weights) loaded into transformers' model with fp4moe experts, against the same
    checkpoint with its experts dequantized into the module."""
    cli = os.environ.get("FP4MOE_CLI")
    if not cli or not os.path.exists(cli):
        pytest.skip("FP4MOE_CLI (the fp4moe command that writes the checkpoint) is not set")
    src = model_for(kind)
    save_hf_checkpoint(src, str(tmp_path / "bf16"))
    p = subprocess.run([cli, "quantize", "--in", str(tmp_path / "bf16"), "--out", str(tmp_path / "nvfp4")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    quant = json.load(open(tmp_path / "nvfp4" / "hf_quant_config.json"))["quantization"]
    assert quant["quant_algo"] == "NVFP4"
    ref = transformers.AutoModelForCausalLM.from_config(src.config, torch_dtype=torch.float32).cuda().eval()
    fp4 = transformers.AutoModelForCausalLM.from_config(src.config, torch_dtype=torch.float32).cuda().eval()
    fmt.load_modelopt(ref, str(tmp_path / "nvfp4"), experts="dequantize")
    blocks = fmt.load_modelopt(fp4, str(tmp_path / "nvfp4"), max_tokens=64)
    assert len(blocks) == 2 and all(isinstance(b.experts, fmt.FP4MoEExperts) for b in blocks)
    ids = torch.randint(0, src.config.vocab_size, (2, 24), device="cuda")
    x = torch.randn(2, 24, src.config.hidden_size, device="cuda").to(torch.bfloat16).float()
    with torch.no_grad():
        e_blocks = []
        for got, want in zip(blocks, fmt.moe_blocks(ref)):  # every MoE block on the same input
            assert torch.equal(got.gate(x.view(-1, x.shape[-1]))[-1], want.gate(x.view(-1, x.shape[-1]))[-1])
            e_blocks.append(rel(got(x), want(x)))
        e_model = rel(fp4(ids).logits, ref(ids).logits)
        e_bf16 = rel(copy.deepcopy(ref).to(torch.bfloat16)(ids).logits.float(), ref(ids).logits)
    print(f"{kind} from a ModelOpt checkpoint: MoE blocks rel err {', '.join(f'{e:.2e}' for e in e_blocks)}; "
          f"whole model logits rel err {e_model:.2e} (transformers in bf16: {e_bf16:.2e})")
    assert max(e_blocks) < 3e-3
    # the whole model compounds bf16 activations through attention and routing (a
    # token near a group's boundary can change experts): within the model's own bf16 spread
    assert e_model < max(1e-2, e_bf16)

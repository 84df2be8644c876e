"""fp4moe behind transformers' GLM-5 and DeepSeek-V3 MoE blocks: the module's own
router and shared experts, its experts quantized to NVFP4 (the module keeps the
dequantized values), the output within 3e-3 of the module's own; and a whole
small model's forward, in which every MoE block's output is compared with the
module's on the same input (within 3e-3), and the logits with the model's."""

import copy
import json
import os
import subprocess

import pytest
import torch

transformers = pytest.importorskip("transformers")
import fp4moe.transformers as fmt  # noqa: E402
from fp8_reference import captured_experts_call, expect_fp8_error_within_the_reference  # noqa: E402


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


def forward_comparing_blocks(model, blocks, reference, ids):
    """model(ids).logits, and for every MoE block of `model` (`blocks`, fp4moe experts) met
    in that forward, its output's error against `reference`'s same block (the
    dequantized weights) on the same input, the reference's experts reading it
    as fp4moe's do: rounded to bf16, fp4moe's activation format (its router and
    shared experts read it unrounded in both). The error against experts that
    read the unrounded fp32 input is printed beside: it adds that rounding."""
    errors = []
    ref_blocks = fmt.moe_blocks(reference)

    def round_input(module, args, kwargs):
        r = lambda t: t.to(torch.bfloat16).to(t.dtype)  # noqa: E731
        if args:
            return (r(args[0]),) + tuple(args[1:]), kwargs
        return args, dict(kwargs, hidden_states=r(kwargs["hidden_states"]))

    def hook(i):
        def compare(module, args, kwargs, out):
            x = args[0] if args else kwargs["hidden_states"]
            pre = ref_blocks[i].experts.register_forward_pre_hook(round_input, with_kwargs=True)
            try:
                want = ref_blocks[i](x)
            finally:
                pre.remove()
            errors.append(rel(out, want))
            print(f"  MoE block {i}: {errors[-1]:.2e} (experts on the unrounded fp32 input: {rel(out, ref_blocks[i](x)):.2e})")
        return compare

    assert len(blocks) == len(ref_blocks)
    handles = [b.register_forward_hook(hook(i), with_kwargs=True) for i, b in enumerate(blocks)]
    try:
        logits = model(ids).logits
    finally:
        for h in handles:
            h.remove()
    assert len(errors) == len(ref_blocks), "every MoE block ran once"
    return logits, errors


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
        # quantize in place first (the module keeps the dequantized weights): the reference is a copy of
        # the model holding the module's own experts, the model under test holds fp4moe's
        original = [b.experts for b in blocks]
        fmt.use_fp4moe(model, max_tokens=64)
        fp4 = [b.experts for b in blocks]
        for b, o in zip(blocks, original):
            b.experts = o
        reference = copy.deepcopy(model)
        for b, f in zip(blocks, fp4):
            b.experts = f
        want_block = fmt.moe_blocks(reference)[0](x)
        routing = blocks[0].gate(x.view(-1, x.shape[-1]))
        got_block = blocks[0](x)
        want_model = reference(ids).logits
        bf16_logits = copy.deepcopy(reference).to(torch.bfloat16)(ids).logits.float()
        got_model, e_inside = forward_comparing_blocks(model, blocks, reference, ids)
    torch.cuda.synchronize()
    top_ids = routing[-1] if isinstance(routing, tuple) else None
    assert top_ids is not None and top_ids.shape[-1] == model.config.num_experts_per_tok
    e_block, e_model, e_bf16 = rel(got_block, want_block), rel(got_model, want_model), rel(bf16_logits, want_model)
    print(f"{kind}: MoE block rel err {e_block:.2e}; inside the whole model's forward, MoE blocks "
          f"{', '.join(f'{e:.2e}' for e in e_inside)}; logits rel err {e_model:.2e} (transformers in bf16: {e_bf16:.2e})")
    assert e_block < 3e-3
    assert max(e_inside) < 3e-3
    assert e_model < max(3e-3, e_bf16)


@pytest.mark.parametrize("kind", ["glm_moe_dsa", "deepseek_v3"])
def test_fp8_activations_against_the_module(kind):
    """W4A8 (fp8 activations, MXFP4 experts) behind the block: its error against
    the module is stated, within 1.1x of a PyTorch reference quantizing the
    activations the same way and under 6e-2; the block's output with it too."""
    model = model_for(kind)
    blocks = fmt.moe_blocks(model)
    x = torch.randn(1, 64, model.config.hidden_size, device="cuda").to(torch.bfloat16).float()
    with torch.no_grad():
        original = blocks[0].experts
        fp8 = fmt.quantize_experts(original, blocks[0].gate.top_k, max_tokens=64, format="mxfp4", activations="fp8")
        assert "e4m3" in fp8.layer.describe(64)
        hx, ids, w = captured_experts_call(blocks[0], x)
        expect_fp8_error_within_the_reference(kind, original, fp8, hx, ids, w)
        want_block = blocks[0](x)
        blocks[0].experts = fp8
        got_block = blocks[0](x)
    print(f"{kind}: W4A8 MoE block (shared experts in fp32) rel err {rel(got_block, want_block):.3e}")
    assert rel(got_block, want_block) < 6e-2


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
        got_logits, e_inside = forward_comparing_blocks(fp4, blocks, ref, ids)
        e_model = rel(got_logits, ref(ids).logits)
        e_bf16 = rel(copy.deepcopy(ref).to(torch.bfloat16)(ids).logits.float(), ref(ids).logits)
    print(f"{kind} from a ModelOpt checkpoint: MoE blocks rel err {', '.join(f'{e:.2e}' for e in e_blocks)}; "
          f"inside the whole model's forward {', '.join(f'{e:.2e}' for e in e_inside)}; "
          f"whole model logits rel err {e_model:.2e} (transformers in bf16: {e_bf16:.2e})")
    assert max(e_blocks) < 3e-3
    assert max(e_inside) < 3e-3
    # the whole model compounds bf16 activations through attention and routing (a
    # token near a group's boundary can change experts): within the model's own bf16 spread
    assert e_model < max(1e-2, e_bf16)

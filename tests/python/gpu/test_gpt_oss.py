"""gpt-oss from its own MXFP4 checkpoint layout against transformers' GptOssMLP:
the block run in fp32 on the exactly dequantized weights (its router, biases
and clamped SwiGLU), fp4moe's layer from the same files (written by
gpt_oss_checkpoint.py with the safetensors package). The expert choice is
identical and the output within 3e-3 relative Frobenius error: through the
Python layer with the router's logits, through fp4moe.transformers behind
the block, and through `fp4moe run --checkpoint --input --output` (replay,
the CLI computing the logits from the router weight and bias). The small
shape's H and I (288, 160) and the real gpt-oss-120b shape's 2880 are not
multiples of the kernels' K granule."""

import os
import subprocess

import pytest
import torch

transformers = pytest.importorskip("transformers")
import fp4moe  # noqa: E402
import fp4moe.transformers as fmt  # noqa: E402

import gpt_oss_checkpoint as ckpt  # noqa: E402

SHAPES = {
    "small": dict(hidden=288, intermediate=160, experts=8, top_k=4),
    "gpt-oss-120b": dict(hidden=2880, intermediate=2880, experts=128, top_k=4),
}


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


@pytest.fixture(scope="module", params=list(SHAPES))
def case(request, tmp_path_factory):
    s = SHAPES[request.param]
    path = str(tmp_path_factory.mktemp(request.param.replace("-", "_")))
    tensors = ckpt.write(path, seed=1, **s)
    cfg = transformers.GptOssConfig(hidden_size=s["hidden"], intermediate_size=s["intermediate"],
                                    num_local_experts=s["experts"], num_experts_per_tok=s["top_k"], num_hidden_layers=1,
                                    num_attention_heads=8, num_key_value_heads=8, head_dim=64, vocab_size=512)
    from transformers.models.gpt_oss import modeling_gpt_oss as m

    block = m.GptOssMLP(cfg).cuda().float().eval()
    ckpt.load_into(block, tensors)
    return request.param, s, path, block


def run_block(block, x):
    """The block's output for x [T, H] (it returns the output, or the output and the router's scores)."""
    with torch.no_grad():
        out = block(x.float()[None])
    return (out[0] if isinstance(out, tuple) else out)[0]


def reference(block, x):
    """The block's output, its router's logits and top-k choice, on x (bf16 values) in fp32."""
    with torch.no_grad():
        logits = torch.nn.functional.linear(x.float(), block.router.weight, block.router.bias)
        indices = torch.topk(logits, block.router.top_k, dim=-1).indices
    return run_block(block, x), indices, logits


@pytest.mark.parametrize("tokens", [1, 64, 512])
def test_layer_from_checkpoint_matches_transformers(case, tokens):
    name, s, path, block = case
    torch.manual_seed(tokens)
    x = (3.0 * torch.randn(tokens, s["hidden"], device="cuda")).to(torch.bfloat16)  # reaches the clamp at 7
    ref, indices, logits = reference(block, x)
    layer = fp4moe.MoeLayer.from_modelopt(path, 0, max_tokens=tokens)
    out = layer(x, logits.float().contiguous())
    ids, _ = layer.topk(tokens)
    torch.cuda.synchronize()
    layer.check_status()
    assert torch.equal(ids.long().cpu(), indices.long().cpu()), f"{name} T={tokens}: expert choice differs"
    err = rel(out, ref)
    print(f"{name} T={tokens}: fp4moe layer vs transformers GptOssMLP rel err {err:.3e}")
    assert err < 3e-3
    assert "padded" in layer.describe(tokens)


def test_from_engine_tensors_matches_transformers(case):
    """The checkpoint's tensors as an engine holds them on the GPU (MXFP4 codes,
    e8m0 scales, gate and up rows interleaved, bf16 biases, H and I unpadded)
    through MoeLayer.from_tensors: the same expert choice as the block, its
    output within 3e-3."""
    from safetensors.torch import load_file

    name, s, path, block = case
    t = load_file(os.path.join(path, "model.safetensors"), device="cuda")
    pre = "model.layers.0.mlp.experts."
    E, H, I = s["experts"], s["hidden"], s["intermediate"]

    def codes(proj, rows, k):
        return t[pre + proj + "_blocks"].reshape(E, rows, k // 2).contiguous()

    def scales(proj):
        return t[pre + proj + "_scales"].contiguous().view(torch.float8_e8m0fnu)

    layer = fp4moe.MoeLayer.from_tensors(
        fp4moe.config_from_hf(path), codes("gate_up_proj", 2 * I, H), scales("gate_up_proj"), None,
        codes("down_proj", H, I), scales("down_proj"), None, format="mxfp4", w13_order="interleaved",
        w13_bias=t[pre + "gate_up_proj_bias"].contiguous(), w2_bias=t[pre + "down_proj_bias"].contiguous(),
        max_tokens=64)
    x = (3.0 * torch.randn(64, H, device="cuda", generator=torch.Generator("cuda").manual_seed(7))).to(torch.bfloat16)
    ref, indices, logits = reference(block, x)
    out = layer(x, logits.float().contiguous())
    ids, _ = layer.topk(64)
    layer.check_status()
    assert torch.equal(ids.long().cpu(), indices.long().cpu()), f"{name}: expert choice differs"
    err = rel(out, ref)
    print(f"{name}: MoeLayer.from_tensors (engine tensors, biases) vs transformers GptOssMLP rel err {err:.3e}")
    assert err < 3e-3
    # with the router's weight and bias: the layer computes the logits itself
    routed = fp4moe.MoeLayer.from_tensors(
        fp4moe.config_from_hf(path), codes("gate_up_proj", 2 * I, H), scales("gate_up_proj"), None,
        codes("down_proj", H, I), scales("down_proj"), None, format="mxfp4", w13_order="interleaved",
        w13_bias=t[pre + "gate_up_proj_bias"].contiguous(), w2_bias=t[pre + "down_proj_bias"].contiguous(),
        router_weight=t["model.layers.0.mlp.router.weight"].contiguous(),
        router_bias=t["model.layers.0.mlp.router.bias"].float().contiguous(), max_tokens=64)
    out2 = routed(x)
    ids2, _ = routed.topk(64)
    routed.check_status()
    assert torch.equal(ids2.long().cpu(), indices.long().cpu()), f"{name}: expert choice from the router differs"
    assert rel(out2, ref) < 3e-3
    with pytest.raises(Exception, match="w13_bias and w2_bias are required"):
        fp4moe.MoeLayer.from_tensors(fp4moe.config_from_hf(path), codes("gate_up_proj", 2 * I, H), scales("gate_up_proj"),
                                     None, codes("down_proj", H, I), scales("down_proj"), None, format="mxfp4",
                                     w13_order="interleaved", max_tokens=64)


def test_behind_the_transformers_block(case):
    name, s, path, block = case
    x = (3.0 * torch.randn(96, s["hidden"], device="cuda", generator=torch.Generator("cuda").manual_seed(5))).to(torch.bfloat16)
    ref, _, _ = reference(block, x)
    import copy

    fast = copy.deepcopy(block)
    fmt.load_gpt_oss(fast, path, layer=0, max_tokens=96)
    assert isinstance(fast.experts, fmt.FP4MoEExperts)
    err = rel(run_block(fast, x), ref)
    print(f"{name}: fp4moe.transformers behind GptOssMLP rel err {err:.3e}")
    assert err < 3e-3


def test_fp8_activations_behind_the_block(case):
    """W4A8 (fp8 activations) from the same checkpoint behind the block: the
    experts' error against the module within 1.1x of a PyTorch reference
    quantizing the activations as fp4moe does, and under 6e-2."""
    import copy

    from fp8_reference import captured_experts_call, expect_fp8_error_within_the_reference

    name, s, path, block = case
    x = (3.0 * torch.randn(96, s["hidden"], device="cuda", generator=torch.Generator("cuda").manual_seed(6))).to(torch.bfloat16)
    fast = copy.deepcopy(block)
    fmt.load_gpt_oss(fast, path, layer=0, max_tokens=96, activations="fp8")
    assert "e4m3" in fast.experts.layer.describe(96)
    hx, ids, w = captured_experts_call(block, x.float()[None])
    expect_fp8_error_within_the_reference(name, block.experts, fast.experts, hx, ids, w, gpt_oss=True)
    ref, _, _ = reference(block, x)
    err = rel(run_block(fast, x), ref)
    print(f"{name}: W4A8 behind GptOssMLP rel err {err:.3e}")
    assert err < 6e-2


def test_cli_replay(case, tmp_path):
    name, s, path, block = case
    cli = os.environ.get("FP4MOE_CLI")
    if not cli:
        pytest.skip("FP4MOE_CLI (the fp4moe command) is not set")
    from safetensors.torch import load_file, save_file

    x = (3.0 * torch.randn(48, s["hidden"], device="cuda", generator=torch.Generator("cuda").manual_seed(7))).to(torch.bfloat16)
    ref, _, _ = reference(block, x)
    inp, outp = str(tmp_path / "in.safetensors"), str(tmp_path / "out.safetensors")
    save_file({"hidden_states": x.cpu()}, inp)
    r = subprocess.run([cli, "run", "--checkpoint", path, "--layer", "0", "--input", inp, "--output", outp],
                       capture_output=True, text=True)
    print(r.stdout[-2000:])
    assert r.returncode == 0, r.stderr[-2000:]
    got = load_file(outp)["output"]
    err = rel(got.cuda(), ref)
    print(f"{name}: fp4moe run --checkpoint replay rel err {err:.3e}")
    assert err < 3e-3

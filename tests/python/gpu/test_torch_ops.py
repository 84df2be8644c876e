"""torch.ops.fp4moe: opcheck, torch.compile(fullgraph=True), CUDA-graph capture
bitwise equal to eager, side streams, no allocation per forward, the serving
engines' functional form."""

import weakref

import pytest
import torch

import fp4moe.torch as ft
from weights import cuda, layer_from, make


@pytest.fixture(scope="module")
def setup():
    cfg, t = make("glm5-small", seed=21)
    layer = layer_from(cfg, t, max_tokens=512, finalize="split")
    return cfg, t, layer, ft.register(layer)


def inputs(cfg, T, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(T, cfg["hidden"], generator=g, device="cuda").to(torch.bfloat16)
    logits = torch.randn(T, cfg["num_experts"], generator=g, device="cuda")
    return x, logits


def test_opcheck(setup):
    cfg, _, layer, lid = setup
    x, logits = inputs(cfg, 16)
    torch.library.opcheck(torch.ops.fp4moe.moe_forward.default, (x, logits, lid))
    ids, w = layer.topk(16)
    layer(x, logits)
    ids, w = layer.topk(16)
    torch.library.opcheck(torch.ops.fp4moe.moe_forward_routed.default, (x, ids, w, lid))
    out = torch.empty_like(x)
    torch.library.opcheck(torch.ops.fp4moe.moe_forward_out.default, (x, logits, lid, out))


def test_compile_fullgraph(setup):
    cfg, _, layer, _ = setup
    mod = ft.FP4MoE(layer)

    def f(x, logits):
        return mod(x * 2, logits) + 1

    x, logits = inputs(cfg, 64, 1)
    got = torch.compile(f, fullgraph=True)(x, logits)
    assert torch.equal(got, f(x, logits))


@pytest.mark.parametrize("T", [1, 8, 64, 512])
def test_cuda_graph_replay_equals_eager(setup, T):
    cfg, _, layer, lid = setup
    x, logits = inputs(cfg, T, T)
    eager = torch.ops.fp4moe.moe_forward(x, logits, lid)
    out = torch.full_like(x, float("nan"))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.ops.fp4moe.moe_forward_out(x, logits, lid, out)  # warm-up on the side stream
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        torch.ops.fp4moe.moe_forward_out(x, logits, lid, out)
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)
    x2, l2 = inputs(cfg, T, T + 100)  # new inputs in the captured buffers
    x.copy_(x2), logits.copy_(l2)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, torch.ops.fp4moe.moe_forward(x2, l2, lid))


def test_side_stream_is_ordered_and_nothing_is_allocated(setup):
    cfg, _, layer, lid = setup
    x, logits = inputs(cfg, 256, 5)
    want = torch.ops.fp4moe.moe_forward(x, logits, lid)
    out = torch.empty_like(x)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = x.clone()  # produced on s: the forward must run after it, on s
        torch.cuda._sleep(2_000_000)
        lg = logits.clone()
        torch.ops.fp4moe.moe_forward_out(y, lg, lid, out)
    s.synchronize()
    assert torch.equal(out, want)
    del y, lg
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == before
    for _ in range(3):
        torch.ops.fp4moe.moe_forward_out(x, logits, lid, out)
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == before


def test_fused_moe_functional_form(setup):
    cfg, t, layer, lid = setup
    x, logits = inputs(cfg, 100, 9)
    layer(x, logits)
    ids, w = layer.topk(100)
    want = torch.ops.fp4moe.moe_forward_routed(x, ids, w, lid)
    # the routed experts alone (no shared expert): the functional form takes no shared expert
    cfg2 = dict(cfg, shared_expert=False, shared_intermediate=0, name="routed")
    t2 = {k: v for k, v in t.items() if k != "shared"}
    plain = layer_from(cfg2, t2, max_tokens=512, finalize="split")
    want = plain(x, topk_ids=ids, topk_weights=w)
    out = torch.empty_like(x)
    got = ft.fused_moe(x, cuda(t["w13"]), cuda(t["w13_scale"], True), cuda(t["w13_scale_2"]), cuda(t["w2"]),
                       cuda(t["w2_scale"], True), cuda(t["w2_scale_2"]), w, ids, output=out)
    assert got is out and torch.equal(out, want)


def test_fused_moe_keeps_its_layer_while_the_weights_live(setup, monkeypatch):
    cfg, t, layer, _ = setup
    x, logits = inputs(cfg, 8, 4)
    layer(x, logits)
    ids, w = layer.topk(8)
    made = []
    from_tensors = ft.MoeLayer.from_tensors

    def counted(cls, *args, **kwargs):
        made.append(from_tensors(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(ft.MoeLayer, "from_tensors", classmethod(counted))
    w13, s13, g13, w2, s2, g2 = (cuda(t[k]) for k in ("w13", "w13_scale", "w13_scale_2", "w2", "w2_scale", "w2_scale_2"))
    before = len(ft._prepared)
    for _ in range(3):  # new fp8 views of the same weights every call, as an engine may pass them
        out = ft.fused_moe(x, w13, s13.view(torch.float8_e4m3fn), g13, w2, s2.view(torch.float8_e4m3fn), g2, w, ids)
    torch.cuda.synchronize()
    assert len(made) == 1 and len(ft._prepared) == before + 1 and out.isfinite().all()
    prepared = weakref.ref(made.pop())
    del w13, s13, w2, s2
    assert len(ft._prepared) == before and prepared() is None

"""The problem and its cases, as fp4moe's benchmarks ran them: from
`fp4moe bench`'s JSON and the inputs file it wrote (src/measure/peer_inputs.hpp),
or, for bench_grouped_gemm's GEMM cases, random weights of the distribution
fp4moe draws from (its own are drawn in its prepared layout, which no peer reads)."""
import math

from .base import Case, MoeProblem, Projection


def _projection(t, name):
    if name + ".codes" not in t:
        return None
    return Projection(t[name + ".codes"], t[name + ".scales"], t[name + ".global"], t.get(name + ".bias"))


def load_problem(rep, inputs_path, device="cuda"):
    """(problem, tensors) from a bench report and its inputs file."""
    from safetensors.torch import load_file
    t = load_file(inputs_path, device=device)
    rule = rep["routing_rule"]
    p = MoeProblem(model=rep["model"], format=rep["format"], hidden=rep["hidden"], intermediate=rep["intermediate"],
                   experts=rep["experts"], top_k=rep["top_k"], w13=_projection(t, "w13"), w2=_projection(t, "w2"),
                   shared13=_projection(t, "shared13"), shared2=_projection(t, "shared2"),
                   scoring=rule["scoring"], renormalize=rule["renormalize"], n_group=rule["n_group"],
                   topk_group=rule["topk_group"],
                   correction_bias=t.get("correction_bias") if rule["use_correction_bias"] else None,
                   routed_scaling_factor=rule["routed_scaling_factor"], activation=rule["activation"],
                   swiglu_limit=rule["swiglu_limit"], swiglu_alpha=rule["swiglu_alpha"])
    for name, proj, n, k in (("w13", p.w13, 2 * p.intermediate, p.hidden), ("w2", p.w2, p.hidden, p.intermediate)):
        if proj is None or tuple(proj.codes.shape) != (p.experts, n, k // 2):
            raise ValueError(f"{inputs_path}: {name}.codes is {None if proj is None else tuple(proj.codes.shape)}, "
                             f"expected {(p.experts, n, k // 2)}")
    return p, t


def layer_case(torch, rep_case, tensors, problem):
    T, k = rep_case["tokens"], problem.top_k
    dev = tensors["x"].device
    name = f"logits.{T}"
    if name not in tensors:
        raise ValueError(f"the inputs file has no {name}")
    return Case(tokens=T, x=tensors["x"][:T].contiguous(), logits=tensors[name],
                topk_ids=torch.tensor(rep_case["topk_ids"], dtype=torch.int32, device=dev).view(T, k),
                topk_weights=torch.tensor(rep_case["topk_weights"], dtype=torch.float32, device=dev).view(T, k))


def random_projection(torch, fmt, experts, n, k, gen):
    """FP4 weights as fp4moe's full-size random weights are drawn: every code
    uniform, block scales in [0.5, 2) (e4m3 for nvfp4, e8m0 1 or 2 for mxfp4),
    over 2.5 sqrt(K) so the weights' std is ~1/sqrt(K) (nvfp4: the global
    scale; mxfp4: whole exponents off the block scales, it has no global one)."""
    dev = gen.device
    g = 16 if fmt == "nvfp4" else 32
    codes = torch.randint(0, 256, (experts, n, k // 2), dtype=torch.uint8, device=dev, generator=gen)
    s = 0.5 + 1.5 * torch.rand(experts, n, k // g, device=dev, generator=gen)
    if fmt == "nvfp4":
        scales = s.to(torch.float8_e4m3fn).view(torch.uint8)
        gs = torch.full((experts,), 1.0 / (2.5 * k ** 0.5), device=dev)
    else:
        shift = round(math.log2(2.5 * k ** 0.5))
        scales = (torch.log2(s).ceil() + 127 - shift).to(torch.uint8)
        gs = torch.ones(experts, device=dev)
    return Projection(codes, scales, gs)


def gemm_problem(torch, model, fmt, experts, top_k, hidden, intermediate, seed=7):
    """A routed-experts-only problem for GEMM benchmarks (no shared expert, SwiGLU)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    w13 = random_projection(torch, fmt, experts, 2 * intermediate, hidden, gen)
    w13.global_scale = w13.global_scale[:, None].expand(-1, 2).contiguous()
    return MoeProblem(model=model, format=fmt, hidden=hidden, intermediate=intermediate, experts=experts,
                      top_k=top_k, w13=w13, w2=random_projection(torch, fmt, experts, hidden, intermediate, gen))


def counts_case(torch, problem, counts, seed=11):
    """A case whose routing gives expert e exactly counts[e] rows: the pairs in
    a random order, k per token (bench_grouped_gemm's cases give counts only)."""
    k = problem.top_k
    pairs = int(sum(counts))
    if pairs % k:
        raise ValueError(f"{pairs} rows are not a multiple of top_k = {k}")
    T = pairs // k
    gen = torch.Generator(device="cuda").manual_seed(seed)
    dev = "cuda"
    ids = torch.repeat_interleave(torch.arange(problem.experts, device=dev),
                                  torch.tensor(counts, device=dev)).to(torch.int32)
    ids = ids[torch.randperm(pairs, device=dev, generator=gen)].view(T, k)
    w = torch.rand(T, k, device=dev, generator=gen)
    return Case(tokens=T, x=torch.randn(T, problem.hidden, device=dev, generator=gen).to(torch.bfloat16),
                logits=None, topk_ids=ids, topk_weights=w / w.sum(-1, keepdim=True))

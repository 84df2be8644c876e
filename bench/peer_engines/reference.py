"""The exact reference every peer's output is checked against: weights
dequantized exactly (an e2m1 code times its block scale is exact in bf16;
the global scale is applied in fp32), products accumulated in fp32 with TF32
off, the same definition as fp4moe's own GPU reference (docs/benchmarks.md)."""

# e2m1 code -> value (sign in bit 3)
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]

# Norm-wise relative error allowed per activation format: bf16 activations
# round only the output (about 4e-3 per element, far less in the norm); FP8
# e4m3 activations carry 3 mantissa bits (Humming's W4A8 measures ~2.6e-2).
TOLERANCE = {"bf16": 1e-2, "fp8": 6e-2}


def decode_scales(torch, scales, fmt):
    """Block-scale bytes to fp32: e4m3fn (nvfp4) or e8m0 (mxfp4, 2^(b-127))."""
    if fmt == "nvfp4":
        return scales.view(torch.float8_e4m3fn).float()
    return torch.exp2(scales.float() - 127.0)


def dequant_bf16(torch, codes, scales, fmt):
    """codes u8 [..., N, K/2], scales u8 [..., N, K/G] -> bf16 [..., N, K]
    = e2m1 * block scale, exactly (without the global scale)."""
    lut = torch.tensor(E2M1, dtype=torch.float32, device=codes.device)
    vals = torch.stack((lut[(codes & 0xF).long()], lut[(codes >> 4).long()]), dim=-1).flatten(-2)
    g = vals.shape[-1] // scales.shape[-1]
    vals = vals.unflatten(-1, (scales.shape[-1], g)) * decode_scales(torch, scales, fmt).unsqueeze(-1)
    return vals.flatten(-2).to(torch.bfloat16)


class DequantizedProjection:
    """A projection's weights as bf16 (exact), dequantized once, expert by
    expert so the fp32 temporaries stay small; global scale and bias kept aside."""

    def __init__(self, torch, proj, fmt):
        self.w = torch.empty(proj.experts, proj.n, proj.k, dtype=torch.bfloat16, device=proj.codes.device)
        for e in range(proj.experts):
            self.w[e] = dequant_bf16(torch, proj.codes[e], proj.scales[e], fmt)
        gs = proj.global_scale
        # w13's global scale is [E, 2] (gate, up): expand it over the rows it covers
        self.row_scale = (gs.float().repeat_interleave(proj.n // gs.shape[1], dim=1) if gs.dim() == 2
                          else gs.float()[:, None].expand(-1, proj.n))
        self.bias = proj.bias


def grouped_reference(torch, dq, rows, experts):
    """fp32 [P, N]: rows (bf16/fp32 [P, K]) times the weights of `experts` (int [P])."""
    out = torch.empty(rows.shape[0], dq.w.shape[1], dtype=torch.float32, device=rows.device)
    for e in torch.unique(experts).tolist():
        sel = (experts == e).nonzero().flatten()
        y = rows[sel].float() @ dq.w[e].float().t()
        y *= dq.row_scale[e]
        if dq.bias is not None:
            y += dq.bias[e].float()
        out[sel] = y
    return out


def activate(torch, y, problem):
    """[..., 2I] gate then up -> [..., I], in fp32, as the model defines it."""
    i = y.shape[-1] // 2
    g, u = y[..., :i], y[..., i:]
    if problem.activation == "clamped_swiglu":
        lim, alpha = problem.swiglu_limit, problem.swiglu_alpha
        g = g.clamp(max=lim)
        u = u.clamp(-lim, lim)
        return g * torch.sigmoid(alpha * g) * (u + 1)
    return torch.nn.functional.silu(g) * u


def route(torch, problem, logits):
    """The model's routing rule in fp32 -> (ids int32 [T, k], weights fp32 [T, k])."""
    k = problem.top_k
    logits = logits.float()
    if problem.scoring == "sigmoid":
        scores = torch.sigmoid(logits)
        choose = scores + problem.correction_bias if problem.correction_bias is not None else scores
        if problem.n_group > 1:
            T, E = choose.shape
            grouped = choose.view(T, problem.n_group, E // problem.n_group)
            group_score = grouped.topk(2, dim=-1).values.sum(-1)
            keep = torch.zeros_like(group_score).scatter_(1, group_score.topk(problem.topk_group, dim=-1).indices, 1.0)
            choose = choose.masked_fill(~keep.bool().repeat_interleave(E // problem.n_group, dim=1), float("-inf"))
        ids = choose.topk(k, dim=-1).indices
        w = scores.gather(1, ids)
    else:
        top = logits.topk(k, dim=-1)
        ids = top.indices
        w = torch.softmax(top.values, dim=-1) if problem.renormalize else torch.softmax(logits, -1).gather(1, ids)
    if problem.scoring == "sigmoid" and problem.renormalize:
        w = w / w.sum(-1, keepdim=True)
    return ids.to(torch.int32), w * problem.routed_scaling_factor


class CaseReference:
    """The reference outputs of one case, in the layouts of base.Step's kinds."""

    def __init__(self, torch, problem, dq13, dq2, dq_shared, case):
        torch.backends.cuda.matmul.allow_tf32 = False
        T, k = case.topk_ids.shape
        ids = case.topk_ids.reshape(-1).long()
        tok = torch.arange(T, device=ids.device).repeat_interleave(k)
        y1 = grouped_reference(torch, dq13, case.x[tok], ids)
        self.gemm1 = y1.view(T, k, -1)
        self.gemm1_activated = activate(torch, self.gemm1, problem)
        # GEMM2's input: the activation rounded to bf16, as every engine stores it
        case.a2 = self.gemm1_activated.reshape(T * k, -1).to(torch.bfloat16)
        y2 = grouped_reference(torch, dq2, case.a2, ids).view(T, k, -1)
        self.gemm2 = y2
        self.gemm2_weighted = (y2 * case.topk_weights[..., None]).sum(1)
        self.layer, self.routing_mismatch_tokens = None, None
        if case.logits is None:  # GEMM cases: no router input, no layer
            return
        # The layer routes on its own: the same rule, checked to choose as fp4moe chose
        r_ids, r_w = route(torch, problem, case.logits)
        same = (r_ids.sort(-1).values == case.topk_ids.sort(-1).values).all(-1)
        self.routing_mismatch_tokens = int((~same).sum())
        out = self.gemm2_weighted if self.routing_mismatch_tokens == 0 else None
        if out is None:  # ties broken differently: the layer's reference follows its own routing
            rid = r_ids.reshape(-1).long()
            a = activate(torch, grouped_reference(torch, dq13, case.x[tok], rid), problem).to(torch.bfloat16)
            out = (grouped_reference(torch, dq2, a, rid).view(T, k, -1) * r_w[..., None]).sum(1)
        if dq_shared is not None:
            s13, s2 = dq_shared
            zero = torch.zeros(T, dtype=torch.long, device=ids.device)
            a = activate(torch, grouped_reference(torch, s13, case.x, zero), problem).to(torch.bfloat16)
            out = out + grouped_reference(torch, s2, a, zero)
        self.layer = out

    def of(self, kind):
        return getattr(self, kind)


def rel_error(torch, got, want):
    """Norm-wise relative error; inf where the output has NaN or Inf."""
    got = got.float()
    if not torch.isfinite(got).all():
        return float("inf")
    return float((got - want).norm() / want.norm().clamp_min(1e-30))

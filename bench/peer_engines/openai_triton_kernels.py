"""OpenAI's triton_kernels (matmul_ogs), composed as vLLM 0.33.0 runs gpt-oss's MoE
layer on sm_90 (triton_kernel_moe_forward with the copy of triton_kernels its wheel
ships, API generation 3.5.x).

Setup: scripts/fetch-peers.sh [DIR] extracts that copy to DIR/triton_kernels with a
VERSION file. Its modules import `triton_kernels.` absolutely, so DIR (default
<repo>/.whl/peers) goes on sys.path and the package is `triton_kernels`.

What vLLM does, and this module does the same way:
- weights, once: gpt-oss's checkpoint holds w13 with gate and up rows interleaved
  (row 2i = gate i, 2i+1 = up i) and matmul_ogs's fused SwiGLU reads them so; fp4moe
  holds gate then up, so make() interleaves codes, scales and bias rows (the same bits,
  nothing re-quantized). Then _swizzle_mxfp4 on sm_90: the opt-flag constraint
  split_k = 1, scale groups padded along K to a multiple of 4, codes and scales
  transposed to [E, K, N] and put in Hopper's MX value and scale layouts (8 warps);
  biases fp32. No padding of 2880: the last K tile is masked.
- per call: routing(logits, k, sm_first=False) (topk + softmax over the k chosen, then
  the sort into expert order: 4 small kernels); GEMM1 = matmul_ogs with the gather and
  the fused clamped SwiGLU, its rows in expert-sorted order; GEMM2 = matmul_ogs on those
  rows with the gammas (routing weights) and the scatter, which with k > 1 writes
  T*k rows (bf16) and sums each token's k rows in its reduce kernel.

No W4A8 variant: on sm_90 matmul_ogs takes MXFP4 weights with bf16 activations only.
Its Hopper value layout (the one vLLM uses there) converts e2m1 to bf16 in software and
static-asserts bf16 x; FP8 x with MXFP4 w goes only through tl.dot_scaled on the plain
strided layout, which sm_90 has no MMA for, and vLLM uses triton_kernels' W4A8 only
on ROCm gfx950 (its AITER_MXFP4_FP8 backend).
"""
from pathlib import Path
from types import SimpleNamespace

from . import base

NAME = "triton_kernels"
W4A16 = "triton_kernels w4a16"
FETCH_HINT = ("run scripts/fetch-peers.sh and put its DIR (default <repo>/.whl/peers, the folder "
              "holding triton_kernels/) first on sys.path")


def _package_dir():
    try:
        import triton_kernels
    except ImportError as exc:
        raise base.PeerUnavailable(f"triton_kernels is not importable ({exc}): {FETCH_HINT}") from exc
    return Path(list(triton_kernels.__path__)[0])


def version():
    where = _package_dir()
    stamp = where / "VERSION"
    if not stamp.is_file():
        raise base.PeerUnavailable(f"triton_kernels imported from {where} is not the copy fetch-peers.sh "
                                   f"extracts from vLLM 0.33.0 (no VERSION file): {FETCH_HINT}")
    return stamp.read_text().splitlines()[0].strip()


def _modules():
    """What this adapter calls in triton_kernels; PeerUnavailable when it does not import."""
    version()
    try:
        from triton_kernels import matmul_ogs, numerics, routing, swiglu, tensor, topk
        from triton_kernels.matmul_ogs_details import opt_flags
        from triton_kernels.tensor_details import layout
    except ImportError as exc:
        raise base.PeerUnavailable(f"triton_kernels ({_package_dir()}) does not import here: {exc}") from exc
    if hasattr(tensor, "SparseMatrix"):  # 3.6 changed the routing structures this module builds
        raise base.PeerUnavailable(f"triton_kernels at {_package_dir()} is API 3.6+, not vLLM 0.33.0's 3.5.x")
    return SimpleNamespace(
        matmul_ogs=matmul_ogs.matmul_ogs, FnSpecs=matmul_ogs.FnSpecs,
        FusedActivation=matmul_ogs.FusedActivation, PrecisionConfig=matmul_ogs.PrecisionConfig,
        FlexCtx=matmul_ogs.FlexCtx, InFlexData=numerics.InFlexData,
        routing=routing.routing, routing_from_bitmatrix=routing.routing_from_bitmatrix,
        topk=topk.topk, swiglu_fn=swiglu.swiglu_fn, FP4=tensor.FP4,
        wrap_torch_tensor=tensor.wrap_torch_tensor, convert_layout=tensor.convert_layout,
        layout=layout, opt_flags=opt_flags)


def _unsupported(problem):
    """Why vLLM's triton_kernels MoE cannot run this problem, or None."""
    if problem.format != "mxfp4":
        return ("triton_kernels has no NVFP4 weight path: matmul_ogs's weight scales are MX "
                "(e8m0 per 32 values), not e4m3 per 16 with a global scale")
    if problem.activation != "clamped_swiglu":
        return "vLLM runs triton_kernels' MoE only with gpt-oss's clamped SwiGLU (fused into GEMM1)"
    if (problem.scoring != "softmax" or not problem.renormalize or problem.n_group != 1
            or problem.correction_bias is not None or problem.routed_scaling_factor != 1.0):
        return "vLLM's triton_kernels MoE routes by softmax top-k, renormalized; this model routes otherwise"
    if problem.shared13 is not None:
        return "vLLM's triton_kernels MoE has no shared expert"
    if problem.top_k & (problem.top_k - 1):
        return "vLLM 0.33.0's triton_kernels routing kernels need a power-of-two top_k"
    return None


def variants(problem):
    return [base.Variant(W4A16, activations="bf16", unsupported=_unsupported(problem))]


def make(problem, variant):
    if variant.name != W4A16 or variant.unsupported:
        raise ValueError(f"{NAME}: no runnable variant {variant.name!r} ({variant.unsupported})")
    m = _modules()
    import torch
    if not torch.cuda.is_available():
        raise base.PeerUnavailable("no CUDA GPU")
    cap = torch.cuda.get_device_capability()
    if cap != (9, 0):
        raise base.PeerUnavailable(f"this is vLLM's sm_90 composition (Hopper MX layouts, split_k 1); "
                                   f"the GPU is sm_{cap[0]}{cap[1]}")
    return _Peer(torch, m, problem)


def _interleave_gate_up(t):
    """[E, 2I, ...] gate rows then up rows -> rows g0, u0, g1, u1, ... (gpt-oss's checkpoint order)."""
    e, two_i = t.shape[:2]
    return t.reshape(e, 2, two_i // 2, *t.shape[2:]).transpose(1, 2).reshape(t.shape).contiguous()


class _Peer(base.Peer):
    def __init__(self, torch, m, problem):
        self.torch, self.m = torch, m
        self.k, self.experts, self.inter = problem.top_k, problem.experts, problem.intermediate
        # vLLM's _swizzle_mxfp4 sets this on sm_90; it holds for every later matmul_ogs call
        m.opt_flags.update_opt_flags_constraints({"split_k": 1})
        w13, w2 = problem.w13, problem.w2
        for name, p in (("w13", w13), ("w2", w2)):
            if not bool((p.global_scale == 1).all()):
                raise ValueError(f"{NAME}: {name} has a global scale other than 1; MXFP4 in vLLM has none")
        self.w13, self.pc13 = self._swizzle(_interleave_gate_up(w13.codes), _interleave_gate_up(w13.scales))
        self.b13 = None if w13.bias is None else _interleave_gate_up(w13.bias.float())
        self.w2, self.pc2 = self._swizzle(w2.codes.contiguous(), w2.scales.contiguous())
        self.b2 = None if w2.bias is None else w2.bias.float().contiguous()
        # the SwiGLU vLLM fuses into GEMM1: reads (gate, up) column pairs, halves N
        self.act = m.FusedActivation(m.FnSpecs("swiglu", m.swiglu_fn, ("alpha", "limit")),
                                     (problem.swiglu_alpha, problem.swiglu_limit), 2)

    def _swizzle(self, codes, scales):
        """vLLM's _swizzle_mxfp4 on sm_90: codes u8 [E, N, K/2], e8m0 scales u8 [E, N, K/32]
        -> (weight Tensor [E, K, N] in Hopper's value layout, PrecisionConfig with the scales)."""
        torch, m = self.torch, self.m
        # its Hopper scale layout reads 4 groups per 128-wide K tile unmasked: pad the groups
        # (the pad covers K beyond the end, where the masked codes contribute nothing)
        scales = torch.nn.functional.pad(scales, (0, -scales.shape[-1] % 4))
        value_layout, value_opts = m.layout.make_default_matmul_mxfp4_w_layout(mx_axis=1)
        scale_layout, scale_opts = m.layout.make_default_matmul_mxfp4_w_scale_layout(mx_axis=1, num_warps=8)
        w = m.convert_layout(m.wrap_torch_tensor(codes.transpose(-2, -1), dtype=m.FP4), value_layout, **value_opts)
        s = m.convert_layout(m.wrap_torch_tensor(scales.transpose(-2, -1)), scale_layout, **scale_opts)
        return w, m.PrecisionConfig(weight_scale=s, flex_ctx=m.FlexCtx(rhs_data=m.InFlexData()))

    def _route_given(self, logits, ids, weights):
        """triton_kernels' routing data for experts chosen already (fp4moe's ids): its topk
        kernel given the indices only packs them into its bitmatrix (the logits it gathers are
        dropped), then routing()'s own sort; gammas are the given weights. Same 4 kernels as
        routing(). Returns (RoutingData, GatherIndx, ScatterIndx)."""
        _, _, bitmatrix = self.m.topk(logits, self.k, apply_softmax=False, y_indx=ids)
        return self.m.routing_from_bitmatrix(bitmatrix, weights, ids, self.experts, self.k)

    def _gemm1(self, x, rd, gather):
        """bf16 [T*k, I], rows in expert-sorted order: gather + GEMM + bias + clamped SwiGLU."""
        return self.m.matmul_ogs(x, self.w13, self.b13, rd, gather_indx=gather,
                                 precision_config=self.pc13, fused_activation=self.act)

    def _gemm2(self, a, rd, scatter):
        """bf16 [T, H]: GEMM + bias, times the gammas, per (token, slot) row; then the sum over k."""
        return self.m.matmul_ogs(a, self.w2, self.b2, rd, scatter_indx=scatter,
                                 precision_config=self.pc2, gammas=rd.gate_scal)

    def _inputs(self, case):
        t = self.torch
        # ids as int64, as triton_kernels' own routing test gives them (its topk kernel packs
        # 1 << (id % 32) in the ids' type: int16 would overflow); weights fp32 become the gammas
        return (case.logits.contiguous(), case.topk_ids.to(t.int64).contiguous(),
                case.topk_weights.to(t.float32).contiguous())

    def gemm1(self, case):
        T, k, inter = case.tokens, self.k, self.inter
        x = case.x.contiguous()
        logits, ids, weights = self._inputs(case)
        # The routing data is the layer's (its routing step), as fp4moe's routing and
        # permutation are not in its GEMM steps: made here, outside run()
        rd, gather, _ = self._route_given(logits, ids, weights)
        dst = gather.dst_indx.long()  # dst[t*k + j] = the expert-sorted row of token t's j-th choice

        def run():
            return self._gemm1(x, rd, gather)

        return base.Step("gemm1_activated", run, lambda y: y.float()[dst].view(T, k, inter),
                         note="gather + GEMM + bias + SwiGLU")

    def gemm2(self, case):
        if case.a2 is None:
            raise ValueError(f"{NAME}: case.a2 (GEMM2's input) is not set; the reference sets it")
        logits, ids, weights = self._inputs(case)
        # In the layer GEMM2 gets GEMM1's routing data and its output rows, already in
        # expert-sorted order: both are made here, outside run(), from the same ids.
        rd, gather, scatter = self._route_given(logits, ids, weights)
        a = case.a2[gather.src_indx.long()].contiguous()  # src_indx[r] = t*k + j of sorted row r

        def run():
            return self._gemm2(a, rd, scatter)

        return base.Step("gemm2_weighted", run, lambda out: out.float(),
                         note="GEMM + gammas (T*k rows) + reduce over k; input in expert order as GEMM1 leaves it")

    def layer(self, case):
        x, logits = case.x.contiguous(), case.logits.contiguous()

        def run():
            rd, gather, scatter = self.m.routing(logits, self.k, sm_first=False)
            return self._gemm2(self._gemm1(x, rd, gather), rd, scatter)

        return base.Step("layer", run, lambda out: out.float(),
                         note="routing + GEMM1 (gather, SwiGLU) + GEMM2 (gammas) + reduce")

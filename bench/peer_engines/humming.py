"""Humming (PyPI `humming-kernels` 0.1.19) as an engine composes it on Hopper.

The composition is vLLM's Humming MoE backend (its indexed experts): Humming's
MoE GEMM on vLLM-style aligned routing, GEMM1 gathering the token rows itself
(row sorted_id // k), GEMM2 reading the activated rows t*k+j; the activation
in Humming's process_input kernel, which also quantizes to FP8 in W4A8 (vLLM
runs its own activation kernel, then Humming's quantization: here one kernel,
Humming's own); the top-k weighted sum and the routing in torch ops; a shared
expert through Humming's dense GEMM.

Weights are the problem's, bit for bit: fp4moe's codes (element 2i in the low
nibble) are Humming's packing (element i at bits 4i..4i+3 of an int32) read as
int32, the scale bytes are viewed as e8m0 / e4m3, NVFP4's per-expert global
scale is Humming's per-expert tensor scale (weight_scale_2, applied in its
epilogue). Humming's own weight preparation then pads, repacks, and for MXFP4
with FP8 activations rewrites the weights (see _weight_tensors).

What is outside run(), once per weight set or per case: the conversion above,
the tile choice (Humming's SM90 heuristics, humming/tune/sm90.py, through
HummingMethod.get_default_tuning_configs, as vLLM calls them), the alignment's
constants; for the GEMM steps the routing's alignment too (it is the layer's,
as fp4moe's routing and permutation are not in its GEMM steps). Inside run():
the FP8 quantization of activations and the GEMM; for the layer also the
routing, the alignment (torch ops: Humming ships no kernel for it), the
activation and the weighted sum. Humming's kernels compile (NVRTC) at first use:
the first run() of a step pays it.
"""
import importlib.metadata
import json

try:
    from . import base
except ImportError:  # loaded as a top-level module (bench/peer_engines on sys.path)
    import base

try:
    import torch
except ImportError:  # the harness reports version()'s PeerUnavailable
    torch = None

NAME = "humming"
DIST = "humming-kernels"

# Humming's weights are padded to whole tiles, N and K to a multiple of 128
# (gpt-oss: 2880 -> 2944): the least its SM90 tiles take (W4A16's GEMM2 needs
# N % 128, FP8 scale groups of 128 need K % 128), so Humming gets its best legal
# shape. vLLM and SGLang pass pad_n 256, pad_k 128 (gpt-oss N: 5760 -> 5888,
# 2880 -> 3072): Variant.options {"pad_n": 256} times theirs.
PAD_N = 128
PAD_K = 128

# (activation dtype for Humming, group of the activation scales along K: 0 = per token)
MODES = {
    "humming w4a16": (None, 0),
    "humming w4a8 token": ("float8e4m3", 0),
    "humming w4a8 g128": ("float8e4m3", 128),
}


def _humming():
    """Humming's modules, or PeerUnavailable saying why not."""
    if torch is None:
        raise base.PeerUnavailable("PyTorch is not installed")
    try:
        import humming  # noqa: F401  (loads its ops and its launcher)
        from humming import dtypes
        from humming.config import GemmType, WeightScale2Type, WeightScaleType
        from humming.layer import HummingMethod
        from humming.schema import HummingInputSchema, HummingWeightSchema, is_humming_schema_compatible
    except Exception as exc:  # noqa: BLE001 - any import failure: the reason is the message
        raise base.PeerUnavailable(f"humming-kernels is not importable: {type(exc).__name__}: {exc}") from exc
    return dict(dtypes=dtypes, GemmType=GemmType, WeightScale2Type=WeightScale2Type,
                WeightScaleType=WeightScaleType, HummingMethod=HummingMethod,
                HummingInputSchema=HummingInputSchema, HummingWeightSchema=HummingWeightSchema,
                compatible=is_humming_schema_compatible)


def version():
    _humming()  # raises PeerUnavailable with the reason when it cannot run here
    try:
        return importlib.metadata.version(DIST)
    except importlib.metadata.PackageNotFoundError:  # imported from a path without its metadata
        import humming
        return getattr(humming, "__version__", "unknown")


def variants(problem):
    out = []
    for name, (a_dtype, group) in MODES.items():
        reason = None
        if a_dtype is not None and problem.group_size < 32:
            # humming/schema/humming.py is_humming_schema_compatible: 8-bit activations
            # need weight scale groups >= 32 (one FP8 MMA K step is 32)
            reason = (f"Humming's FP8 activations need weight scale groups of at least 32; "
                      f"{problem.format}'s are {problem.group_size}")
        out.append(base.Variant(name, activations="fp8" if a_dtype else "bf16", unsupported=reason,
                                options={"a_dtype": a_dtype, "input_group": group}))
    return out


def make(problem, variant):
    if variant.unsupported:
        raise base.PeerUnavailable(variant.unsupported)
    return HummingPeer(problem, variant)


def route(problem, logits):
    """The model's routing in torch ops (graph-capturable): logits [T, E] ->
    (ids int32 [T, k], weights fp32 [T, k]). softmax: top-k of the logits,
    softmax over those k (renormalize) or the full softmax's values. sigmoid
    (DeepSeek-V3/GLM): choose on sigmoid + correction bias within the best
    topk_group groups (a group scores its two best), weigh by the sigmoid,
    renormalize; then routed_scaling_factor."""
    k = problem.top_k
    logits = logits.float()
    if problem.scoring == "sigmoid":
        scores = logits.sigmoid()
        choice = scores if problem.correction_bias is None else scores + problem.correction_bias
        if problem.n_group > 1:
            t, e = choice.shape
            per_group = choice.view(t, problem.n_group, e // problem.n_group)
            group_score = per_group.topk(2, dim=-1).values.sum(-1)
            best = group_score.topk(problem.topk_group, dim=-1).indices
            keep = torch.zeros_like(group_score, dtype=torch.bool).scatter_(1, best, True)
            choice = per_group.masked_fill(~keep.unsqueeze(-1), float("-inf")).view(t, e)
        ids = choice.topk(k, dim=-1).indices
        weights = scores.gather(1, ids)
        if problem.renormalize:
            weights = weights / weights.sum(-1, keepdim=True)
    else:
        top = logits.topk(k, dim=-1)
        ids = top.indices
        weights = top.values.softmax(-1) if problem.renormalize else logits.softmax(-1).gather(1, ids)
    return ids.to(torch.int32), weights * problem.routed_scaling_factor


class RoutingAlignment:
    """vLLM's moe_align_block_size in torch ops, for one (T*k, E, block):
    sorted_ids int32 [capacity] (row t*k+j of each expert in token order, each
    expert's run padded to a whole block with the value T*k, which Humming
    skips), expert_ids int32 [capacity / block] (the expert of each block; the
    blocks past the padded count are never read), num_tokens_padded int32 [1].
    Shapes depend on T*k alone (capacity = T*k + min(E, T*k) * (block - 1),
    rounded to a block), so a CUDA graph can hold it: no host sync."""

    def __init__(self, rows, experts, block, device):
        self.rows, self.experts, self.block = rows, experts, block
        self.capacity_blocks = -(-(rows + min(experts, rows) * (block - 1)) // block)
        self.capacity = self.capacity_blocks * block
        self.row_index = torch.arange(rows, device=device)
        self.expert_bound = torch.arange(experts + 1, dtype=torch.int32, device=device)
        self.block_index = torch.arange(self.capacity_blocks, device=device)

    def __call__(self, topk_ids):
        expert_of, order = torch.sort(topk_ids.reshape(-1), stable=True)
        start = torch.searchsorted(expert_of, self.expert_bound)  # first sorted row of each expert
        count = start[1:] - start[:-1]
        blocks = (count + self.block - 1) // self.block
        block_end = blocks.cumsum(0)
        shift = (block_end - blocks) * self.block - start[:-1]  # sorted row -> padded row, per expert
        dest = self.row_index + shift[expert_of.long()]
        sorted_ids = torch.full((self.capacity,), self.rows, dtype=torch.int32, device=topk_ids.device)
        sorted_ids.scatter_(0, dest, order.to(torch.int32))
        expert_ids = torch.searchsorted(block_end, self.block_index, right=True)
        expert_ids = expert_ids.clamp_(max=self.experts - 1).to(torch.int32)
        num_tokens_padded = (block_end[-1:] * self.block).to(torch.int32)
        return sorted_ids, expert_ids, num_tokens_padded


def activation_cpp(problem):
    """The activation as the C++ expression Humming's process_input compiles
    (a = gate, b = up, floats; it builds without fast math)."""
    def lit(v):
        return f"{float(v)!r}f"
    if problem.activation == "clamped_swiglu":  # gpt-oss: biases are already in a and b
        lim, alpha = lit(problem.swiglu_limit), lit(problem.swiglu_alpha)
        g = f"fminf(a, {lim})"
        return f"{g} / (1.0f + expf(-{alpha} * {g})) * (fminf(fmaxf(b, -{lim}), {lim}) + 1.0f)"
    return "a / (1.0f + expf(-a)) * b"


class HummingPeer(base.Peer):
    """Humming's weights for one problem and mode, held as vLLM holds them: one
    module whose parameters are named <sublayer>_weight, ..., one Stream-K lock
    buffer for the layer, HummingMethod's calls on it."""

    def __init__(self, problem, variant):
        self.h = _humming()
        self.problem = problem
        self.fp8 = variant.options.get("a_dtype") is not None
        pad_n = variant.options.get("pad_n", PAD_N)
        pad_k = variant.options.get("pad_k", PAD_K)
        if not torch.cuda.is_available():
            raise base.PeerUnavailable("no CUDA device")
        dev = problem.w13.codes.device
        self.module = torch.nn.Module()
        # Stream-K fixup state, zeroed and left zeroed by the kernels (vLLM: 1024, HummingLayer: 2048)
        self.module.register_buffer("locks", torch.zeros(4096, dtype=torch.int32, device=dev))
        h = self.h
        input_schema = h["HummingInputSchema"](
            a_dtype=getattr(h["dtypes"], variant.options["a_dtype"]) if self.fp8 else None,
            input_scale_group_size=variant.options.get("input_group", 0))
        self.rows = {}  # sublayer -> Humming's tile table: [(m_lo, m_hi, tuning config)]
        self._add("w13", problem.w13, True, input_schema, pad_n, pad_k)
        self._add("w2", problem.w2, True, input_schema, pad_n, pad_k)
        self.shared = problem.shared13 is not None
        if self.shared:
            self._add("s13", problem.shared13, False, input_schema, pad_n, pad_k)
            self._add("s2", problem.shared2, False, input_schema, pad_n, pad_k)
        self.act = activation_cpp(problem)
        self.compute = {g: json.dumps({"use_batch_invariant": False, "use_f16_accum": False, "gemm_type": g})
                        for g in ("indexed", "dense")}

    # ---- weights, once ----

    def _weight_tensors(self, proj, experts):
        """The projection as Humming's standard format wants it (schema, tensors)."""
        h, dt, fmt = self.h, self.h["dtypes"], self.problem.format
        # A clone: for MXFP4 with FP8 activations Humming rewrites the codes in
        # place (process_mxfp4_w4a8_weight, below); the problem's stay intact.
        codes = proj.codes.contiguous().clone()
        scales = proj.scales.contiguous().clone()
        gs = proj.global_scale.float()
        if gs.dim() == 2:  # w13 may carry [E, 2] (gate, up): Humming has one per expert
            assert torch.equal(gs, gs[:, :1].expand_as(gs)), "gate and up global scales differ"
            gs = gs[:, 0]
        if not experts:
            codes, scales, gs = codes[0], scales[0], gs[:1]
        tensors = {"weight": codes.view(torch.int32)}  # [.., N, K/8]: 8 codes per int32, low nibble first
        if fmt == "nvfp4":
            tensors["weight_scale"] = scales.view(torch.float8_e4m3fn)
            schema = h["HummingWeightSchema"](
                b_dtype=dt.float4e2m1, bs_dtype=dt.float8e4m3, weight_scale_group_size=16,
                weight_scale_type=h["WeightScaleType"].GROUP, weight_scale_2_type=h["WeightScale2Type"].TENSOR)
            tensors["weight_scale_2"] = gs.contiguous()
        else:
            tensors["weight_scale"] = scales.view(torch.float8_e8m0fnu)
            # MXFP4 checkpoints have no global scale (the benchmark's are ones): keep
            # Humming's plain MXFP4 kernel then; a real one rides as its tensor scale.
            # With FP8 activations Humming's preparation (transform.process_fused_e8m0_scale)
            # clamps each expert's scale exponents to a range of 11 below its largest,
            # rewrites the codes of the blocks it raised, and takes the expert's smallest
            # exponent into a per-expert tensor scale: Humming's own re-quantization.
            has_gs = not bool((gs == 1).all())
            schema = h["HummingWeightSchema"](
                b_dtype=dt.float4e2m1, bs_dtype=dt.float8e8m0, weight_scale_group_size=32,
                weight_scale_2_type=h["WeightScale2Type"].TENSOR if has_gs else None)
            if has_gs:
                tensors["weight_scale_2"] = gs.contiguous()
        if proj.bias is not None:  # Humming's bias is in the activation dtype (bf16)
            tensors["bias"] = (proj.bias if experts else proj.bias[0]).to(torch.bfloat16).contiguous()
        return schema, tensors

    def _add(self, name, proj, experts, input_schema, pad_n, pad_k):
        h = self.h
        schema, tensors = self._weight_tensors(proj, experts)
        if not h["compatible"](input_schema, schema, torch.bfloat16):
            raise base.PeerUnavailable(f"Humming rejects {self.problem.format} weights with these activations")
        for key, t in tensors.items():
            setattr(self.module, f"{name}_{key}", torch.nn.Parameter(t, requires_grad=False))
        meth = h["HummingMethod"]
        meth.prepare_layer_meta(
            layer=self.module, shape_n=proj.n, shape_k=proj.k, weight_schema=schema,
            input_schema=input_schema, num_experts=proj.experts if experts else None,
            pad_n_to_multiple=pad_n, pad_k_to_multiple=pad_k, has_bias=proj.bias is not None,
            torch_dtype=torch.bfloat16, sublayer_name=name)
        meth.transform_humming_layer(self.module, sublayer_name=name)
        gemm = h["GemmType"].INDEXED if experts else h["GemmType"].DENSE
        self.rows[name] = meth.get_default_tuning_configs(
            layer=self.module, gemm_type=gemm, sublayer_name=name)

    def padding(self, name):
        m = self.module.humming_metas[name]
        return f"N {m.shape_n - m.pad_shape_n}->{m.shape_n}, K {m.shape_k - m.pad_shape_k}->{m.shape_k}"

    def _tile(self, name, m):
        """Humming's tuning config for M rows (the row of its table vLLM would
        pick) and its block M, which the routing alignment must use. One config,
        not the table: only this case's kernel is compiled."""
        for lo, hi, cfg in self.rows[name]:
            if lo < m <= hi:
                return json.dumps(cfg), cfg["block_shape"][0]
        raise ValueError(f"Humming's tile table for {name} has no row for M={m}")

    # ---- per call ----

    def _quant(self, name, x):
        """FP8 activations (Humming's quantization kernel, per token or per 128 along K), or x."""
        if not self.fp8:
            return x, None
        return self.h["HummingMethod"].may_quant_input(layer=self.module, inputs=x, sublayer_name=name)

    def _activate(self, name, y):
        """Humming's process_input: the activation of [rows, 2I] (gate, up) to
        [rows, I], quantized to FP8 in the same kernel for W4A8."""
        out, group_scales, token_scales = self.h["HummingMethod"].may_process_input(
            layer=self.module, inputs=y, activation_type="binary_split", activation_impl=self.act,
            sublayer_name=name)
        return out, group_scales if group_scales is not None else token_scales

    def _gemm(self, name, a, scale, tuning, m, top_k=1, routing=None):
        sorted_ids, expert_ids, num_tokens_padded = routing or (None, None, None)
        return self.h["HummingMethod"].forward_layer(
            layer=self.module, inputs=a, input_scale=scale, sorted_ids=sorted_ids, expert_ids=expert_ids,
            num_tokens_padded=num_tokens_padded, top_k=top_k, valid_shape_m=m,
            compute_config=self.compute["indexed" if routing else "dense"], tuning_config=tuning,
            sublayer_name=name)

    def _what(self):
        return "FP8 activations" if self.fp8 else "bf16 activations"

    def gemm1(self, case):
        T, k = case.topk_ids.shape
        m = T * k
        tuning, block = self._tile("w13", m)
        # The routing's alignment is the layer's, as fp4moe's routing and permutation
        # are its layer's and not its GEMM steps'
        aligned = RoutingAlignment(m, self.problem.experts, block, case.x.device)(case.topk_ids)

        def run():
            a, s = self._quant("w13", case.x)
            return self._gemm("w13", a, s, tuning, m, k, aligned)

        q = "x to FP8 + " if self.fp8 else ""
        return base.Step("gemm1", run, lambda y: y.float().view(T, k, -1),
                         note=f"{q}GEMM1 gathering rows, + bias ({self.padding('w13')})")

    def gemm2(self, case):
        T, k = case.topk_ids.shape
        m = T * k
        tuning, block = self._tile("w2", m)
        aligned = RoutingAlignment(m, self.problem.experts, block, case.x.device)(case.topk_ids)

        def run():
            a, s = self._quant("w2", case.a2)
            return self._gemm("w2", a, s, tuning, m, 1, aligned)

        q = "a2 to FP8 + " if self.fp8 else ""
        return base.Step("gemm2", run, lambda y: y.float().view(T, k, -1),
                         note=f"{q}GEMM2, + bias ({self.padding('w2')})")

    def layer(self, case):
        p = self.problem
        T, k = case.topk_ids.shape
        H = p.hidden
        m = T * k
        t13, b13 = self._tile("w13", m)
        t2, b2 = self._tile("w2", m)
        dev = case.x.device
        align13 = RoutingAlignment(m, p.experts, b13, dev)
        # One alignment serves both GEMMs when their tiles agree on M (vLLM assumes they do)
        align2 = align13 if b2 == b13 else RoutingAlignment(m, p.experts, b2, dev)
        if self.shared:
            ts13, _ = self._tile("s13", T)
            ts2, _ = self._tile("s2", T)

        def run():
            ids, weights = route(p, case.logits)
            r13 = align13(ids)
            r2 = r13 if align2 is align13 else align2(ids)
            a, s = self._quant("w13", case.x)
            y1 = self._gemm("w13", a, s, t13, m, k, r13)           # [T*k, 2I] bf16, + bias
            a2, s2 = self._activate("w2", y1)                       # [T*k, I]
            y2 = self._gemm("w2", a2, s2, t2, m, 1, r2)             # [T*k, H] bf16, + bias
            out = (y2.view(T, k, H) * weights.unsqueeze(-1)).sum(1)  # fp32 [T, H]
            if self.shared:
                a, s = self._quant("s13", case.x)
                ys = self._gemm("s13", a, s, ts13, T)
                a, s = self._activate("s2", ys)
                out = out + self._gemm("s2", a, s, ts2, T)
            return out.to(torch.bfloat16)

        shared = " + shared expert (dense GEMMs)" if self.shared else ""
        return base.Step("layer", run, lambda y: y.float(),
                         note=f"route + align (torch) + GEMM1 + activation{' and FP8' if self.fp8 else ''} "
                              f"(Humming) + GEMM2 + weighted sum (torch){shared}, {self._what()}")

"""PyTorch on bf16 weights: what an engine without FP4 kernels runs. The FP4
weights dequantized once to bf16 (global scale folded in), each GEMM one
torch._grouped_mm over the rows in expert order, and a layer that permutes,
multiplies, activates, weights and sums with torch ops. Nothing in a step
waits on the host (shapes are fixed by T and k), so every step can be
captured in a CUDA graph."""
from . import base

NAME = "torch"
WANTS_DEQUANTIZED = True  # it multiplies the bf16 weights the reference holds


def version():
    try:
        import torch
    except ImportError as ex:
        raise base.PeerUnavailable(f"PyTorch is not installed ({ex})") from ex
    if not torch.cuda.is_available():
        raise base.PeerUnavailable("PyTorch sees no CUDA device")
    return f"torch {torch.__version__}"


def variants(problem):
    return [base.Variant("torch bf16 grouped_mm", "bf16")]


class TorchPeer(base.Peer):
    def __init__(self, torch, problem, dequantized):
        self.torch, self.p = torch, problem
        self.w13, self.w2, self.shared = (self._fold(dequantized["w13"]), self._fold(dequantized["w2"]),
                                          None)
        if dequantized.get("shared13") is not None:
            # the one shared expert's [N, K] weight and [N] bias out of the stacked [1, ...]
            self.shared = tuple((w[0], None if b is None else b[0])
                                for w, b in (self._fold(dequantized["shared13"]), self._fold(dequantized["shared2"])))
        # each expert's end in the sorted rows is where the next expert id would go
        self.expert_ends = torch.arange(1, problem.experts + 1, device=self.w13[0].device)

    def _fold(self, dq):
        return (dq.w.float() * dq.row_scale[..., None]).to(self.torch.bfloat16), dq.bias

    def _offsets(self, ids):
        """Rows in expert order: (the expert of each sorted row, the order of the
        flat (token, slot) pairs, each expert's end offset, int32). A sort and a
        searchsorted, not bincount, whose output size waits on the host: the
        step stays capturable in a CUDA graph."""
        torch = self.torch
        expert_sorted, order = torch.sort(ids.reshape(-1).long(), stable=True)
        offs = torch.searchsorted(expert_sorted, self.expert_ends, out_int32=True)
        return expert_sorted, order, offs

    def _gemm(self, rows, proj, expert_sorted, offs):
        w, bias = proj
        y = self.torch._grouped_mm(rows, w.transpose(-2, -1), offs=offs)
        if bias is not None:
            y = y + bias[expert_sorted].to(y.dtype)
        return y

    def _dense(self, x, proj):
        w, bias = proj
        y = x @ w.t()
        return y if bias is None else y + bias.to(y.dtype)

    def _activate(self, y):
        torch, p = self.torch, self.p
        i = y.shape[-1] // 2
        g, u = y[..., :i].float(), y[..., i:].float()
        if p.activation == "clamped_swiglu":
            g = g.clamp(max=p.swiglu_limit)
            u = u.clamp(-p.swiglu_limit, p.swiglu_limit)
            return (g * torch.sigmoid(p.swiglu_alpha * g) * (u + 1)).to(torch.bfloat16)
        return (torch.nn.functional.silu(g) * u).to(torch.bfloat16)

    def gemm1(self, case):
        torch, k = self.torch, self.p.top_k
        fs, order, offs = self._offsets(case.topk_ids)

        def run():
            return self._gemm(case.x[order // k], self.w13, fs, offs)

        def to_ref(y):
            out = torch.empty_like(y, dtype=torch.float32)
            out[order] = y.float()
            return out.view(case.tokens, k, -1)

        return base.Step("gemm1", run, to_ref, "gather + grouped_mm")

    def gemm2(self, case):
        torch, k = self.torch, self.p.top_k
        fs, order, offs = self._offsets(case.topk_ids)

        def run():
            return self._gemm(case.a2[order], self.w2, fs, offs)

        def to_ref(y):
            out = torch.empty_like(y, dtype=torch.float32)
            out[order] = y.float()
            return out.view(case.tokens, k, -1)

        return base.Step("gemm2", run, to_ref, "grouped_mm on rows in expert order")

    def layer(self, case):
        from .reference import route
        torch, p, k = self.torch, self.p, self.p.top_k
        T = case.tokens

        def run():
            ids, w = route(torch, p, case.logits)
            fs, order, offs = self._offsets(ids)
            a = self._activate(self._gemm(case.x[order // k], self.w13, fs, offs))
            y = self._gemm(a, self.w2, fs, offs)
            out = torch.zeros(T, p.hidden, device=y.device, dtype=torch.float32)
            out.index_add_(0, order // k, y.float() * w.reshape(-1)[order, None])
            if self.shared is not None:
                s13, s2 = self.shared
                out += self._dense(self._activate(self._dense(case.x, s13)), s2).float()
            return out.to(torch.bfloat16)

        return base.Step("layer", run, lambda y: y.float(), "route + permute + 2 grouped_mm + SwiGLU + index_add")


def make(problem, variant, dequantized=None):
    import torch
    return TorchPeer(torch, problem, dequantized)

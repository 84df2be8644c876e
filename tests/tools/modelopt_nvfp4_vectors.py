#!/usr/bin/env python3
"""Test vectors for fp4moe's NVFP4 quantizer, made by NVIDIA Model Optimizer's
own code on a CUDA device (its usual export path, docs/formats.md).

Runs where PyTorch and a GPU are (scripts/gpu-run.sh modelopt). ModelOpt is
not installed there: this loads, from the nvidia-modelopt wheel given, only
the files its NVFP4 quantization needs (qtensor/nvfp4_tensor.py,
qtensor/base_qtensor.py, backends/utils.py and the reduce_* functions of
utils/core_utils.py), ModelOpt's code unchanged; the package __init__ files,
which import the whole of ModelOpt and its dependencies, are replaced by empty
packages.

For each case it writes the input (fp32 or bf16), the amax ModelOpt used, and
what ModelOpt's export writes: weight (U8), weight_scale (F8_E4M3) and
weight_scale_2 (F32), as ModelOpt's quant_utils.to_quantized_weight and
get_weight_scaling_factor compute them:
  ws2 = amax.float() / (6.0 * 448.0)      (get_weights_scaling_factor_2_from_quantizer)
  sf  = NVFP4QTensor.get_weights_scaling_factor(w, 16, ws2)
  q   = NVFP4QTensor.quantize(w, 16, sf, ws2)
The CPU test tests/cpu/test_format_modelopt_vectors.cpp checks fp4moe against
the file on every build.

Usage: modelopt_nvfp4_vectors.py WHEEL OUT.safetensors
"""
import ast
import os
import sys
import tempfile
import types
import zipfile

import torch
from safetensors.torch import save_file

NEEDED = ("modelopt/torch/quantization/qtensor/nvfp4_tensor.py", "modelopt/torch/quantization/qtensor/base_qtensor.py",
          "modelopt/torch/quantization/backends/utils.py", "modelopt/torch/quantization/utils/core_utils.py")


def load_nvfp4_qtensor(wheel):
    root = tempfile.mkdtemp(prefix="modelopt-")
    with zipfile.ZipFile(wheel) as z:
        for name in NEEDED:
            z.extract(name, root)
        version = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        version = next(l.split(":", 1)[1].strip() for l in z.read(version).decode().splitlines() if l.startswith("Version:"))
    base = os.path.join(root, "modelopt")

    def package(name, path):
        m = types.ModuleType(name)
        m.__path__ = [os.path.join(base, path)]
        sys.modules[name] = m

    for name, path in [("modelopt", ""), ("modelopt.torch", "torch"), ("modelopt.torch.quantization", "torch/quantization"),
                       ("modelopt.torch.quantization.qtensor", "torch/quantization/qtensor"),
                       ("modelopt.torch.quantization.backends", "torch/quantization/backends")]:
        package(name, path)
    # modelopt.torch.quantization.utils: ModelOpt's own reduce_* functions, taken from core_utils.py by name
    path = os.path.join(base, "torch/quantization/utils/core_utils.py")
    tree = ast.parse(open(path).read())
    keep = {"reduce_block_amax", "reduce_block_padding", "convert_quantization_axis_to_reduce_axis", "reduce_amax"}
    body = [n for n in tree.body if (isinstance(n, ast.FunctionDef) and n.name in keep) or
            (isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "_FP8_DTYPES" for t in n.targets))]
    assert len(body) == 5, f"core_utils.py of this wheel lacks some of {sorted(keep)}"
    utils = types.ModuleType("modelopt.torch.quantization.utils")
    utils.torch, utils.F = torch, torch.nn.functional

    def not_used(*args, **kwargs):
        raise RuntimeError("FSDP helpers are not part of NVFP4 quantization")

    utils.fsdp2_aware_weight_update = utils.patch_fsdp_mp_dtypes = not_used
    exec(compile(ast.Module(body=body, type_ignores=[]), path, "exec"), utils.__dict__)
    sys.modules[utils.__name__] = utils
    from modelopt.torch.quantization.qtensor.nvfp4_tensor import NVFP4QTensor
    return NVFP4QTensor, version


def modelopt_export(Q, w, amax):
    """What ModelOpt's export writes for weight w quantized with amax (a 0-dim fp32 CUDA tensor)."""
    ws2 = amax.float() / (6.0 * 448.0)
    sf, _ = Q.get_weights_scaling_factor(w, 16, ws2)
    packed = Q.quantize(w, 16, sf, ws2)[0]._quantized_data
    return packed, sf, ws2


def cases(dev):
    g = torch.Generator(device="cpu").manual_seed(20261201)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    def log_uniform_blocks(rows, cols, lo, hi):
        mags = torch.exp2(torch.empty(rows, cols // 16).uniform_(lo, hi, generator=g))
        return randn(rows, cols) * mags.repeat_interleave(16, dim=1)

    out = []
    out.append(("gaussian fp32", randn(64, 256) * 0.02, None))
    out.append(("gaussian bf16", (randn(64, 256) * 0.02).bfloat16(), None))
    out.append(("block magnitudes 2^-30..1 (scales clamped at 2^-9, subnormal, normal)",
                log_uniform_blocks(64, 256, -30.0, 0.0), None))
    # block scale s = bmax / fl(6 ws2) around the e4m3 subnormal range (2^-9 .. 2^-6) and below
    x = log_uniform_blocks(32, 128, -22.0, -12.0)
    x[0, 0] = 1.0
    out.append(("block scales 2^-13..2^-3", x, None))

    # Rounding ties of the element code: x = fl(t d) and its fp32 neighbours, d = fl(sf ws2) computed
    # as ModelOpt computes it; the first element of each block is its bmax.
    rows, cols = 32, 256
    amax = torch.tensor(1.0)
    ws2 = (amax.to(dev).float() / (6.0 * 448.0)).cpu()
    bmax = torch.exp2(torch.empty(rows, cols // 16).uniform_(-12.0, 0.0, generator=g))
    bmax[0, 0] = 1.0
    s = (bmax / (6.0 * ws2)).clamp(min=2**-9, max=448.0).to(torch.float8_e4m3fn).float()
    d = s * ws2
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    pick = ties[torch.randint(0, 7, (rows, cols // 16, 16), generator=g)]
    x = pick * d.unsqueeze(-1)
    nudge = torch.randint(-1, 2, x.shape, generator=g)  # -1 ulp, exact, +1 ulp
    x = torch.where(nudge > 0, torch.nextafter(x, torch.full_like(x, 1e30)), x)
    x = torch.where(nudge < 0, torch.nextafter(x, torch.zeros_like(x)), x)
    x = x * torch.where(torch.rand(x.shape, generator=g) < 0.5, -1.0, 1.0)
    x = torch.minimum(x.abs(), bmax.unsqueeze(-1) * 0.999) * x.sign()
    x[:, :, 0] = bmax
    out.append(("element code ties and their neighbours", x.reshape(rows, cols), None))

    # Block scale ties: s at the midpoint of two e4m3 values, and its neighbours.
    e4m3 = torch.arange(1, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    mids = (e4m3[:-1] + e4m3[1:]) / 2
    rows = 32
    m = mids[torch.randint(0, mids.numel(), (rows, 8), generator=g)]
    bm = m * (6.0 * ws2)
    nudge = torch.randint(-1, 2, bm.shape, generator=g)
    bm = torch.where(nudge > 0, torch.nextafter(bm, torch.full_like(bm, 1e30)), bm)
    bm = torch.where(nudge < 0, torch.nextafter(bm, torch.zeros_like(bm)), bm)
    x = randn(rows, 128) * 0.1 * bm.repeat_interleave(16, dim=1)
    x = torch.minimum(x.abs(), bm.repeat_interleave(16, dim=1) * 0.999) * x.sign()
    x[:, ::16] = bm
    x[0, 0] = 1.0
    out.append(("block scale ties (e4m3 midpoints) and their neighbours", x, None))

    # Zeros: all-zero blocks, -0.0, tiny negatives that quantize to a zero code
    x = randn(16, 64)
    x[:, 16:32] = 0.0
    x[:, 32:48] = -0.0
    x[::2, 48:64] = -1e-9
    x[1::2, 50] = -0.0
    out.append(("zero blocks, -0.0, tiny negatives", x, None))
    out.append(("zero blocks, -0.0 in bf16", x.bfloat16(), None))

    # amax near the ends of fp32
    for scale, what in [(1e37, "amax ~1e38"), (3.0e38 / 4.5, "amax ~3e38"), (1e-30, "amax ~1e-30"),
                        (1e-36, "amax ~1e-36"), (1e-38, "amax ~1e-38 (normal ws2 ends)"),
                        (3e-40, "amax ~1e-39 (subnormal)"), (3e-42, "amax ~1e-41 (ws2 a few ulp of 2^-149)")]:
        x = randn(8, 64) * scale
        out.append((what, x, None))

    # gate and up of one expert: one amax, the larger (ModelOpt's fused-projection export)
    for ratio, dtype in [(10.0, torch.float32), (1 / 3.0, torch.float32), (1.0, torch.float32), (7.0, torch.bfloat16)]:
        gate = (randn(32, 128) * 0.02).to(dtype)
        up = (randn(32, 128) * 0.02 * ratio).to(dtype)
        shared = torch.maximum(gate.float().abs().max(), up.float().abs().max())
        out.append((f"gate of a gate/up pair, up x{ratio:g}, {str(dtype)[6:]}", gate, shared))
        out.append((f"up of a gate/up pair, up x{ratio:g}, {str(dtype)[6:]}", up, shared))
    return out


def main():
    wheel, path = sys.argv[1:3]
    Q, version = load_nvfp4_qtensor(wheel)
    dev = torch.device("cuda")
    tensors, meta = {}, {"modelopt": version, "torch": torch.__version__, "device": torch.cuda.get_device_name(0)}
    ties_exact = 0
    for i, (what, x, amax) in enumerate(cases(dev)):
        w = x.to(dev)
        a = (w.float().abs().max() if amax is None else amax.to(dev)).float()
        packed, sf, ws2 = modelopt_export(Q, w, a)
        assert torch.isfinite(sf.float()).all(), f"case {i} ({what}): ModelOpt wrote a non-finite block scale"
        p = f"c{i}."
        tensors[p + "x"] = x.contiguous()
        tensors[p + "amax"] = a.cpu().reshape(())
        tensors[p + "weight"] = packed.cpu().contiguous()
        tensors[p + "weight_scale"] = sf.cpu().contiguous()
        tensors[p + "weight_scale_2"] = ws2.cpu().reshape(()).contiguous()
        meta[p + "what"] = what
        if "ties" in what:
            q = (w.float().view(w.shape[0], -1, 16) / (sf.float() * ws2).unsqueeze(-1)).abs()
            ties_exact += int(torch.isin(q, torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], device=dev)).sum())
        print(f"  {p:<5} {what:<60} {tuple(x.shape)} {str(x.dtype)[6:]:<8} ws2 {ws2.item():.6e}")
    meta["cases"] = str(len([k for k in tensors if k.endswith(".x")]))
    save_file(tensors, path, metadata=meta)
    print(f"modelopt {version} on {meta['device']}: {meta['cases']} cases, {ties_exact} exact ties, written to {path}")


if __name__ == "__main__":
    main()

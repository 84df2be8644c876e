"""Interoperability of fp4moe's safetensors and ModelOpt checkpoints with the
`safetensors` PyPI package (and numpy), through the fp4moe CLI:

  - files the package writes are read by fp4moe (inspect, quantize, run --input);
  - files fp4moe writes (quantize's checkpoint, run's replay output) are read by the package;
  - inputs written with the package, a small checkpoint replayed
    on the CPU reference path, the outputs read back and checked against a
    separate numpy implementation of the layer.

Usage: python3 test_safetensors_interop.py PATH/TO/fp4moe   (ctest passes it)
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import safetensors
from safetensors import safe_open
from safetensors.numpy import save_file

FP4MOE = None  # set from argv

# A tiny GLM-5-like model: sigmoid scores + correction bias, top-2 of 8, one shared expert,
# layer 0 dense, layer 1 MoE.
H, I, E, K, SCALE = 64, 32, 8, 2, 2.5
CONFIG = {
    "model_type": "tiny_glm", "hidden_size": H, "moe_intermediate_size": I, "n_routed_experts": E,
    "num_experts_per_tok": K, "scoring_func": "sigmoid", "topk_method": "noaux_tc", "n_group": 1,
    "topk_group": 1, "norm_topk_prob": True, "routed_scaling_factor": SCALE, "n_shared_experts": 1,
    "num_hidden_layers": 2, "first_k_dense_replace": 1,
}
E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float64)


def bf16_bytes(x):
    """float32 array -> bf16 bytes, round to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16).tobytes()


def bf16_values(data, shape):
    return (np.frombuffer(bytes(data), dtype=np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)


def e4m3_values(data):
    b = np.frombuffer(bytes(data), dtype=np.uint8).astype(np.int64)
    exp, man = (b >> 3) & 0xF, b & 7
    v = np.where(exp == 0, man / 8.0 * 2.0 ** -6, (1 + man / 8.0) * 2.0 ** (exp - 7))
    return np.where(b & 0x80, -v, v)


def run(*args, ok=True):
    p = subprocess.run([FP4MOE, *args], capture_output=True, text=True)
    if ok and p.returncode != 0:
        raise AssertionError(f"fp4moe {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def read_all(path):
    """Every tensor of a file through the safetensors package: {name: (dtype, shape, bytes)}."""
    with open(path, "rb") as f:
        return {n: (t["dtype"], list(t["shape"]), t["data"]) for n, t in safetensors.deserialize(f.read())}


def make_fp32_checkpoint(d, rng):
    """Two shards and an index, written with safetensors.numpy (F32, F16) and serialize_file (BF16)."""
    os.makedirs(d)
    w = {}
    for p in ("gate_proj", "up_proj", "down_proj"):
        shape = (H, I) if p == "down_proj" else (I, H)
        w[f"model.layers.0.mlp.{p}.weight"] = (rng.standard_normal(shape) * 0.1).astype(np.float32)
        w[f"model.layers.1.mlp.shared_experts.{p}.weight"] = (rng.standard_normal(shape) / np.sqrt(shape[1])).astype(np.float32)
        for e in range(E):
            # Each matrix its own magnitude, so gate and up have different amax (they share the larger).
            w[f"model.layers.1.mlp.experts.{e}.{p}.weight"] = (
                rng.standard_normal(shape) * (0.5 + rng.random()) / np.sqrt(shape[1])).astype(np.float32)
    w["model.layers.1.mlp.gate.e_score_correction_bias"] = (rng.standard_normal(E) * 0.05).astype(np.float32)
    embed = rng.standard_normal((16, H)).astype(np.float16)
    router = (rng.standard_normal((E, H)) / np.sqrt(H)).astype(np.float32)
    names = sorted(w)
    shard_a = {n: w[n] for n in names if ".experts." not in n}
    shard_b = {n: w[n] for n in names if ".experts." in n}
    save_file(dict(shard_a, **{"model.embed_tokens.weight": embed}), os.path.join(d, "model-00001-of-00002.safetensors"),
              metadata={"format": "pt"})
    # BF16 through the package's framework-free API (numpy has no bfloat16).
    tensors = {n: {"dtype": "float32", "shape": list(a.shape), "data": a.tobytes()} for n, a in shard_b.items()}
    tensors["model.layers.1.mlp.gate.weight"] = {"dtype": "bfloat16", "shape": [E, H], "data": bf16_bytes(router)}
    safetensors.serialize_file(tensors, os.path.join(d, "model-00002-of-00002.safetensors"))
    weight_map = {n: "model-00001-of-00002.safetensors" for n in list(shard_a) + ["model.embed_tokens.weight"]}
    weight_map.update({n: "model-00002-of-00002.safetensors" for n in tensors})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(CONFIG, f)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        f.write("{}")
    return w, bf16_values(bf16_bytes(router), (E, H)), embed


def load_nvfp4(q, prefix):
    """Dequantize a ModelOpt NVFP4 matrix read with the package: e2m1 * block scale * weight_scale_2."""
    packed = np.frombuffer(bytes(q[prefix + "weight"][2]), dtype=np.uint8).reshape(q[prefix + "weight"][1])
    codes = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(packed.shape[0], -1)
    scales = e4m3_values(q[prefix + "weight_scale"][2]).reshape(q[prefix + "weight_scale"][1])
    ws2 = np.frombuffer(bytes(q[prefix + "weight_scale_2"][2]), dtype=np.float32)[0]
    return E2M1[codes] * np.repeat(scales, 16, axis=1) * float(ws2)


def reference_layer(q, x, logits):
    """The layer in numpy from the package's view of the checkpoint (GLM-5/DeepSeek-V3 routing)."""
    bias = np.frombuffer(bytes(q["model.layers.1.mlp.gate.e_score_correction_bias"][2]), dtype=np.float32)
    scores = 1 / (1 + np.exp(-logits.astype(np.float64)))
    ids = np.argsort(-(scores + bias), axis=1, kind="stable")[:, :K]
    wts = np.take_along_axis(scores, ids, axis=1)
    wts = wts / wts.sum(axis=1, keepdims=True) * SCALE

    def mlp(prefix, v):
        g, u = v @ load_nvfp4(q, prefix + "gate_proj.").T, v @ load_nvfp4(q, prefix + "up_proj.").T
        return (g / (1 + np.exp(-g)) * u) @ load_nvfp4(q, prefix + "down_proj.").T

    out = mlp("model.layers.1.mlp.shared_experts.", x.astype(np.float64))
    for t in range(x.shape[0]):
        for j in range(K):
            out[t] += wts[t, j] * mlp(f"model.layers.1.mlp.experts.{ids[t, j]}.", x[t:t + 1].astype(np.float64))[0]
    return out, ids, wts


def rel_err(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


class Interop(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = cls.tmp.name
        cls.rng = np.random.default_rng(7)
        cls.src = os.path.join(cls.dir, "fp32")
        cls.weights, cls.router, cls.embed = make_fp32_checkpoint(cls.src, cls.rng)
        cls.q_dir = os.path.join(cls.dir, "nvfp4")
        cls.quantize_out = run("quantize", "--in", cls.src, "--out", cls.q_dir).stdout
        cls.q = {}
        for name in sorted(os.listdir(cls.q_dir)):
            if name.endswith(".safetensors"):
                cls.q.update(read_all(os.path.join(cls.q_dir, name)))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_package_files_read_by_fp4moe(self):
        path = os.path.join(self.dir, "np.safetensors")
        save_file({"a": np.zeros((3, 5), np.float32), "b": np.arange(4, dtype=np.int64), "c": np.ones((), np.float16)}, path,
                  metadata={"k": "v"})
        out = run("inspect", path, "--tensors").stdout
        for line in ("a  F32 [3, 5]", "b  I64 [4]", "c  F16 []", "metadata {k: v}"):
            self.assertIn(line, out)
        out = run("inspect", self.src).stdout
        self.assertIn("MoE layers 1, not quantized", out)
        self.assertIn("model.layers.1.mlp.experts.{0..7}.gate_proj.weight  F32 [32, 64]  x8", out)

    def test_quantized_checkpoint_read_by_package(self):
        self.assertIn("quantized  27 expert weight tensors", self.quantize_out)
        index = json.load(open(os.path.join(self.q_dir, "model.safetensors.index.json")))
        self.assertEqual(set(index["weight_map"]), set(self.q))
        quant = json.load(open(os.path.join(self.q_dir, "hf_quant_config.json")))["quantization"]
        self.assertEqual((quant["quant_algo"], quant["group_size"]), ("NVFP4", 16))
        self.assertIn("model.layers.0.mlp.gate_proj", quant["exclude_modules"])
        self.assertTrue(os.path.exists(os.path.join(self.q_dir, "tokenizer_config.json")))
        # numpy-typed tensors through safe_open too
        with safe_open(os.path.join(self.q_dir, "model-00002-of-00002.safetensors"), "numpy") as f:
            w = f.get_tensor("model.layers.1.mlp.experts.3.up_proj.weight")
            self.assertEqual((w.dtype, w.shape), (np.uint8, (I, H // 2)))
            self.assertEqual(f.get_tensor("model.layers.1.mlp.experts.3.up_proj.weight_scale_2").shape, ())
            self.assertEqual(f.get_slice("model.layers.1.mlp.experts.3.up_proj.weight_scale").get_dtype(), "F8_E4M3")
        for e in range(E):
            for p in ("gate_proj", "up_proj", "down_proj"):
                prefix = f"model.layers.1.mlp.experts.{e}.{p}."
                self.assertEqual(self.q[prefix + "weight_scale"][0], "F8_E4M3")
                original = self.weights[prefix + "weight"]
                ws2 = np.frombuffer(bytes(self.q[prefix + "weight_scale_2"][2]), np.float32)[0]
                # ModelOpt's export: gate and up share the larger amax of the two; down keeps its own
                fused = ("gate_proj", "up_proj") if p != "down_proj" else (p,)
                amax = max(float(np.abs(self.weights[f"model.layers.1.mlp.experts.{e}.{f}.weight"]).max()) for f in fused)
                self.assertEqual(ws2, np.float32(amax) * (np.float32(1) / np.float32(2688)))
                self.assertLess(rel_err(load_nvfp4(self.q, prefix), original), 0.15)
        # copied tensors: byte for byte
        self.assertEqual(self.q["model.embed_tokens.weight"][0], "F16")
        self.assertEqual(bytes(self.q["model.embed_tokens.weight"][2]), self.embed.tobytes())
        self.assertEqual(self.q["model.layers.1.mlp.gate.weight"][0], "BF16")
        out = run("inspect", self.q_dir).stdout
        self.assertIn("MoE layers 1 checked, they load as NVFP4", out)

    def replay(self, inputs, *flags):
        path_in = os.path.join(self.dir, "in.safetensors")
        path_out = os.path.join(self.dir, "out.safetensors")
        if os.path.exists(path_out):
            os.remove(path_out)
        safetensors.serialize_file(inputs, path_in)
        p = run("run", "--cpu", "--checkpoint", self.q_dir, "--layer", "1", "--input", path_in, "--output", path_out,
                *flags, ok=False)
        return p, path_out

    def test_replay_on_the_cpu_reference(self):
        T = 5
        x = self.rng.standard_normal((T, H)).astype(np.float32)
        p, path = self.replay({"hidden_states": {"dtype": "bfloat16", "shape": [T, H], "data": bf16_bytes(x)}}, "--check")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("no GPU (--cpu given): replaying on the CPU reference", p.stdout)
        out = read_all(path)
        self.assertEqual(out["output"][:2], ("BF16", [T, H]))
        self.assertEqual(out["topk_ids"][:2], ("I32", [T, K]))
        self.assertEqual(out["topk_weights"][:2], ("F32", [T, K]))
        self.assertEqual(out["error"][:2], ("F32", []))
        xb = bf16_values(bf16_bytes(x), (T, H))
        logits = xb.astype(np.float64) @ self.router.astype(np.float64).T  # as HF: fp32 hidden . weight^T
        ref, ids, wts = reference_layer(self.q, xb, logits)
        got = bf16_values(out["output"][2], (T, H))
        self.assertLess(rel_err(got, ref), 1e-2)
        np.testing.assert_array_equal(np.frombuffer(bytes(out["topk_ids"][2]), np.int32).reshape(T, K), ids)
        np.testing.assert_allclose(np.frombuffer(bytes(out["topk_weights"][2]), np.float32).reshape(T, K), wts, rtol=1e-5)
        self.assertLess(np.frombuffer(bytes(out["error"][2]), np.float32)[0], 1e-2)
        # fp32 hidden states with router logits from the file (written by safetensors.numpy)
        logits32 = self.rng.standard_normal((T, E)).astype(np.float32)
        path_in = os.path.join(self.dir, "in32.safetensors")
        save_file({"hidden_states": x, "router_logits": logits32}, path_in)
        path_out = os.path.join(self.dir, "out32.safetensors")
        run("run", "--cpu", "--checkpoint", self.q_dir, "--layer", "1", "--input", path_in, "--output", path_out)
        ref, ids, _ = reference_layer(self.q, x, logits32)
        with safe_open(path_out, "numpy") as f:
            np.testing.assert_array_equal(f.get_tensor("topk_ids"), ids)
        self.assertLess(rel_err(bf16_values(read_all(path_out)["output"][2], (T, H)), ref), 1e-2)

    def test_replay_bad_inputs(self):
        T = 4
        x = self.rng.standard_normal((T, H)).astype(np.float32)
        x[2, 7] = np.nan
        cases = [
            ({"hidden": {"dtype": "float32", "shape": [T, H], "data": x.tobytes()}}, "no tensor 'hidden_states'"),
            ({"hidden_states": {"dtype": "float16", "shape": [T, H], "data": x.astype(np.float16).tobytes()}},
             "has dtype F16, expected BF16 or F32"),
            ({"hidden_states": {"dtype": "float32", "shape": [T, 32], "data": x[:, :32].copy().tobytes()}},
             "hidden size H = 64"),
            ({"hidden_states": {"dtype": "float32", "shape": [T, H], "data": x.tobytes()}}, "row 2 (the first with a non-finite value)"),
            ({"hidden_states": {"dtype": "float32", "shape": [T, H], "data": np.nan_to_num(x).tobytes()},
              "router_logits": {"dtype": "float32", "shape": [T, 3], "data": np.zeros((T, 3), np.float32).tobytes()}},
             "E = 8 experts"),
        ]
        for inputs, message in cases:
            p, path = self.replay(inputs)
            self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
            self.assertIn(message, p.stderr)
            self.assertFalse(os.path.exists(path), "a failed replay left an output file")
        # An output path that cannot be written: nothing is left behind.
        path_in = os.path.join(self.dir, "ok.safetensors")
        save_file({"hidden_states": np.nan_to_num(x)}, path_in)
        bad_out = os.path.join(self.dir, "no-such-dir", "out.safetensors")
        p = run("run", "--cpu", "--checkpoint", self.q_dir, "--layer", "1", "--input", path_in, "--output", bad_out, ok=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn("cannot write", p.stderr)
        self.assertFalse(os.path.exists(os.path.dirname(bad_out)))
        leftovers = [n for n in os.listdir(self.dir) if "partial" in n]
        self.assertEqual(leftovers, [])


if __name__ == "__main__":
    FP4MOE = sys.argv.pop(1)
    unittest.main(verbosity=2)

"""`fp4moe inspect` says whether a checkpoint can be used, and `fp4moe run
--checkpoint` agrees: for each kind of bad file (truncated, header past the
end, overlapping or out-of-range offsets, wrong dtype or shape, missing
tensors, NaN or negative block scales, NaN weight_scale_2, a quant_algo other
than NVFP4, a broken config.json) inspect names the file, the tensor and the
value and exits non-zero, and run refuses the same checkpoint with the same
problem; a usable checkpoint exits 0 from both. Several problems are all named.

Usage: python3 test_inspect_verdicts.py PATH/TO/fp4moe   (ctest passes it)
"""
import json
import os
import shutil
import struct
import sys
import tempfile
import unittest

import numpy as np

import test_safetensors_interop as interop

LAYER = "1"


def read_raw(path):
    """(header dict, data bytes) of a safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    return json.loads(blob[8:8 + n]), bytearray(blob[8 + n:])


def drop_tensor(header, data, name):
    """Removes a tensor and its bytes (a safetensors file may leave no unused bytes)."""
    entries = sorted(((k, v) for k, v in header.items() if k != "__metadata__"), key=lambda kv: kv[1]["data_offsets"][0])
    out = bytearray()
    for k, v in entries:
        if k == name:
            del header[k]
            continue
        b, e = v["data_offsets"]
        v["data_offsets"] = [len(out), len(out) + e - b]
        out += data[b:e]
    data[:] = out


def write_raw(path, header, data, header_length=None):
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text) if header_length is None else header_length))
        f.write(text)
        f.write(data)


class InspectVerdicts(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        src = os.path.join(cls.tmp.name, "fp32")
        interop.make_fp32_checkpoint(src, np.random.default_rng(3))
        cls.good = os.path.join(cls.tmp.name, "good")
        interop.run("quantize", "--in", src, "--out", cls.good)
        with open(os.path.join(cls.good, "model.safetensors.index.json")) as f:
            index = json.load(f)["weight_map"]
        cls.shard = {n: f for n, f in index.items()}
        cls.count = 0

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def copy(self):
        InspectVerdicts.count += 1
        d = os.path.join(self.tmp.name, f"bad{self.count}")
        shutil.copytree(self.good, d)
        return d

    def file_of(self, d, tensor):
        return os.path.join(d, self.shard[tensor])

    def edit(self, d, tensor, fn):
        """fn(header, data, entry) edits the shard holding `tensor` in place."""
        path = self.file_of(d, tensor)
        header, data = read_raw(path)
        fn(header, data, header[tensor])
        write_raw(path, header, data)
        return path

    def drop(self, d, name):
        """The tensor gone from its shard and from the index."""
        self.edit(d, name, lambda header, data, entry: drop_tensor(header, data, name))
        path = os.path.join(d, "model.safetensors.index.json")
        with open(path) as f:
            index = json.load(f)
        del index["weight_map"][name]
        with open(path, "w") as f:
            json.dump(index, f)

    def expect_refused(self, d, *needles):
        p = interop.run("inspect", d, ok=False)
        self.assertEqual(p.returncode, 2, f"inspect accepted a bad checkpoint:\n{p.stdout}\n{p.stderr}")
        text = p.stdout + p.stderr
        for n in needles:
            self.assertIn(n, text)
        self.assertNotIn("load as NVFP4", p.stdout)
        x = np.ones((2, interop.H), np.float32)
        path_in = os.path.join(d, "..", f"in{self.count}.safetensors")
        interop.save_file({"hidden_states": x}, path_in)
        r = interop.run("run", "--cpu", "--checkpoint", d, "--layer", LAYER, "--input", path_in, "--output",
                        os.path.join(self.tmp.name, f"out{self.count}.safetensors"), ok=False)
        self.assertEqual(r.returncode, 2, f"run accepted what inspect refused:\n{r.stdout}\n{r.stderr}")
        self.assertIn(needles[-1], r.stderr)
        return text

    def test_a_usable_checkpoint_passes_both(self):
        p = interop.run("inspect", self.good)
        self.assertIn("MoE layers 1 checked, they load as NVFP4", p.stdout)
        self.assertNotIn("problem", p.stdout)
        interop.run("inspect", self.good, "--layer", LAYER)

    def test_missing_down_proj_weight_scale(self):
        d = self.copy()
        name = "model.layers.1.mlp.experts.3.down_proj.weight_scale"
        self.drop(d, name)
        self.expect_refused(d, d, f"no tensor '{name}'")

    def test_nan_block_scale(self):
        d = self.copy()
        name = "model.layers.1.mlp.experts.2.up_proj.weight_scale"

        def nan(header, data, entry):
            data[entry["data_offsets"][0] + 4 + 1] = 0x7F  # row 1, block 1 (4 blocks per row: H = 64)
        path = self.edit(d, name, nan)
        self.expect_refused(d, path, name, "block scale at row 1, block 1 is NaN (byte 0x7f)")

    def test_negative_block_scales_are_counted(self):
        d = self.copy()
        name = "model.layers.1.mlp.experts.0.gate_proj.weight_scale"

        def negative(header, data, entry):
            b = entry["data_offsets"][0]
            data[b + 3] = 0xB8
            data[b + 5] = 0xFF
        path = self.edit(d, name, negative)
        self.expect_refused(d, path, "1 NaN and 1 negative block scales in all", "block scale at row 0, block 3 is negative (byte 0xb8)")

    def test_nan_weight_scale_2(self):
        d = self.copy()
        name = "model.layers.1.mlp.experts.5.gate_proj.weight_scale_2"

        def nan(header, data, entry):
            b = entry["data_offsets"][0]
            data[b:b + 4] = struct.pack("<f", float("nan"))
        path = self.edit(d, name, nan)
        self.expect_refused(d, path, name, "weight_scale_2 = nan is not a finite positive number")

    def test_quant_algo_fp8(self):
        d = self.copy()
        q = os.path.join(d, "hf_quant_config.json")
        with open(q) as f:
            j = json.load(f)
        j["quantization"]["quant_algo"] = "FP8"
        with open(q, "w") as f:
            json.dump(j, f)
        self.expect_refused(d, q + ": quant_algo is 'FP8'; fp4moe reads NVFP4 checkpoints")

    def test_broken_config_json(self):
        d = self.copy()
        with open(os.path.join(d, "config.json"), "w") as f:
            f.write('{"hidden_size": 64,')
        self.expect_refused(d, os.path.join(d, "config.json"))

    def test_wrong_dtype(self):
        d = self.copy()
        name = "model.layers.1.mlp.experts.4.up_proj.weight_scale"

        def retype(header, data, entry):
            entry["dtype"] = "U8"
        path = self.edit(d, name, retype)
        self.expect_refused(d, path, name, "has dtype U8, expected F8_E4M3")

    def test_wrong_shape(self):
        d = self.copy()
        name = "model.layers.1.mlp.experts.6.down_proj.weight"

        def reshape(header, data, entry):
            rows, cols = entry["shape"]
            entry["shape"] = [cols, rows]
        path = self.edit(d, name, reshape)
        self.expect_refused(d, path, name, "has shape [16, 64], expected [64, 16]")

    def test_truncated_file(self):
        d = self.copy()
        path = self.file_of(d, "model.layers.1.mlp.experts.0.gate_proj.weight")
        with open(path, "rb") as f:
            blob = f.read()
        with open(path, "wb") as f:
            f.write(blob[:len(blob) - 100])
        self.expect_refused(d, path, "run past the data section")

    def test_header_longer_than_the_file(self):
        d = self.copy()
        path = self.file_of(d, "model.layers.1.mlp.experts.0.gate_proj.weight")
        header, data = read_raw(path)
        write_raw(path, header, data, header_length=10**9)
        self.expect_refused(d, path, "header length")

    def test_overlapping_offsets(self):
        d = self.copy()
        name = "model.layers.1.mlp.experts.1.gate_proj.weight_scale"

        def overlap(header, data, entry):
            other = header["model.layers.1.mlp.experts.1.gate_proj.weight"]["data_offsets"]
            n = entry["data_offsets"][1] - entry["data_offsets"][0]
            entry["data_offsets"] = [other[0], other[0] + n]
        path = self.edit(d, name, overlap)
        self.expect_refused(d, path, "overlap")

    def test_offsets_out_of_range(self):
        d = self.copy()
        name = "model.layers.1.mlp.experts.1.down_proj.weight"

        def past(header, data, entry):
            n = entry["data_offsets"][1] - entry["data_offsets"][0]
            entry["data_offsets"] = [len(data), len(data) + n]
        path = self.edit(d, name, past)
        self.expect_refused(d, path, name)

    def test_every_problem_is_named(self):
        d = self.copy()
        scale = "model.layers.1.mlp.experts.2.up_proj.weight_scale"
        missing = "model.layers.1.mlp.shared_experts.down_proj.weight_scale_2"
        ws2 = "model.layers.1.mlp.experts.7.down_proj.weight_scale_2"

        def nan(header, data, entry):
            data[entry["data_offsets"][0]] = 0xFF
        self.edit(d, scale, nan)

        self.drop(d, missing)

        def negative(header, data, entry):
            b = entry["data_offsets"][0]
            data[b:b + 4] = struct.pack("<f", -1.0)
        self.edit(d, ws2, negative)
        text = self.expect_refused(d, f"no tensor '{missing}'", "weight_scale_2 = -1 is not a finite positive number",
                                   "block scale at row 0, block 0 is NaN (byte 0xff)")
        self.assertIn("problems (3):", text)
        self.assertIn("3 problem(s)", text)


if __name__ == "__main__":
    interop.FP4MOE = sys.argv.pop(1)
    unittest.main(verbosity=2)

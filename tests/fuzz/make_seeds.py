"""Writes the fuzzer's seed corpus: a few small valid safetensors files.
Run once (python3 make_seeds.py); the seeds are committed."""
import json
import os
import struct

import numpy as np
from safetensors.numpy import save_file

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds")
os.makedirs(here, exist_ok=True)


def raw(path, entries, metadata=None):
    """entries: (name, dtype, shape, bytes); writes the format by hand (BF16, F8_E4M3)."""
    header, data = {}, b""
    for name, dtype, shape, blob in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


save_file({"x": np.arange(6, dtype=np.float32).reshape(2, 3)}, os.path.join(here, "f32_matrix.safetensors"))
save_file({"s": np.array(0.5, dtype=np.float32), "ids": np.array([[1, 2]], dtype=np.int32),
           "empty": np.zeros((0, 4), dtype=np.float16)}, os.path.join(here, "scalar_int_empty.safetensors"),
          metadata={"format": "np"})
raw(os.path.join(here, "modelopt_expert.safetensors"), [
    ("model.layers.0.mlp.experts.0.gate_proj.weight", "U8", [2, 8], bytes(range(16))),
    ("model.layers.0.mlp.experts.0.gate_proj.weight_scale", "F8_E4M3", [2, 1], b"\x38\x40"),
    ("model.layers.0.mlp.experts.0.gate_proj.weight_scale_2", "F32", [], struct.pack("<f", 1e-3)),
    ("model.layers.0.mlp.gate.weight", "BF16", [1, 16], b"\x80\x3f" * 16),
])
raw(os.path.join(here, "empty.safetensors"), [])

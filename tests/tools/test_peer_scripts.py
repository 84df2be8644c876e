#!/usr/bin/env python3
"""The peer-engine scripts without a GPU: bench/peers.py's argument handling
and report parsing, its GEMM table, fp4moe's rendering of the peers' results
(`fp4moe bench --render`), and scripts/fetch-peers.sh's argument handling.
  test_peer_scripts.py SOURCE_DIR [FP4MOE_CLI]"""
import copy
import json
import os
import subprocess
import sys
import tempfile
import unittest

SRC = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
CLI = sys.argv[2] if len(sys.argv) > 2 else None
PEERS = os.path.join(SRC, "bench", "peers.py")
sys.path.insert(0, os.path.join(SRC, "bench"))
from peer_engines.tables import gemm_table, peer_cell  # noqa: E402
from peers import ENGINES as PEER_ENGINES, write_report  # noqa: E402


def run(*args, env=None):
    return subprocess.run([sys.executable, PEERS, *args], capture_output=True, text=True, env=env)


def strict_json(text):
    """JSON as nlohmann::json (fp4moe) reads it: NaN and Infinity refused."""
    def refuse(name):
        raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_constant=refuse)


def timing(ms):
    return {"median_ms": ms, "min_ms": ms, "max_ms": ms}


ENGINES = [
    {"variant": "humming w4a16", "engine": "humming", "version": "humming-kernels 0.1.19", "activations": "bf16",
     "tolerance": 1e-2, "status": "ok", "jit_seconds": 12.5},
    {"variant": "humming w4a8 g128", "engine": "humming", "version": "humming-kernels 0.1.19", "activations": "fp8",
     "tolerance": 6e-2, "status": "unsupported", "reason": "NVFP4's scale groups of 16 | W4A8 needs 32"},
]


def peers_of(ms):
    return {"humming w4a16": {"gemm1": {"status": "ok", "ms": ms, "rel_error": 2e-3},
                              "gemm2": {"status": "wrong", "reason": "relative error 3.1e-01 > 1e-02"},
                              "layer": {"status": "failed", "reason": "RuntimeError: " + "x" * 100}}}


LAYER_REPORT = {
    "device": "NVIDIA H200", "model": "glm5", "finalize": "fused",
    "ceilings": {"copy_tb_per_s": 4.0, "bf16_tflop_per_s": 600.0,
                 "energy": {"measured": True, "pj_per_byte": 115.0, "pj_per_bf16_flop": 0.77, "pj_per_fp8_flop": 0.4,
                            "static_w": 150.0, "power_cap_w": 700.0}},
    "timing": {"warm_seconds": 2.0},
    "peer_engines": ENGINES,
    "cases": [{"tokens": T, "tokens_per_expert": T * 8 / 256, "max_rows_over_mean": 1.0,
               "layer": {"time": timing(0.1), "floor_fraction": 0.5, "bytes": 1e9, "flops": 1e9, "tb_per_s": 3.0,
                         "tflop_per_s": 10.0, "non_gemm_fraction": 0.1},
               "gemms": [{"name": "gemm1", "time": timing(0.04), "floor_fraction": 0.8, "bytes": 1e8, "flops": 1e8,
                          "tb_per_s": 3.0, "tflop_per_s": 5.0},
                         {"name": "gemm2", "time": timing(0.02), "floor_fraction": 0.8, "bytes": 1e8, "flops": 1e8,
                          "tb_per_s": 3.0, "tflop_per_s": 5.0}],
               "peers": peers_of(0.05)} for T in (1, 8)],
}
LAYER_REPORT["cases"][1]["peers"]["humming w4a16"]["layer"] = {"status": "ok", "ms": 0.15}

GEMM_REPORT = {
    "device": "NVIDIA H200", "experts": 256, "model": "glm5",
    "ceilings": {"copy_tb_per_s": 4.0, "bf16_tflop_per_s": 600.0},
    "cases": [{"gemm": "gemm1", "n": 4096, "k": 6144, "tokens": 8, "active_experts": 60, "median_ms": 0.04,
               "tb_per_s": 3.0, "tflop_per_s": 4.0, "dense_fraction": 0.01, "floor_ms": 0.03, "floor_fraction": 0.75,
               "best_tile": "128x64", "speedup_vs_cublas": 2.0, "speedup_vs_all_warps": 1.1, "counts": [1] * 64}],
}


class PeersArguments(unittest.TestCase):
    def test_exactly_one_input(self):
        for args in ([], ["--in", "a.json", "--layer-in", "b.json"]):
            r = run(*args, "--out", "x.json")
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("exactly one of --in and --layer-in", r.stderr)

    def test_layer_needs_inputs(self):
        r = run("--layer-in", "b.json", "--out", "x.json")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--layer-in needs --inputs", r.stderr)

    def test_bad_engine_named(self):
        r = run("--in", "a.json", "--out", "x.json", "--engines", "torch,flashinfer")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("'flashinfer'", r.stdout + r.stderr)
        self.assertIn("torch, humming, triton_kernels", r.stdout + r.stderr)

    def test_bad_reps(self):
        r = run("--in", "a.json", "--out", "x.json", "--reps", "1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--reps 1", r.stderr)

    def test_report_not_json_named(self):
        with tempfile.TemporaryDirectory() as d:
            bad = os.path.join(d, "broken.json")
            with open(bad, "w") as f:
                f.write('{"cases": [')
            r = run("--in", bad, "--out", os.path.join(d, "o.json"))
            self.assertEqual(r.returncode, 2)
            self.assertIn("broken.json is not a benchmark report", r.stderr)
            self.assertFalse(os.path.exists(os.path.join(d, "o.json")), "no partial output")

    def test_missing_inputs_file_named(self):
        with tempfile.TemporaryDirectory() as d:
            rep = os.path.join(d, "bench.json")
            with open(rep, "w") as f:
                json.dump(LAYER_REPORT, f)
            r = run("--layer-in", rep, "--inputs", os.path.join(d, "nope.safetensors"), "--out", rep)
            self.assertEqual(r.returncode, 2)
            self.assertIn("nope.safetensors does not exist", r.stderr)

    def test_without_a_gpu_every_engine_is_reported(self):
        """No PyTorch with CUDA here: every engine listed, with the reason, and the table still printed."""
        try:
            import torch  # noqa: F401
            if torch.cuda.is_available():
                self.skipTest("a GPU is present: the GPU run covers this")
        except ImportError:
            pass
        with tempfile.TemporaryDirectory() as d:
            rep, out, table = (os.path.join(d, n) for n in ("g.json", "o.json", "t.md"))
            with open(rep, "w") as f:
                json.dump({**GEMM_REPORT, "noise": float("nan")}, f)
            r = run("--in", rep, "--out", out, "--table", table, "--engines", "torch,humming")
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(out) as f:
                got = strict_json(f.read())
            self.assertIsNone(got["noise"], "NaN is written as null")
            self.assertEqual([e["variant"] for e in got["peer_engines"]], ["torch", "humming"])
            for e in got["peer_engines"]:
                self.assertEqual(e["status"], "unavailable")
                self.assertIn("PyTorch", e["reason"])
            with open(table) as f:
                md = f.read()
            self.assertIn(" torch | humming |", md)
            self.assertIn("- humming: ?, unavailable: no PyTorch", md)
            self.assertTrue(md.rstrip().endswith("| unavailable | unavailable |"), md)


class PeersReport(unittest.TestCase):
    def test_non_finite_numbers_are_written_as_null(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "bench.json")
            write_report({"a": float("nan"), "b": [float("inf"), 1.5], "c": {"d": -float("inf"), "e": 2}}, out)
            with open(out) as f:
                got = strict_json(f.read())
            self.assertEqual(got, {"a": None, "b": [None, 1.5], "c": {"d": None, "e": 2}})
            self.assertEqual(os.listdir(d), ["bench.json"], "no temporary file left")

    def test_a_failed_write_leaves_the_old_report_whole(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "bench.json")
            with open(out, "w") as f:
                f.write('{"cases": []}')
            with self.assertRaises(TypeError):
                write_report({"cases": [object()]}, out)
            with open(out) as f:
                self.assertEqual(f.read(), '{"cases": []}')
            self.assertEqual(os.listdir(d), ["bench.json"], "no temporary file left")


class PeerTables(unittest.TestCase):
    def test_cells(self):
        c = {"peers": peers_of(0.05)}
        self.assertEqual(peer_cell(c, "humming w4a16", "gemm1", 0.04), "0.0500 (1.25x)")
        self.assertEqual(peer_cell(c, "humming w4a16", "gemm2", 0.02), "wrong: relative error 3.1e-01 > 1e-02")
        long = peer_cell(c, "humming w4a16", "layer", 0.1)
        self.assertTrue(long.startswith("failed: RuntimeError") and long.endswith("...") and len(long) == 60, long)
        self.assertEqual(peer_cell(c, "triton_kernels", "gemm1", 0.04), "n/a")
        self.assertEqual(peer_cell(c, "humming w4a8 g128", "gemm1", 0.04, ENGINES), "unsupported")
        c["peers"]["humming w4a16"]["gemm1"]["graph"] = False  # timed eagerly: said so
        self.assertEqual(peer_cell(c, "humming w4a16", "gemm1", 0.04), "0.0500 (1.25x, eager)")
        self.assertEqual(peer_cell(c, "humming w4a16", "gemm1", 0), "0.0500 (eager)")
        c["peers"]["humming w4a16"]["gemm1"]["ms"] = None  # a non-finite time, as the report holds it
        self.assertEqual(peer_cell(c, "humming w4a16", "gemm1", 0.04), "not finite")

    def test_gemm_table(self):
        rep = copy.deepcopy(GEMM_REPORT)
        rep["peer_engines"] = ENGINES
        rep["cases"][0]["peers"] = peers_of(0.08)
        md = gemm_table(rep)
        row = [line for line in md.splitlines() if line.startswith("| gemm1 ")][0]
        self.assertIn("0.0800 (2.00x)", row)
        head = [line for line in md.splitlines() if line.startswith("| GEMM ")][0]
        self.assertEqual(head.count("|"), row.count("|"), "a cell per column")
        self.assertIn("humming w4a8 g128", head)
        self.assertIn("unsupported: NVFP4's scale groups of 16 | W4A8 needs 32", md)  # the engine list keeps the reason
        self.assertIn("first calls (JIT) 12.5 s, not timed", md)


@unittest.skipUnless(CLI, "no fp4moe CLI given")
class RenderedByFp4moe(unittest.TestCase):
    def render(self, rep):
        """`fp4moe bench --render` of the report as bench/peers.py writes it: {bench.md, .csv, .svg: text}."""
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bench.json")
            write_report(rep, path)
            r = subprocess.run([CLI, "bench", "--render", path, "--out", d], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            out = {}
            for ext in ("md", "csv", "svg"):
                with open(os.path.join(d, "bench." + ext)) as f:
                    out[ext] = f.read()
            return out

    def test_peers_option_names_the_engines_of_peers_py(self):
        r = subprocess.run([CLI, "bench", "--help"], capture_output=True, text=True)
        self.assertIn("--peers TEXT=" + ",".join(PEER_ENGINES), r.stdout)
        r = subprocess.run([CLI, "bench", "--peers", "torch,flashinfer", "--no-peers"], capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("'flashinfer' is not one of " + ", ".join(PEER_ENGINES), r.stdout + r.stderr)

    def test_render_peers(self):
        out = self.render(LAYER_REPORT)
        md = out["md"]
        self.assertIn("| gemm1: T | fp4moe ms | humming w4a16 | humming w4a8 g128 |", md)
        self.assertIn("| 8 | 0.0400 | 0.0500 (1.25x) | unsupported |", md)
        self.assertIn("| gemm2: T | fp4moe ms |", md)
        self.assertIn("wrong: relative error 3.1e-01 > 1e-02", md)
        self.assertIn("| 8 | 0.1000 | 0.1500 (1.50x) | unsupported |", md)
        self.assertIn("- humming w4a8 g128: humming-kernels 0.1.19, unsupported: NVFP4's scale groups of 16", md)
        self.assertIn("0.40 pJ/FP8 FLOP", md)
        self.assertIn("layer vs humming w4a16", out["svg"])  # the one layer time that passed its check: 1.5x
        self.assertIn(",humming w4a16/gemm1,0.05,", out["csv"])

    def test_render_marks_eager_timing(self):
        rep = copy.deepcopy(LAYER_REPORT)
        rep["cases"][1]["peers"]["humming w4a16"]["layer"]["graph"] = False
        rep["cases"][1]["peers"]["humming w4a16"]["gemm1"]["graph"] = True
        md = self.render(rep)["md"]
        self.assertIn("| 8 | 0.1000 | 0.1500 (1.50x, eager) | unsupported |", md)
        self.assertIn("| 8 | 0.0400 | 0.0500 (1.25x) | unsupported |", md)

    def test_render_reads_non_finite_numbers(self):
        """bench/peers.py writes NaN and infinities as null; fp4moe reads the file and says "not finite"."""
        rep = copy.deepcopy(LAYER_REPORT)
        rep["cases"][1]["peers"]["humming w4a16"]["gemm1"]["ms"] = float("inf")
        rep["cases"][1]["peers"]["humming w4a16"]["gemm2"]["rel_error"] = float("nan")
        rep["peer_engines"][0]["jit_seconds"] = float("nan")
        out = self.render(rep)
        self.assertIn("| 8 | 0.0400 | not finite | unsupported |", out["md"])
        self.assertIn("| 1 | 0.0400 | 0.0500 (1.25x) | unsupported |", out["md"])
        self.assertIn("first calls (JIT) not finite, not timed", out["md"])
        self.assertEqual(out["csv"].count(",humming w4a16/gemm1,"), 1, "only the finite time is a row")


class FetchPeers(unittest.TestCase):
    def test_bad_argument_named(self):
        script = os.path.join(SRC, "scripts", "fetch-peers.sh")
        r = subprocess.run(["bash", script, "--bogus"], capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--bogus", r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]], verbosity=2)

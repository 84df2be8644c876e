#!/usr/bin/env python3
"""The peer engines, measured in the same run as fp4moe, on the same inputs.

  --layer-in F : `fp4moe bench`'s JSON; with --inputs (the weights, hidden states
                 and logits that run used, src/measure/peer_inputs.hpp) every
                 engine variant's GEMM1, GEMM2 and layer are checked against the
                 exact reference, then timed; results go into the JSON (--out).
  --in F       : bench_grouped_gemm's JSON (one GEMM per case); prints a table.

Engines (--engines): torch (bf16 weights, torch._grouped_mm), humming
(humming-kernels, W4A16 and W4A8), triton_kernels (OpenAI's matmul_ogs, as vLLM
runs gpt-oss). Humming and triton_kernels come from scripts/fetch-peers.sh
(--peers-dir). An engine that is missing, fails or gets a wrong answer is
reported with the reason, never dropped. Benchmark tool only: nothing here is
part of fp4moe (docs/benchmarks.md "Peers").
"""
import argparse
import importlib
import json
import math
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from peer_engines import base  # noqa: E402
from peer_engines.tables import gemm_table  # noqa: E402

ENGINES = {"torch": "torch_bf16", "humming": "humming", "triton_kernels": "openai_triton_kernels"}
STEPS = ("gemm1", "gemm2", "layer")
# Back-to-back replays before each peer step is timed: the GPU has been busy
# since the run began (fp4moe's cases, then the peers), so a short settle
# reaches the same steady clocks and power as fp4moe's longer per-case warm-up.
PEER_WARM_SECONDS = 0.5


def first_line(ex):
    text = str(ex).strip().splitlines()
    return f"{type(ex).__name__}: {text[0] if text else ''}"[:200]


def parse_engines(text):
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in ENGINES]
    if bad or not names:
        raise SystemExit(f"peers.py: --engines {text!r}: {', '.join(map(repr, bad)) or 'empty'}; "
                         f"choose from {', '.join(ENGINES)}")
    return names


def add_peer_paths(peers_dir):
    """Where scripts/fetch-peers.sh left the engines: triton_kernels as a
    package directory, Humming installed under site/ from its wheel."""
    for p in (os.path.join(peers_dir, "site"), peers_dir):
        if os.path.isdir(p) and p not in sys.path:
            sys.path.insert(0, p)


def load_engines(names):
    """[(name, module or None, why not)]"""
    out = []
    for n in names:
        try:
            out.append((n, importlib.import_module("peer_engines." + ENGINES[n]), None))
        except Exception as ex:  # noqa: BLE001 - an adapter that cannot load is reported
            out.append((n, None, first_line(ex)))
    return out


def prepare_variants(torch, engines, problem, dequantized):
    """Every variant of every engine: table entries, and the prepared peers."""
    from peer_engines.reference import TOLERANCE
    entries, prepared = [], []
    for name, mod, why in engines:
        if mod is None:
            entries.append({"variant": name, "engine": name, "status": "unavailable", "reason": why})
            continue
        try:
            ver = mod.version()
            variants = mod.variants(problem)
        except base.PeerUnavailable as ex:
            entries.append({"variant": name, "engine": name, "status": "unavailable", "reason": str(ex)})
            continue
        for v in variants:
            e = {"variant": v.name, "engine": name, "version": ver, "activations": v.activations,
                 "tolerance": TOLERANCE[v.activations]}
            entries.append(e)
            if v.unsupported:
                e.update(status="unsupported", reason=v.unsupported)
                continue
            try:
                t0 = time.perf_counter()
                kw = {"dequantized": dequantized} if getattr(mod, "WANTS_DEQUANTIZED", False) else {}
                peer = mod.make(problem, v, **kw)
                torch.cuda.synchronize()
                e.update(status="ok", prepare_seconds=time.perf_counter() - t0, jit_seconds=0.0)
                prepared.append((e, peer))
            except Exception as ex:  # noqa: BLE001
                traceback.print_exc()
                e.update(status="failed", reason=first_line(ex))
    return entries, prepared


# FP4MOE_PEERS_BUDGET_S: seconds the peers may take in all (a GPU-machine call
# has a hard limit); steps past it are reported as skipped, with the reason.
BUDGET_S = float(os.environ.get("FP4MOE_PEERS_BUDGET_S", "inf"))
STARTED = time.monotonic()


def measure_step(torch, peer, step, case, ref, entry, reps, warm):
    """Check one step's output against the reference, then time it."""
    from peer_engines.reference import rel_error
    from peer_engines.timing import timed
    if time.monotonic() - STARTED > BUDGET_S:
        return {"status": "skipped", "reason": f"the peers' time budget of {BUDGET_S:g} s was spent"}
    try:
        st = getattr(peer, step)(case)
    except NotImplementedError:
        return {"status": "n/a", "reason": f"no separate {step}"}
    except Exception as ex:  # noqa: BLE001
        traceback.print_exc()
        return {"status": "failed", "reason": first_line(ex)}
    r = {"kind": st.kind, "note": st.note}
    try:
        t0 = time.perf_counter()
        out = st.run()
        torch.cuda.synchronize()
        entry["jit_seconds"] = entry.get("jit_seconds", 0.0) + time.perf_counter() - t0
        want = ref.of(st.kind)
        if want is None:
            return {**r, "status": "failed", "reason": f"no reference for {st.kind}"}
        err = rel_error(torch, st.to_reference(out), want)
        r["rel_error"] = err
        if not err <= entry["tolerance"]:
            return {**r, "status": "wrong", "reason": f"relative error {err:.2e} > {entry['tolerance']:.0e}"}
        del out
        r["ms"], r["graph"] = timed(torch, st.run, reps, graph=True, warm_seconds=warm)
        r["status"] = "ok"
    except Exception as ex:  # noqa: BLE001
        traceback.print_exc()
        r.update(status="failed", reason=first_line(ex))
    return r


def dequantize(torch, problem):
    from peer_engines.reference import DequantizedProjection as D
    dq = {"w13": D(torch, problem.w13, problem.format), "w2": D(torch, problem.w2, problem.format)}
    if problem.shared13 is not None:
        dq["shared13"] = D(torch, problem.shared13, problem.format)
        dq["shared2"] = D(torch, problem.shared2, problem.format)
    return dq


def run_cases(torch, problem, dq, prepared, cases, steps, reps, warm, log):
    """cases: [(report case dict, base.Case)]; fills case["peers"]."""
    from peer_engines.reference import CaseReference
    shared = (dq["shared13"], dq["shared2"]) if "shared13" in dq else None
    for c, case in cases:
        ref = CaseReference(torch, problem, dq["w13"], dq["w2"], shared, case)
        c["routing_mismatch_tokens"] = ref.routing_mismatch_tokens
        c["peers"] = {}
        for e, peer in prepared:
            c["peers"][e["variant"]] = {s: measure_step(torch, peer, s, case, ref, e, reps, warm) for s in steps(c)}
            log(c, e["variant"], c["peers"][e["variant"]])
        del ref
        torch.cuda.empty_cache()


def log_line(c, variant, res):
    cells = [f"{s} {r['ms']:.4f} ms" if r.get("status") == "ok" else f"{s} {r.get('status')}: {r.get('reason', '')}"
             for s, r in res.items()]
    print(f"peers.py: T={c['tokens']} {variant}: " + "; ".join(cells), flush=True)


def layer_peers(torch, rep, inputs, engines, reps):
    from peer_engines.problem_io import layer_case, load_problem
    problem, tensors = load_problem(rep, inputs)
    dq = dequantize(torch, problem)
    entries, prepared = prepare_variants(torch, engines, problem, dq)
    rep["peer_engines"] = entries
    cases = [(c, layer_case(torch, c, tensors, problem)) for c in rep["cases"]]
    run_cases(torch, problem, dq, prepared, cases, lambda c: STEPS, reps, PEER_WARM_SECONDS, log_line)
    rep["peer_timing"] = (f"each step checked, then CUDA-graph replays: {PEER_WARM_SECONDS:g} s back to back, "
                          f"then the median of {reps}")


def gemm_peers(torch, rep, engines, reps):
    """bench_grouped_gemm's cases (GLM-5's GEMMs, NVFP4): each engine's GEMM on
    the case's per-expert row counts."""
    from peer_engines.problem_io import counts_case, gemm_problem
    g1 = next(c for c in rep["cases"] if c["gemm"].startswith("gemm1"))
    g2 = next((c for c in rep["cases"] if c["gemm"] == "gemm2"), None)
    hidden, inter = g1["k"], g1["n"] // 2
    if g2 is not None and (g2["n"], g2["k"]) != (hidden, inter):
        raise SystemExit(f"peers.py: GEMM2 is N={g2['n']} K={g2['k']}, not GEMM1's transpose ({hidden}, {inter})")
    top_k = rep.get("top_k", 8)
    problem = gemm_problem(torch, rep.get("model", "glm5"), rep.get("format", "nvfp4"), rep["experts"], top_k,
                           hidden, inter)
    dq = dequantize(torch, problem)
    entries, prepared = prepare_variants(torch, engines, problem, dq)
    rep["peer_engines"] = entries
    cases = [(c, counts_case(torch, problem, c["counts"])) for c in rep["cases"]]
    run_cases(torch, problem, dq, prepared, cases, lambda c: ("gemm1",) if c["gemm"].startswith("gemm1") else ("gemm2",),
              reps, PEER_WARM_SECONDS, log_line)
    rep["peer_weights"] = "random FP4 weights of fp4moe's distribution (fp4moe's own are drawn in its prepared layout)"


def finite_or_none(v):
    """v with every non-finite float as None: JSON has no NaN or Infinity
    (fp4moe's parser, nlohmann::json, refuses them), and null is what the
    table renderers show as not finite."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: finite_or_none(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [finite_or_none(x) for x in v]
    return v


def write_report(rep, path, indent=None):
    """The report as strict JSON, whole or not at all: fp4moe reads it back
    from the same path, so a temporary file beside it replaces it at once."""
    text = json.dumps(finite_or_none(rep), indent=indent, allow_nan=False)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--in", dest="inp", help="bench_grouped_gemm JSON")
    ap.add_argument("--layer-in", help="fp4moe bench JSON")
    ap.add_argument("--inputs", help="the inputs file fp4moe bench wrote (with --layer-in)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--table", default=None, help="also write the GEMM table here (with --in)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--engines", default="torch,humming,triton_kernels")
    ap.add_argument("--peers-dir", default=os.environ.get("FP4MOE_PEERS_DIR", ".whl/peers"),
                    help="where scripts/fetch-peers.sh left Humming and triton_kernels")
    a = ap.parse_args(argv)
    if bool(a.inp) == bool(a.layer_in):
        ap.error("give exactly one of --in and --layer-in")
    if a.layer_in and not a.inputs:
        ap.error("--layer-in needs --inputs (the file fp4moe bench wrote)")
    if a.reps < 3:
        ap.error(f"--reps {a.reps}: at least 3")
    names = parse_engines(a.engines)
    path = a.layer_in or a.inp
    try:
        with open(path) as f:
            rep = json.load(f)
        rep["cases"]
    except (OSError, ValueError, KeyError, TypeError) as ex:
        ap.error(f"{path} is not a benchmark report ({first_line(ex)})")
    if a.inputs and not os.path.isfile(a.inputs):
        ap.error(f"--inputs {a.inputs} does not exist")
    add_peer_paths(a.peers_dir)
    try:
        import torch
        if not torch.cuda.is_available():
            raise ImportError("no CUDA device for PyTorch")
    except ImportError as ex:
        torch = None
        rep["peer_engines"] = [{"variant": n, "engine": n, "status": "unavailable",
                                "reason": f"no PyTorch with CUDA ({ex})"} for n in names]
        print(f"peers.py: no peer engine can run ({ex})")
    if torch is not None:
        if a.layer_in:
            layer_peers(torch, rep, a.inputs, load_engines(names), a.reps)
        else:
            gemm_peers(torch, rep, load_engines(names), a.reps)
    rep = finite_or_none(rep)  # the table shows what the file holds
    write_report(rep, a.out, indent=None if a.layer_in else 1)
    if a.inp:
        table = gemm_table(rep)
        if a.table:
            with open(a.table, "w") as f:
                f.write(table + "\n")
        print(table)


if __name__ == "__main__":
    main()

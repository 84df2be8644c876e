"""Markdown tables of the peers' results (the layer's are rendered by fp4moe
itself from the JSON: src/measure/layer_benchmark.cpp). A number that is
null in the report (bench/peers.py writes NaN and infinities so) shows as
"not finite"."""
import math


def finite(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def variants_of(rep):
    return [e["variant"] for e in rep.get("peer_engines", [])]


def peer_cell(case, variant, step, ours_ms, engines=()):
    """'0.0412 (1.31x)': the peer's ms and fp4moe's speedup over it, '(1.31x, eager)'
    where it was timed without a CUDA graph (it could not be captured); or why there
    is none (a variant that never ran: its status, unsupported, unavailable or failed)."""
    r = case.get("peers", {}).get(variant, {}).get(step)
    if r is None:
        return next((e["status"] for e in engines if e["variant"] == variant and e.get("status") != "ok"), "n/a")
    if r.get("status") != "ok":
        why = f"{r.get('status', 'failed')}: {r.get('reason', '')}".replace("|", "/")
        return why if len(why) <= 60 else why[:57] + "..."
    if not finite(r.get("ms")):
        return "not finite"
    eager = r.get("graph") is False
    if ours_ms > 0:
        return f"{r['ms']:.4f} ({r['ms'] / ours_ms:.2f}x{', eager' if eager else ''})"
    return f"{r['ms']:.4f}{' (eager)' if eager else ''}"


def engine_lines(rep):
    lines = []
    for e in rep.get("peer_engines", []):
        line = f"- {e['variant']}: {e.get('version', '?')}"
        if e.get("status") != "ok":
            line += f", {e.get('status')}: {e.get('reason', '')}"
        if finite(e.get("tolerance")):
            line += f", tolerance {e['tolerance']:.0e}"
        if "jit_seconds" in e:
            line += (f", first calls (JIT) {e['jit_seconds']:.1f} s, not timed" if finite(e["jit_seconds"])
                     else ", first calls (JIT) not finite, not timed")
        lines.append(line)
    return lines


def gemm_table(rep):
    ce = rep["ceilings"]
    beside = [c["bf16_tflop_per_s_adjacent"] for c in rep["cases"] if "bf16_tflop_per_s_adjacent" in c]
    beside = f", {min(beside):.0f}..{max(beside):.0f} beside the cases" if beside else ""
    start = (f" (at the start: {ce['copy_tb_per_s_burst']:.2f} TB/s, {ce['bf16_tflop_per_s_burst']:.0f} TFLOP/s)"
             if "copy_tb_per_s_burst" in ce else "")
    variants = variants_of(rep)
    lines = [f"GPU: {rep['device']}; ceilings this run at steady state: copy {ce['copy_tb_per_s']:.2f} TB/s, "
             f"cuBLAS bf16 {ce['bf16_tflop_per_s']:.0f} TFLOP/s{start}{beside}", ""]
    if variants:
        lines += ["Peer engines (ms, and fp4moe's speedup over each, replayed from a CUDA graph unless marked eager; "
                  f"{rep.get('peer_weights', 'the same weights')}):"] + engine_lines(rep) + [""]
    head = ("| GEMM | T | active experts | launches per graph | fp4moe ms | one launch per graph ms | TB/s | TFLOP/s "
            "| % of dense bf16 (steady-state ceiling / beside the case) | floor ms | % of floor | tile | vs cuBLAS bf16 "
            "| vs best all-warps tile |" + "".join(f" {v} |" for v in variants))
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    for c in rep["cases"]:
        act = c["active_experts"]
        act = f"{act:.0f}" if isinstance(act, (int, float)) else act
        adj = f"{100 * c['dense_fraction_adjacent']:.0f}%" if "dense_fraction_adjacent" in c else "n/a"
        step = "gemm1" if c["gemm"].startswith("gemm1") else "gemm2"
        lines.append(
            f"| {c['gemm']} N={c['n']} K={c['k']} | {c['tokens']} | {act} | {c.get('routings', 1)} | {c['median_ms']:.4f} "
            f"| {c.get('single_launch_ms', c['median_ms']):.4f} | {c['tb_per_s']:.2f} | {c['tflop_per_s']:.0f} "
            f"| {100 * c.get('dense_fraction', 0):.0f}% / {adj} | {c['floor_ms']:.4f} | {100 * c['floor_fraction']:.0f}% "
            f"| {c['best_tile']} | {c['speedup_vs_cublas']:.2f}x "
            f"| {c.get('speedup_vs_all_warps', c.get('speedup_vs_mma_sync', 0)):.2f}x |"
            + "".join(f" {peer_cell(c, v, step, c['median_ms'], rep.get('peer_engines', []))} |" for v in variants))
    return "\n".join(lines)

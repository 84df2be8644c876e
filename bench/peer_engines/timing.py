"""Timing as fp4moe's benchmarks time: CUDA-graph replay, the GPU kept busy
for warm_seconds first (the steady state at the power cap), the median of
`reps` back-to-back replays measured with CUDA events (src/runtime/timing.hpp)."""
import sys
import time


def capture(torch, fn):
    """fn captured in a CUDA graph -> (replay, True); (fn, False) where it
    cannot be captured (host syncs, data-dependent shapes): timed eagerly, said so."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        g.replay()
        torch.cuda.synchronize()
        return g.replay, True
    except Exception as exc:  # noqa: BLE001 - any capture failure: time eagerly, say so
        print(f"peers: CUDA graph capture failed ({str(exc).splitlines()[0][:120]}); timing eagerly", file=sys.stderr)
        torch.cuda.synchronize()
        return fn, False


def timed(torch, fn, reps, graph=True, warm_seconds=0.0):
    """(median ms per call, captured in a graph?)"""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    run, captured = capture(torch, fn) if graph else (fn, False)
    start = time.monotonic()
    while time.monotonic() - start < warm_seconds:
        for _ in range(16):
            run()
        torch.cuda.synchronize()
    # Every event pair recorded first and one synchronization at the end: a
    # synchronization per repetition would leave the GPU idle while the host
    # launches the next one, and put that launch latency into each sample.
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for s, e in events:
        s.record()
        run()
        e.record()
    torch.cuda.synchronize()
    ts = sorted(s.elapsed_time(e) for s, e in events)
    return ts[len(ts) // 2], captured

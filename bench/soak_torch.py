"""The soak through PyTorch: bench_soak's load (docs/soak.md) driven through
torch.ops.fp4moe from several Python threads, each on its own torch stream and
owning its own layers. Token counts are seeded and log-uniform in
1..max_tokens; half the forwards are eager torch.ops.fp4moe.moe_forward_out
calls, half replays of a torch.cuda.CUDAGraph captured per layer and
power-of-two bucket. Every check_every-th forward of a layer is recomputed
eagerly and compared bitwise (the layers are deterministic). Bad requests are
interleaved (T above max_tokens, a float32 hidden state, a NaN in one token's
hidden state); each must raise naming what was wrong, and the next good
forward on the layer is checked. Device memory is sampled in two parts: what
PyTorch's caching allocator has reserved (the client's: it keeps freed blocks
and may split and add segments as the comparisons' temporaries come and go) and
everything else on the device, the layers' weights and workspaces among it. The
run fails on a mismatch, a mishandled bad request, a thread error, device memory
outside PyTorch's allocator above its level after warm-up, or more live PyTorch
tensors at the end than after warm-up. The host memory held (the RSS once
malloc_trim has handed the allocator's free pages back) is sampled at a tenth
of the run apart and reported.

  python3 bench/soak_torch.py --model glm5-small --layers 4 --seconds 60 --out soak_torch.json
"""

import argparse
import ctypes
import gc
import json
import math
import random
import sys
import threading
import time

import torch

import fp4moe
import fp4moe.torch as ft



def host_rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


_libc = ctypes.CDLL(None)


def host_held():
    """The RSS once the C allocator has handed back the free pages its arenas keep."""
    _libc.malloc_trim(0)
    return host_rss()


def device_parts():
    """(device memory in use, of it what PyTorch's caching allocator has reserved),
    read between two equal readings of the reservation so that a segment another
    thread adds meanwhile is not counted as ours."""
    while True:
        r0 = torch.cuda.memory_reserved()
        free, total = torch.cuda.mem_get_info()
        if torch.cuda.memory_reserved() == r0:
            return total - free, r0


def buckets(max_tokens):
    b, v = 1, []
    while b < max_tokens:
        v.append(b)
        b *= 2
    return v + [max_tokens]


def bucket_of(t, max_tokens):
    b = 1
    while b < t:
        b *= 2
    return min(b, max_tokens)


class Worker:
    """One thread: its stream, its layers, their graphs and the buffers they were captured on."""

    def __init__(self, a, cfg, layers, index):
        self.a, self.cfg, self.layers, self.index = a, cfg, layers, index
        self.rng = random.Random(a.seed * 7919 + index)
        self.stream = torch.cuda.Stream()
        g = torch.Generator(device="cuda").manual_seed(a.seed + 100 + index)
        T, H, E = a.max_tokens, cfg["hidden"], cfg["num_experts"]
        self.x = torch.randn(T, H, device="cuda", generator=g).to(torch.bfloat16)
        self.logits = torch.randn(T, E, device="cuda", generator=g)
        self.out = torch.empty(T, H, device="cuda", dtype=torch.bfloat16)
        self.check = torch.empty_like(self.out)
        # the bad requests' inputs, made before warm-up (the run allocates nothing)
        self.bad_x = torch.empty(4, H, device="cuda", dtype=torch.bfloat16)
        self.x_f32 = torch.zeros(4, H, device="cuda")
        self.x_over = torch.zeros(T + 1, H, device="cuda", dtype=torch.bfloat16)
        self.logits_over = torch.zeros(T + 1, E, device="cuda")
        self.out_over = torch.empty(T + 1, H, device="cuda", dtype=torch.bfloat16)
        self.graphs = {}
        self.forwards = {lid: 0 for _, lid in layers}
        self.tally = dict(forwards=0, graph_forwards=0, tokens=0, checks=0, mismatches=0, faults=0, faults_mishandled=0)
        self.cases = []
        self.error = ""

    def forward(self, lid, T, out):
        torch.ops.fp4moe.moe_forward_out(self.x[:T], self.logits[:T], lid, out[:T])

    def warm_up(self):
        with torch.cuda.stream(self.stream):
            for _, lid in self.layers:
                for b in buckets(self.a.max_tokens):
                    self.forward(lid, b, self.out)
                    self.stream.synchronize()
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g, stream=self.stream):
                        self.forward(lid, b, self.out)
                    self.graphs[(lid, b)] = g
            # one check at the largest count: the comparison's temporaries come from PyTorch's
            # caching allocator, per stream, and are kept; made now, they are part of the baseline
            lid = self.layers[0][1]
            T = self.a.max_tokens
            self.forward(lid, T, self.check)
            torch.equal(self.out[:T], self.check[:T])
            (self.out[:T].view(torch.int16) != self.check[:T].view(torch.int16)).sum()
        self.stream.synchronize()

    def note(self, s):
        if len(self.cases) < 20:
            self.cases.append(s)

    def fault(self, layer, lid):
        kind = self.tally["faults"] % 3
        self.tally["faults"] += 1
        T = self.a.max_tokens + 1 if kind == 0 else 4
        try:
            if kind == 0:
                want = str(T)
                torch.ops.fp4moe.moe_forward_out(self.x_over, self.logits_over, lid, self.out_over)
            elif kind == 1:
                want = "float32"
                torch.ops.fp4moe.moe_forward_out(self.x_f32, self.logits[:T], lid, self.out[:T])
            else:
                want = "the output of token 2 holds NaN or Inf"
                self.bad_x.copy_(self.x[:4])
                self.bad_x[2, 7] = float("nan")
                torch.ops.fp4moe.moe_forward_out(self.bad_x, self.logits[:4], lid, self.out[:4])
                layer.check_status(self.stream.cuda_stream)
            self.tally["faults_mishandled"] += 1
            self.note(f"fault {kind} was accepted")
        except Exception as e:  # (whatever class the binding raises: the message must name it)
            if want not in str(e):
                self.tally["faults_mishandled"] += 1
                self.note(f"fault {kind}: the error does not say '{want}': {e}")

    def run(self, end, latency):
        try:
            with torch.cuda.stream(self.stream):
                since_fault, faulted = 0, None
                while time.monotonic() < end:
                    layer, lid = faulted or self.layers[self.rng.randrange(len(self.layers))]
                    check_now, faulted = faulted is not None, None
                    since_fault += 1
                    if self.a.fault_every and since_fault >= self.a.fault_every:
                        since_fault = 0
                        self.fault(layer, lid)
                        faulted = (layer, lid)
                        continue
                    t = min(max(round(2 ** self.rng.uniform(0, math.log2(self.a.max_tokens))), 1), self.a.max_tokens)
                    graph = self.rng.random() < 0.5
                    T = bucket_of(t, self.a.max_tokens) if graph else t
                    t0 = time.perf_counter()
                    if graph:
                        self.graphs[(lid, T)].replay()
                    else:
                        self.forward(lid, T, self.out)
                    self.stream.synchronize()
                    latency.setdefault(bucket_of(T, self.a.max_tokens), []).append((time.perf_counter() - t0) * 1e3)
                    self.tally["forwards"] += 1
                    self.tally["graph_forwards"] += graph
                    self.tally["tokens"] += T
                    self.forwards[lid] += 1
                    if self.forwards[lid] % self.a.check_every == 0 or check_now:
                        self.tally["checks"] += 1
                        self.forward(lid, T, self.check)
                        layer.check_status(self.stream.cuda_stream)
                        if not torch.equal(self.out[:T], self.check[:T]):
                            self.tally["mismatches"] += 1
                            differ = int((self.out[:T].view(torch.int16) != self.check[:T].view(torch.int16)).sum())
                            self.note(f"layer {lid} T={T} ({'graph' if graph else 'eager'}): {differ} values differ")
        except Exception as e:  # a thread's failure is reported, not lost
            self.error = f"{type(e).__name__}: {e}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="glm5-small")
    ap.add_argument("--format", default="auto", choices=["auto", "nvfp4", "mxfp4"])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--check-every", type=int, default=20)
    ap.add_argument("--fault-every", type=int, default=50, help="0: no bad requests")
    ap.add_argument("--out", default="soak_torch.json")
    # the driver's own bookkeeping; a forward's leak is far larger. Under
    # compute-sanitizer the tool's own device allocations count too.
    ap.add_argument("--device-slack-mb", type=int, default=16, help="device memory growth after warm-up that is not a leak")
    a = ap.parse_args()
    for name, v, least in (("--threads", a.threads, 1), ("--max-tokens", a.max_tokens, 1),
                           ("--check-every", a.check_every, 1), ("--fault-every", a.fault_every, 0),
                           ("--device-slack-mb", a.device_slack_mb, 0)):
        if v < least:
            raise SystemExit(f"soak_torch: {name} = {v} must be at least {least}")
    if not a.seconds > 0:
        raise SystemExit(f"soak_torch: --seconds = {a.seconds} must be positive")
    if a.layers < a.threads:
        raise SystemExit(f"soak_torch: --layers {a.layers} must be at least --threads {a.threads} (each thread owns its layers)")
    if a.model not in fp4moe.preset_names():
        raise SystemExit(f"soak_torch: --model {a.model} is not a preset ({', '.join(fp4moe.preset_names())})")
    if not torch.cuda.is_available():
        print("soak_torch: no CUDA device: nothing to run")
        return 0
    cfg = fp4moe.preset(a.model)
    fmt = fp4moe.checkpoint_format(cfg) if a.format == "auto" else a.format
    layers = []
    for i in range(a.layers):
        layer = fp4moe.MoeLayer.random(cfg, seed=a.seed, format=fmt, max_tokens=a.max_tokens, deterministic=True)
        layers.append((layer, ft.register(layer)))
    workers = [Worker(a, cfg, layers[t::a.threads], t) for t in range(a.threads)]
    for w in workers:
        w.warm_up()
    torch.cuda.synchronize()
    gc.collect()
    dev_warm, reserved_warm = device_parts()
    live_warm = torch.cuda.memory_allocated()
    host_warm = host_rss()
    held_warm = host_held()
    samples, held, running = [], [], [True]
    held_every = max(5.0, a.seconds / 10)

    def sample():
        while running[0]:
            used, reserved = device_parts()
            samples.append((used, reserved, host_rss()))
            now = time.monotonic() - t0
            if now >= (len(held) + 1) * held_every:
                held.append((now, host_held()))
            time.sleep(0.25)

    latency = [{} for _ in workers]
    end = time.monotonic() + a.seconds
    t0 = time.monotonic()
    sampler = threading.Thread(target=sample)
    sampler.start()
    threads = [threading.Thread(target=w.run, args=(end, latency[i])) for i, w in enumerate(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    running[0] = False
    sampler.join()
    ran = time.monotonic() - t0
    total = {k: sum(w.tally[k] for w in workers) for k in workers[0].tally}
    torch.cuda.synchronize()
    gc.collect()
    live_end = torch.cuda.memory_allocated()
    held_end = host_held()
    outside_warm = dev_warm - reserved_warm
    dev_max = max((s[0] for s in samples), default=dev_warm)
    outside_max = max((s[0] - s[1] for s in samples), default=outside_warm)
    reserved_max = max((s[1] for s in samples), default=reserved_warm)
    lat = {}
    for d in latency:
        for b, v in d.items():
            lat.setdefault(b, []).extend(v)
    rows = []
    for b in sorted(lat):
        v = sorted(lat[b])
        rows.append(dict(bucket=b, forwards=len(v), p50_ms=v[len(v) // 2], p99_ms=v[min(len(v) - 1, int(0.99 * len(v)))]))
    errors = [w.error for w in workers if w.error]
    report = dict(model=a.model, format=fmt, layers=a.layers, threads=a.threads, seconds=ran, seed=a.seed,
                  max_tokens=a.max_tokens, tokens_per_second=total["tokens"] / ran, **total,
                  device_bytes=dict(after_warm_up=dev_warm, max_after_warm_up=dev_max,
                                    outside_torch_allocator=dict(after_warm_up=outside_warm, max_after_warm_up=outside_max),
                                    torch_reserved=dict(after_warm_up=reserved_warm, max_after_warm_up=reserved_max),
                                    torch_live_tensors=dict(after_warm_up=live_warm, end=live_end)),
                  host_rss_bytes=dict(after_warm_up=host_warm, end=host_rss()),
                  host_held_bytes=dict(after_warm_up=held_warm, during=[dict(seconds=t, bytes=b) for t, b in held],
                                       end=held_end),
                  latency=rows,
                  cases=[c for w in workers for c in w.cases], thread_errors=errors,
                  device=torch.cuda.get_device_name())
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)
    print(f"{'bucket':>6} {'forwards':>9} {'p50 ms':>9} {'p99 ms':>9}")
    for r in rows:
        print(f"{r['bucket']:>6} {r['forwards']:>9} {r['p50_ms']:>9.3f} {r['p99_ms']:>9.3f}")
    print(f"soak_torch: {total['forwards']} forwards ({total['graph_forwards']} from graphs) in {ran:.0f} s through "
          f"torch.ops.fp4moe; {total['checks']} checks, {total['mismatches']} mismatches; {total['faults']} faults, "
          f"{total['faults_mishandled']} mishandled; device memory outside PyTorch's allocator {outside_warm / 1e9:.2f} GB "
          f"after warm-up, {outside_max / 1e9:.2f} GB at most; PyTorch's reserved {reserved_warm / 1e9:.2f} -> at most "
          f"{reserved_max / 1e9:.2f} GB, live tensors {live_warm / 1e9:.3f} -> {live_end / 1e9:.3f} GB; host RSS "
          f"{host_warm / 1e9:.2f} -> {host_rss() / 1e9:.2f} GB; host memory held {held_warm / 1e9:.2f} -> {held_end / 1e9:.2f} GB")
    if held:
        print("soak_torch: host memory held during the run (GB):" + "".join(f" {t:.0f}s {b / 1e9:.3f}" for t, b in held))
    for c in report["cases"] + errors:
        print(f"  {c}")
    slack = a.device_slack_mb << 20
    grew = outside_max > outside_warm + slack or live_end > live_warm + slack
    if grew:
        print(f"soak_torch: device memory grew after warm-up (outside PyTorch's allocator {outside_warm} -> {outside_max} "
              f"bytes, live tensors {live_warm} -> {live_end} bytes; --device-slack-mb {a.device_slack_mb})")
    ok = not errors and total["mismatches"] == 0 and total["faults_mishandled"] == 0 and not grew
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""One rank of the parallel layer's checks through Python, on a torch.distributed
NCCL group: run by test_parallel.py (one rank on one GPU, and under torchrun on
every local GPU when there are several). Each mode against the single-GPU layer
on the same weights and this rank's tokens (one rank: bitwise; several: 1e-3),
the CUDA-graph captured forward against eager (bitwise), the engine's
communicator pointer (torch's own, when torch exposes it) and bad arguments.
Prints one line per check; exits non-zero when one fails."""

import os
import sys

import torch
import torch.distributed as dist

import fp4moe


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


def main():
    dist.init_process_group("nccl")
    rank, ranks = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dev = torch.device("cuda", torch.cuda.current_device())
    cfg = fp4moe.preset("glm5-small")
    cfg.update(intermediate=256, shared_intermediate=256)  # I/G a multiple of 128 up to G = 2
    if ranks > 2:
        cfg.update(intermediate=128 * ranks, shared_intermediate=128 * ranks)
    failures = []

    def expect(ok, what):
        print(f"rank {rank}/{ranks}: {'ok  ' if ok else 'FAIL'} {what}", flush=True)
        if not ok:
            failures.append(what)

    single = fp4moe.MoeLayer.random(cfg, seed=5, finalize="split", max_tokens=64)
    gen = torch.Generator(device=dev).manual_seed(100 + rank)
    for mode in ("allgather", "alltoall", "tp"):
        layer = fp4moe.ParallelMoeLayer.random(cfg, seed=5, mode=mode, group=dist.group.WORLD, max_tokens=64)
        assert layer.rank == rank and layer.ranks == ranks and layer.mode == mode
        for T in (1, 13, 64):
            # expert modes: each rank its own tokens and count; tensor: the same tokens everywhere
            t = T if mode == "tp" else max(1, T - 3 * rank)
            g = torch.Generator(device=dev).manual_seed(T if mode == "tp" else 1000 * rank + T)
            x = torch.randn(t, cfg["hidden"], device=dev, generator=g).to(torch.bfloat16)
            logits = torch.randn(t, cfg["num_experts"], device=dev, generator=g)
            want = single(x, logits)
            # max_tokens rows per rank, and the step's (T: at least every rank's count) as an engine passes it
            for rows, got in (("max_tokens", layer(x, logits)), (f"{T}", layer(x, logits, rows_per_rank=T))):
                layer.check_status()
                if ranks == 1:
                    expect(torch.equal(got, want), f"{mode} T={t} rows_per_rank={rows}: bitwise the single-GPU layer")
                else:
                    e = rel(got, want)
                    expect(e < 1e-3, f"{mode} T={t} rows_per_rank={rows}: {e:.2e} from the single-GPU layer")
        # the CUDA-graph captured forward replays what eager computes
        x = torch.randn(48, cfg["hidden"], device=dev, generator=gen).to(torch.bfloat16)
        logits = torch.randn(48, cfg["num_experts"], device=dev, generator=gen)
        eager = layer(x, logits)
        out = torch.full_like(x, float("nan"))
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            layer(x, logits, out=out)  # warm (first-use tile choice happens outside the capture)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph):
            layer(x, logits, out=out)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        expect(torch.equal(out, eager), f"{mode}: the captured forward replays bitwise equal to eager")

    # The group's own communicator, where torch exposes it (ProcessGroupNCCL._comm_ptr).
    backend = dist.group.WORLD._get_backend(dev)
    if hasattr(backend, "_comm_ptr"):
        dist.all_reduce(torch.ones(1, device=dev))  # the group's communicator exists after a collective
        ptr = backend._comm_ptr()
        a = fp4moe.ParallelMoeLayer.random(cfg, seed=5, mode="allgather", group=dist.group.WORLD, max_tokens=64)
        b = fp4moe.ParallelMoeLayer.random(cfg, seed=5, mode="allgather", group=dist.group.WORLD, comm=ptr,
                                           max_tokens=64)
        expect(not b.info["owns_communicator"], "comm=: the layer uses torch's communicator")
        x = torch.randn(20, cfg["hidden"], device=dev, generator=gen).to(torch.bfloat16)
        logits = torch.randn(20, cfg["num_experts"], device=dev, generator=gen)
        expect(torch.equal(a(x, logits), b(x, logits)), "comm=torch's communicator: equal to fp4moe's own")
    else:
        print(f"rank {rank}/{ranks}: skip this torch's ProcessGroupNCCL has no _comm_ptr", flush=True)

    # bad arguments, named
    for what, call, needle in [
        ("mode", lambda: fp4moe.ParallelMoeLayer.random(cfg, mode="ep", group=dist.group.WORLD), "mode"),
        ("rank", lambda: fp4moe.ParallelMoeLayer.random(cfg, group=dist.group.WORLD, rank=ranks + 3), "rank="),
        ("tokens", lambda: layer(torch.zeros(65, cfg["hidden"], device=dev, dtype=torch.bfloat16),
                                 torch.zeros(65, cfg["num_experts"], device=dev)), "max_tokens"),
        ("dtype", lambda: layer(torch.zeros(4, cfg["hidden"], device=dev),
                                torch.zeros(4, cfg["num_experts"], device=dev)), "hidden_states"),
    ]:
        try:
            call()
            expect(False, f"bad {what}: accepted")
        except ValueError as e:
            expect(needle in str(e), f"bad {what}: {str(e).splitlines()[0][:120]}")
    dist.barrier()
    dist.destroy_process_group()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

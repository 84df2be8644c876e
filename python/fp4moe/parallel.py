"""fp4moe.ParallelMoeLayer: one MoE layer across the ranks of an NCCL group
(docs/parallel.md), from a torch.distributed process group with the NCCL
backend or from an engine's own NCCL communicator.

    import torch.distributed as dist, fp4moe
    dist.init_process_group("nccl")                      # torchrun: one process per GPU
    torch.cuda.set_device(local_rank)
    layer = fp4moe.ParallelMoeLayer.from_modelopt(ckpt, 3, mode="allgather", group=dist.group.WORLD,
                                                  max_tokens=1024)
    out = layer(hidden_states, router_logits)           # this rank's tokens; a collective

Modes: "allgather" and "alltoall" (expert parallelism: rank r holds experts
[r E/G, (r+1) E/G)), "tp" (tensor parallelism: rank r holds [r I/G, (r+1) I/G)
of every expert's width). With a group, fp4moe makes its own communicator from
a unique id that group rank 0 broadcasts over the group; ``comm=`` takes an
engine's ``ncclComm_t`` (an integer) instead, with ``rank=`` and ``ranks=``.
The forward runs on the caller's current stream and is CUDA-graph capturable.
"""

from __future__ import annotations

import json
from typing import Any, Optional, Tuple

from . import _native
from .config import as_config_json
from .layer import _current_stream, _is_torch, _options_json

_MODES = ("allgather", "alltoall", "tp")


def nccl_unique_id() -> bytes:
    """A new NCCL unique id (128 bytes) for ``unique_id=``: made on one rank, shared with the others."""
    return bytes(_native.fn("nccl_unique_id")())


def _communicator(group: Any, comm: Optional[int], rank: Optional[int], ranks: Optional[int],
                  unique_id: Optional[bytes]) -> Tuple[int, bytes, int, int]:
    """(comm, unique_id, rank, ranks) for the native constructor."""
    if group is not None:
        import torch.distributed as dist

        if not dist.is_initialized():
            raise ValueError("group: torch.distributed is not initialized (dist.init_process_group('nccl') first)")
        backend = dist.get_backend(group)
        if "nccl" not in str(backend):
            raise ValueError(f"group: its backend is {backend!r}; the parallel layer needs NCCL")
        g_rank, g_ranks = dist.get_rank(group), dist.get_world_size(group)
        if (rank is not None and rank != g_rank) or (ranks is not None and ranks != g_ranks):
            raise ValueError(f"rank={rank}, ranks={ranks}: the group says rank {g_rank} of {g_ranks}")
        if comm is not None:
            return int(comm), b"", g_rank, g_ranks
        uid = [nccl_unique_id() if g_rank == 0 else None]
        dist.broadcast_object_list(uid, src=dist.get_global_rank(group, 0), group=group)
        return 0, uid[0], g_rank, g_ranks
    if rank is None or ranks is None:
        raise ValueError("give group= (a torch.distributed NCCL group), or rank= and ranks= with comm= or unique_id=")
    if comm is not None:
        return int(comm), b"", int(rank), int(ranks)
    if unique_id is None:
        raise ValueError("unique_id: required with rank= and ranks= when neither group= nor comm= is given")
    return 0, bytes(unique_id), int(rank), int(ranks)


class ParallelMoeLayer:
    """This rank's part of one MoE layer across G ranks; every rank calls it with its own tokens."""

    def __init__(self, native: Any):
        self._native = native
        self._info = json.loads(_native.fn("parallel_info")(native))

    @staticmethod
    def _check_mode(mode: str) -> str:
        if mode not in _MODES:
            raise ValueError(f"mode: {mode!r} is not one of {', '.join(_MODES)}")
        return mode

    @classmethod
    def from_modelopt(cls, path: str, layer: int, *, mode: str = "allgather", group: Any = None,
                      comm: Optional[int] = None, rank: Optional[int] = None, ranks: Optional[int] = None,
                      unique_id: Optional[bytes] = None, max_tokens: int = 1024,
                      alltoall_capacity: Optional[int] = None, tune_cache: Optional[str] = None,
                      use_tune_cache: bool = True, device: Optional[int] = None,
                      split_k: bool = True, activations: str = "bf16", fp8_rounds_nvfp4: bool = False,
                      max_plans: int = 256) -> "ParallelMoeLayer":
        """MoE layer ``layer`` of a ModelOpt NVFP4 checkpoint; this rank prepares only its part.
        ``max_tokens`` is per rank; ``alltoall_capacity`` rows per peer (None: max_tokens)."""
        opts = _options_json(max_tokens=max_tokens, finalize="split", deterministic=True, tune_cache=tune_cache,
                             use_tune_cache=use_tune_cache, device=device, split_k=split_k, activations=activations,
                             fp8_rounds_nvfp4=fp8_rounds_nvfp4, max_plans=max_plans)
        c, uid, r, g = _communicator(group, comm, rank, ranks, unique_id)
        return cls(_native.fn("parallel_from_modelopt")(str(path), int(layer), cls._check_mode(mode), c, uid, r, g,
                                                        opts, -1 if alltoall_capacity is None else int(alltoall_capacity)))

    @classmethod
    def random(cls, config: Any, *, seed: int = 1, format: str = "nvfp4", mode: str = "allgather",
               group: Any = None, comm: Optional[int] = None, rank: Optional[int] = None,
               ranks: Optional[int] = None, unique_id: Optional[bytes] = None, max_tokens: int = 1024,
               alltoall_capacity: Optional[int] = None, tune_cache: Optional[str] = None,
               use_tune_cache: bool = True, device: Optional[int] = None, split_k: bool = True,
               activations: str = "bf16", fp8_rounds_nvfp4: bool = False,
               max_plans: int = 256) -> "ParallelMoeLayer":
        """The layer of ``MoeLayer.random(config, seed=seed, format=format)``, split across the ranks."""
        opts = _options_json(max_tokens=max_tokens, finalize="split", deterministic=True, tune_cache=tune_cache,
                             use_tune_cache=use_tune_cache, device=device, split_k=split_k, activations=activations,
                             fp8_rounds_nvfp4=fp8_rounds_nvfp4, max_plans=max_plans)
        c, uid, r, g = _communicator(group, comm, rank, ranks, unique_id)
        return cls(_native.fn("parallel_from_random")(as_config_json(config), str(format), int(seed),
                                                      cls._check_mode(mode), c, uid, r, g, opts,
                                                      -1 if alltoall_capacity is None else int(alltoall_capacity)))

    def __call__(self, hidden_states: Any, router_logits: Any, *, out: Any = None,
                 rows_per_rank: Optional[int] = None, stream: Optional[int] = None) -> Any:
        """This rank's tokens: hidden_states bf16 [T, H], router_logits fp32 [T, E] -> bf16 [T, H]
        (``out`` written in place when given). A collective: every rank calls it, each with its own T.

        ``rows_per_rank``: the rows each rank's block takes in this step's exchanges, the same on
        every rank and at least every rank's T (the step's largest or padded token count per rank,
        as an engine's data-parallel metadata gives it); None moves max_tokens rows per rank."""
        if out is None:
            if not _is_torch(hidden_states):
                raise ValueError("out: required unless hidden_states is a torch tensor")
            import torch

            out = torch.empty_like(hidden_states)
        s = _current_stream(hidden_states) if stream is None else int(stream)
        _native.fn("parallel_forward")(self._native, hidden_states, router_logits, out,
                                       -1 if rows_per_rank is None else int(rows_per_rank), s)
        return out

    forward = __call__

    def check_status(self, stream: Optional[int] = None) -> None:
        """Synchronises the stream; raises naming a bad router logit or an all-to-all capacity overflow."""
        _native.fn("parallel_check_status")(self._native, -1 if stream is None else int(stream))

    @property
    def rank(self) -> int:
        return int(self._info["rank"])

    @property
    def ranks(self) -> int:
        return int(self._info["ranks"])

    @property
    def mode(self) -> str:
        return str(self._info["mode"])

    @property
    def info(self) -> dict:
        return dict(self._info)

    @property
    def local_experts(self) -> Tuple[int, int]:
        b, c = self._info["local_experts"]
        return int(b), int(c)

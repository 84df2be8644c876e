"""The shared-memory planner: a kernel configuration's budget and verdict."""

from __future__ import annotations

import json
from typing import Union

from . import _native


def plan(arch: str, *, kernel: str = "cutlass", **query) -> Union[dict, list]:
    """The planner's answer as ``fp4moe plan --json`` gives it: terms, stages,
    capacity, headroom, verdict, explanation and suggestions. kernel "cutlass"
    (CUTLASS's block-scaled grouped GEMM: tile="MxNxK", epilogue="none"|"finalize",
    swap_ab, format, cutlass="4.4") or "grouped" (fp4moe's grouped GEMM: tile name or
    index, n, k, activations="bf16"|"fp8" for the GEMM's type, else each tile's own).
    sweep=True: every tile, as a list."""
    q = {"arch": arch, "kernel": kernel, **query}
    return json.loads(_native.fn("plan")(json.dumps(q)))

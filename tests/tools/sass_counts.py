#!/usr/bin/env python3
"""SASS instruction counts per kernel of compiled objects, and the comparison
of two builds: the check that a restructuring of the GEMM kernels left the
code each tile runs unchanged (within a tolerance), without a GPU.

    tests/tools/sass_counts.py count OBJ... > counts.json
    tests/tools/sass_counts.py compare before.json after.json [--tolerance 0.01]

Kernels are keyed by their tile index (the template argument) and the kind
of kernel (warp-specialized or all-warps), so renaming a kernel function does
not lose its pair. Needs cuobjdump and nvdisasm (scripts/setup.sh installs
them, pinned; found as tests/tools/check_kernel_resources.py finds them)."""

import json
import os
import re
import subprocess
import sys

_FUNC = re.compile(r"Function : (\S+)")
_INSTR = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+([A-Z][A-Z0-9_.]*)")
_TILE = re.compile(r"ILi(\d+)E(?:L\w*?EpilogueInstanceE(\d)E(?:Lb([01])E)?)?")


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_kernel_resources import find_cuobjdump  # noqa: E402


def kernel_key(mangled):
    """'ws 15' / 'all-warps 3' for the grouped GEMM kernels (their plain epilogue
    instance; 'ws 15 biased' for the biased one, ' rounded' for an e4m3 tile's
    NVFP4 instances); the mangled name otherwise."""
    m = _TILE.search(mangled)
    if m and "grouped_gemm" in mangled:
        kind = "ws" if ("_ws_" in mangled or "warp_specialized" in mangled) else "all-warps"
        return f"{kind} {int(m.group(1))}" + (" biased" if m.group(2) == "1" else "") + (" rounded" if m.group(3) == "1" else "")
    return mangled


def count(objects):
    cuobjdump, env = find_cuobjdump()
    counts = {}
    for obj in objects:
        out = subprocess.run([cuobjdump, "-sass", obj], capture_output=True, text=True, env=env)
        if out.returncode != 0:
            sys.exit(f"cuobjdump -sass {obj} failed: {out.stderr.strip()}")
        name = None
        for line in out.stdout.splitlines():
            f = _FUNC.search(line)
            if f:
                name = kernel_key(f.group(1))
                counts.setdefault(name, {"total": 0, "ops": {}})
                continue
            i = _INSTR.match(line)
            if i and name:
                op = i.group(1).split(".")[0]
                counts[name]["total"] += 1
                counts[name]["ops"][op] = counts[name]["ops"].get(op, 0) + 1
    return counts


def compare(before, after, tol):
    bad = 0
    for k in sorted(set(before) | set(after), key=lambda s: (s.split()[0], int(s.split()[-1]) if s.split()[-1].isdigit() else 0)):
        a, b = before.get(k), after.get(k)
        if a is None or b is None:
            print(f"{k:<16} only {'after' if a is None else 'before'}")
            bad += 1
            continue
        d = (b["total"] - a["total"]) / a["total"]
        flag = "" if abs(d) <= tol else "  <-- outside tolerance"
        bad += bool(flag)
        changed = {op: b["ops"].get(op, 0) - a["ops"].get(op, 0) for op in set(a["ops"]) | set(b["ops"])}
        changed = {op: v for op, v in changed.items() if v}
        top = ", ".join(f"{op} {v:+d}" for op, v in sorted(changed.items(), key=lambda kv: -abs(kv[1]))[:4])
        print(f"{k:<16} {a['total']:>7} -> {b['total']:>7} ({100 * d:+.2f}%){flag}{'  ' + top if top else ''}")
    return bad


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "count":
        json.dump(count(sys.argv[2:]), sys.stdout, indent=1, sort_keys=True)
        return 0
    if len(sys.argv) >= 4 and sys.argv[1] == "compare":
        tol = float(sys.argv[sys.argv.index("--tolerance") + 1]) if "--tolerance" in sys.argv else 0.01
        bad = compare(json.load(open(sys.argv[2])), json.load(open(sys.argv[3])), tol)
        print(f"{bad} kernel(s) outside {100 * tol:.1f}% or unpaired")
        return 1 if bad else 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())

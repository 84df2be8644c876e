#!/usr/bin/env python3
"""CI check: for every GEMM tile and every CUDA target, the compiler's
resource report plus the planned dynamic shared memory stays within the target's
capacity, equals the planner's figure (no static shared memory besides it), has
no spills, and the registers allow the tile's occupancy target. On sm_90a the
warp-specialized wgmma tiles also keep their wgmma descriptors in uniform
registers: fewer than one R2UR per HGMMA in the K loop (two per HGMMA, before
the stage's math was instantiated per ring slot, cost 1.02x to 1.08x).

Usage: check_kernel_resources.py BUILD_DIR SOURCE[,SOURCE...] FP4MOE_CLI
Recompiles each SOURCE with the build's own command plus -Xptxas -v (no output
kept): the all-warps kernel (fp4_grouped_gemm.cu) and the warp-specialized
one (fp4_grouped_gemm_ws_sm90.cu) instantiate disjoint tiles of the one list."""
import concurrent.futures
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

ARCHS = {"sm_80": "sm80", "sm_90a": "sm90", "sm_120a": "sm120"}


# Each tile has two kernel instances (the plain epilogue and the biased one),
# and each e4m3 tile two more for NVFP4 weights (the rounded fold): the tile
# index, the EpilogueInstance and (warp-specialized tiles) the rounded fold are
# the template arguments.
TILE_ARGUMENTS = r"ILi(\d+)EL\w*?EpilogueInstanceE(\d)E(?:Lb([01])E)?"  # in a kernel's mangled name
TILE_OF_FUNCTION = re.compile(TILE_ARGUMENTS)
KERNEL = re.compile(r"Compiling entry function '.*(?:fp4_grouped_gemm_kernel|fp4_grouped_gemm_ws_kernel)" + TILE_ARGUMENTS +
                    r".*' for '(sm_\w+)'")
INSTANCES = {0: "", 1: " biased", 2: " rounded", 3: " biased rounded"}


def instance_of(match):
    """The instance index of a TILE_ARGUMENTS match: the epilogue, plus 2 for the rounded fold."""
    return int(match.group(2)) + 2 * int(match.group(3) or 0)


advisories = []  # (source, code, message, tile index or None, instance, function)

# ptxas advisories known on a tile, with why they are not failures; any other fails.
KNOWN_ADVISORIES = {
    # four consumer warpgroups of 64 accumulators at 112 registers each (the SM's
    # 64K over five warpgroups, the producer at the least, 24); its eight K-loop
    # copies need 136 (one fits 112). The tile is a tuner candidate only
    # (docs/kernels.md, "Each expert dequantized once").
    ("bm256_nt128_bk128_mt1_c1_ws_w16", "C7512"): "wgmma serialized for registers; tuner candidate only",
}
# ptxas words it "... in the function '...'" (C7513: registers a running wgmma
# reads were redefined) or "... for the function '...'" (C7512: insufficient
# register resources).
ADVISORY = re.compile(r"\((C75\d\d)\) Potential Performance Loss: (.*?) (?:in|for) the function '(\S+)'")


def parse_advisory(line):
    """(code, message, tile index or None, epilogue instance, function) of a ptxas advisory line, or None."""
    m = ADVISORY.search(line)
    if not m:
        return None
    t = TILE_OF_FUNCTION.search(m.group(3))
    return m.group(1), m.group(2), int(t.group(1)) if t else None, instance_of(t) if t else 0, m.group(3)


def judge_advisories(found, tile_names):
    """Known advisories (printed) and failures, from (source, code, message, tile, instance, function)."""
    known, failures = [], []
    for source, code, message, tile, inst, function in found:
        name = tile_names.get(tile, function[:80])
        why = KNOWN_ADVISORIES.get((name, code))
        if why:
            known.append(f"{name}{INSTANCES[inst]} {code} ({why})")
        else:
            failures.append(f"ptxas performance advisory: {source}: {name}{INSTANCES[inst]} {code} {message}")
    return known, failures


def ptxas_report(build, source, cmds, report):
    cmd = next((c for c in cmds if c["file"].endswith(source)), None)
    if cmd is None:
        sys.exit(f"check_kernel_resources: {source} is not in {build}/compile_commands.json")
    args = shlex.split(cmd["command"])
    if "ccache" in args[0]:
        args = args[1:]
    out = args.index("-o")
    sass_of = None
    if source.endswith("fp4_grouped_gemm_ws_sm90.cu"):  # its object is kept for the SASS check below
        fd, sass_of = tempfile.mkstemp(suffix=".o")
        os.close(fd)
    args[out + 1] = sass_of or "/dev/null"
    args = [a for a in args if a not in ("-MD",)]
    for flag in ("-MT", "-MF"):
        while flag in args:
            i = args.index(flag)
            del args[i:i + 2]
    args += ["-Xptxas", "-v"]
    res = subprocess.run(args, cwd=cmd["directory"], capture_output=True, text=True)
    if res.returncode:
        if sass_of:
            os.unlink(sass_of)
        sys.exit("check_kernel_resources: compile failed:\n" + res.stderr[-3000:])
    cur = None
    for line in res.stderr.splitlines():
        a = parse_advisory(line)
        if a:
            advisories.append((source, *a))
            continue
        m = KERNEL.search(line)
        if m:
            cur = (m.group(4), int(m.group(1)), instance_of(m))
            report[cur] = {"regs": 0, "smem": 0, "spill": 0, "stack": 0}
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            report[cur]["stack"] = int(m.group(1))
            report[cur]["spill"] = int(m.group(2)) + int(m.group(3))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            report[cur]["regs"] = int(m.group(1))
            m2 = re.search(r"(\d+) bytes smem", line)
            report[cur]["smem"] = int(m2.group(1)) if m2 else 0
    if sass_of:  # after the ptxas report: it adds to its entries
        try:
            uniform_descriptor_report(sass_of, report)
        finally:
            os.unlink(sass_of)


# The CUDA toolkit on the CI machines ships nvcc and ptxas but no disassembler:
# scripts/setup.sh installs cuobjdump and the nvdisasm it runs from PyPI
# (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm), under site-packages/nvidia/cu13/bin.
SETUP_HINT = ("scripts/setup.sh installs them, pinned (PyPI: nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm); "
              "or set FP4MOE_CUOBJDUMP to a cuobjdump whose directory or PATH also holds nvdisasm")


def find_cuobjdump():
    """(cuobjdump path, environment for it): $FP4MOE_CUOBJDUMP, then PATH, then the PyPI package."""
    candidates = [os.environ.get("FP4MOE_CUOBJDUMP"), shutil.which("cuobjdump")]
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        candidates.append(os.path.join(root, "cu13", "bin", "cuobjdump"))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            env = dict(os.environ)
            env["PATH"] = os.path.dirname(c) + os.pathsep + env.get("PATH", "")  # its nvdisasm beside it
            if not shutil.which("nvdisasm", path=env["PATH"]):
                sys.exit(f"check_kernel_resources: {c} needs nvdisasm, which is neither beside it nor on PATH; "
                         + SETUP_HINT)
            return c, env
    sys.exit("check_kernel_resources: cuobjdump not found (looked at $FP4MOE_CUOBJDUMP, PATH and the "
             "nvidia-cuda-cuobjdump package); it reads the sm_90a SASS for the uniform-descriptor check. " + SETUP_HINT)


def uniform_descriptor_report(obj, report):
    """R2UR between the first and the last HGMMA of each sm_90a warp-specialized tile, per HGMMA."""
    cuobjdump, env = find_cuobjdump()
    res = subprocess.run([cuobjdump, "-sass", obj], capture_output=True, text=True, env=env)
    if res.returncode:
        sys.exit(f"check_kernel_resources: {cuobjdump} -sass failed:\n{res.stderr[-2000:]}")
    sass = res.stdout
    if "HGMMA" not in sass:
        sys.exit(f"check_kernel_resources: {cuobjdump} printed no HGMMA for the sm_90a object: "
                 "it cannot read nvcc's objects, or the kernel lost its wgmma")
    arch, cur, hgmma, r2ur, seen_r2ur = None, None, 0, 0, 0

    def flush():
        if cur is not None and hgmma:
            report.setdefault(cur, {})["r2ur_per_hgmma"] = r2ur / hgmma

    for line in sass.splitlines():
        m = re.search(r"arch = (sm_\w+)", line)
        if m:
            arch = m.group(1)
        m = re.search(r"Function : .*grouped_gemm_ws_kernel" + TILE_ARGUMENTS, line)
        if m:
            flush()
            cur, hgmma, r2ur, seen_r2ur = (arch, int(m.group(1)), instance_of(m)), 0, 0, 0
            continue
        if "HGMMA" in line:
            hgmma += 1
            r2ur += seen_r2ur if hgmma > 1 else 0  # only those between two HGMMA
            seen_r2ur = 0
        elif "R2UR" in line:
            seen_r2ur += 1
    flush()


def check_one(name, r, p, failures):
    """One kernel instance on one target against its plan; 1 if it was checked."""
    if r is None:
        failures.append(f"{name}: no entry in the compiler report")
        return 0
    if r["spill"]:
        failures.append(f"{name}: {r['spill']} bytes of register spills")
    if r["smem"]:
        failures.append(f"{name}: {r['smem']} bytes of static shared memory the planner does not count")
    if p["fits"] and r["smem"] + p["smem_bytes"] > p["capacity"]:
        failures.append(f"{name}: static {r['smem']} + planned {p['smem_bytes']} > capacity {p['capacity']}")
    if r.get("r2ur_per_hgmma", 0) >= 1:
        failures.append(f"{name}: {r['r2ur_per_hgmma']:.2f} R2UR per HGMMA in the K loop "
                        "(the wgmma descriptors left the uniform registers)")
    if r["regs"] * p["threads"] * p["ctas_per_sm"] > 65536:
        failures.append(f"{name}: {r['regs']} registers x {p['threads']} threads x {p['ctas_per_sm']} CTAs > 65536")
    uniform = f"  R2UR per HGMMA {r['r2ur_per_hgmma']:.2f}" if "r2ur_per_hgmma" in r else ""
    print(f"{name:<43} regs {r['regs']:>3}  static smem {r['smem']}  planned {p['smem_bytes']:>6} of "
          f"{p['capacity']:>6}  {'fits' if p['fits'] else 'rejected by the planner'}{uniform}")
    return 1


def main():
    build, sources, cli = sys.argv[1:4]
    print("cuobjdump:", find_cuobjdump()[0])  # before the compiles: a missing tool is named at once
    cmds = json.load(open(f"{build}/compile_commands.json"))
    report = {}
    # the sources compile at once (each is one nvcc, single-threaded): CI's two cores both work
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for f in [pool.submit(ptxas_report, build, source, cmds, report) for source in sources.split(",")]:
            f.result()
    failures, checked = [], 0
    for sm, arch in ARCHS.items():
        plans = json.loads(subprocess.run([cli, "plan", "--arch", arch, "--kernel", "grouped", "--sweep", "--json",
                                           "--n", "4096", "--k", "6144"], capture_output=True, text=True, check=True).stdout)
        for idx, p in enumerate(plans):
            for inst, suffix in INSTANCES.items():  # every tile has both (e4m3: all four); a missing one fails
                if inst >= 2 and p["activations"] != "e4m3":
                    if (sm, idx, inst) in report:
                        failures.append(f"{sm} {p['tile']}{suffix}: a rounded-fold instance of a bf16 tile")
                    continue
                checked += check_one(f"{sm} {p['tile']}{suffix}", report.get((sm, idx, inst)), p, failures)
    known, advisory_failures = judge_advisories(advisories, {i: p["tile"] for i, p in enumerate(plans)})
    for k in known:
        print("known ptxas advisory:", k)
    failures += advisory_failures
    for f in failures:
        print("FAIL:", f)
    print(f"{checked} kernel/target pairs checked, {len(failures)} failures")
    sys.exit(1 if failures or not checked else 0)


if __name__ == "__main__":
    main()

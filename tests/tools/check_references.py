#!/usr/bin/env python3
"""Every file the project's code, scripts and docs refer to exists in the
project: paths such as docs/kernels.md, src/plan/gemm_plan.cpp or
bench/results/<file> named in a comment, a doc or a script resolve from the
repository root (or from the citing file's folder), and nothing cites files
that are not part of the project (a design brief kept elsewhere).

Usage: check_references.py REPO_ROOT"""
import os
import re
import subprocess
import sys

ROOTS = ("docs", "src", "include", "apps", "tests", "bench", "scripts", "cmake", "python", ".ci")
EXTS = "md|hpp|cpp|cu|cuh|h|py|sh|json|svg|txt|safetensors|csv|cmake|toml|in"
PATH = re.compile(r"(?<![\w/.-])((?:%s)/[\w+./-]*?\.(?:%s))(?![\w-]|\.\w)" % ("|".join(re.escape(r) for r in ROOTS), EXTS))
# documents that are not in this repository
FOREIGN = re.compile(r"\b(DESIGN\.md|STYLE\.md|DEVELOPERS\.md|METHOD\.md|HOPPER\.md|H200\.md|KINDS\.md)\b")
SCANNED = re.compile(r"\.(md|hpp|cpp|cu|cuh|h|py|sh|txt|cmake|toml|in)$|(^|/)(CMakeLists\.txt|run)$")


def main():
    root = sys.argv[1]
    files = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, text=True, check=True).stdout.split()
    files = [f for f in files if SCANNED.search(f) and not f.startswith("bench/results/") and os.path.isfile(os.path.join(root, f))]
    problems, checked = [], 0
    for f in files:
        with open(os.path.join(root, f), errors="replace") as fh:
            for no, line in enumerate(fh, 1):
                for m in FOREIGN.finditer(line):
                    problems.append(f"{f}:{no}: cites {m.group(1)}, which is not in the project")
                for m in PATH.finditer(line):
                    ref = m.group(1).rstrip(".")
                    if any(c in ref for c in "*{}<>") or "..." in ref:
                        continue  # a pattern, not a path
                    checked += 1
                    if not (os.path.exists(os.path.join(root, ref)) or
                            os.path.exists(os.path.join(root, os.path.dirname(f), ref))):
                        problems.append(f"{f}:{no}: {ref} does not exist")
    for p in problems:
        print("FAIL:", p)
    print(f"{checked} references in {len(files)} files checked, {len(problems)} problems")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()

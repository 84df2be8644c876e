#!/usr/bin/env bash
# Builds the fp4moe wheel into .whl/ (git-ignored) with the apache-tvm-ffi wheel
# for the GPU machine's Python beside it, ready to carry there. Without
# arguments: every CUDA target; FP4MOE_CUDA_ARCHITECTURES=90a-real for the H200 alone.
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
bash scripts/setup.sh >/dev/null
mkdir -p .whl
rm -f .whl/fp4moe-*.whl
args=()
# a build folder of its own for a target list of its own (CMake keeps the list in its cache)
[ -n "${FP4MOE_CUDA_ARCHITECTURES:-}" ] && args+=(-Ccmake.define.FP4MOE_CUDA_ARCHITECTURES="$FP4MOE_CUDA_ARCHITECTURES"
                                                 -Cbuild-dir="build/python-${FP4MOE_CUDA_ARCHITECTURES//;/_}")
python3 -m pip wheel --no-deps --no-build-isolation -w .whl "${args[@]}" .
# tvm-ffi for the GPU machine's CPython 3.12 (the runtime dependency's pinned build version)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  -d .whl apache-tvm-ffi==0.1.15.post2
ls -la .whl

#!/usr/bin/env bash
# The Python package as a user installs it: `pip install .` into a brand-new
# virtual environment holding nothing of the build (pip fetches the build
# requirements pyproject.toml pins, the CUTLASS headers among them, into its
# isolated build environment), then the CPU tests against that install (numpy
# through DLPack; no GPU, no PyTorch). GPU and torch tests run on the GPU
# machine (scripts/gpu-run.sh python).
# After the CMake build of the same checkout (scripts/test.sh) ccache serves
# the library's objects; FP4MOE_CUDA_ARCHITECTURES=90a-real builds one target
# (a quicker local run without that build).
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
# CMake's own choice of compiler: scikit-build-core would set Python's (g++),
# whose other name gives other ccache entries than the CMake build's.
export CXX=${CXX:-c++}
if [ -z "${VENV:-}" ]; then
  VENV=$(mktemp -d /tmp/fp4moe-venv.XXXXXX)
  trap 'rm -rf "$VENV"' EXIT
fi
python3 -m venv "$VENV"
PY="$VENV/bin/python"
start=$(date +%s)
args=()
[ -n "${FP4MOE_CUDA_ARCHITECTURES:-}" ] && args+=(-Ccmake.define.FP4MOE_CUDA_ARCHITECTURES="$FP4MOE_CUDA_ARCHITECTURES"
                                                 -Cbuild-dir="build/python-${FP4MOE_CUDA_ARCHITECTURES//;/_}")
# the run-time dependencies at the versions scripts/setup.sh pins, then the package
"$PY" -m pip install -q --no-deps "numpy==1.26.4" "apache-tvm-ffi==0.1.15.post2" "typing_extensions==4.15.0"
"$PY" -m pip install -q --no-deps "${args[@]}" .
echo "test-python: pip install . into a new environment: $(( $(date +%s) - start )) s"
"$PY" -m pip install -q --no-deps "pytest==8.3.4" "iniconfig==2.0.0" "pluggy==1.5.0" "packaging==24.2"
cd tests/python/cpu   # not the checkout's python/ folder: the installed package
"$PY" -c 'import sys, fp4moe; assert fp4moe.__file__.startswith(sys.prefix), fp4moe.__file__
print("fp4moe", fp4moe.__version__, "from", fp4moe.__file__)'
"$PY" -m pytest -q -p no:cacheprovider .

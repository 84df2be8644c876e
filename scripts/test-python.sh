#!/usr/bin/env bash
# The Python package as a user installs it: a fresh virtual environment with
# the CUTLASS headers, `pip install .` (pip fetches the build requirements
# pyproject.toml pins into its isolated build environment), then its CPU
# tests (numpy through DLPack; no GPU, no PyTorch). GPU and torch tests run on
# the GPU machine (scripts/gpu-run.sh python).
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
VENV=${VENV:-$(mktemp -d /tmp/fp4moe-venv.XXXXXX)}
python3 -m venv "$VENV"
PY="$VENV/bin/python"
# the same pins as scripts/setup.sh and pyproject.toml
"$PY" -m pip install -q --no-deps "nvidia-cutlass==4.2.0.0" "numpy==1.26.4" "pytest==8.3.4" "iniconfig==2.0.0" \
  "pluggy==1.5.0" "apache-tvm-ffi==0.1.15.post2" "typing_extensions==4.15.0"
"$PY" -m pip install -q --no-deps .
cd tests/python/cpu   # not the checkout's python/ folder: the installed package
"$PY" -m pytest -q -p no:cacheprovider .

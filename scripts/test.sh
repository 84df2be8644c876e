#!/usr/bin/env bash
# Set up, build and run every test (GPU tests skip, visibly, without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache keys on paths relative to the checkout, so every clone shares the cache.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
bash scripts/setup.sh
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build/release -j"$(nproc)"
ctest --test-dir build/release --output-on-failure -j"$(nproc)"
# The Python package, installed in a fresh virtual environment, and its CPU tests.
bash scripts/test-python.sh

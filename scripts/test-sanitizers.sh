#!/usr/bin/env bash
# The host code (formats, planner, reference) and its tests under
# AddressSanitizer and UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache keys on paths relative to the checkout, so every clone shares the cache.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
bash scripts/setup.sh
cmake -S . -B build/sanitize -G Ninja -DCMAKE_BUILD_TYPE=Debug -DFP4MOE_CPU_ONLY=ON -DFP4MOE_SANITIZE=ON
cmake --build build/sanitize -j"$(nproc)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build/sanitize --output-on-failure -j"$(nproc)"

#!/usr/bin/env bash
# The host code (formats, planner, reference) and its tests under
# AddressSanitizer and UndefinedBehaviorSanitizer; its multi-threaded parts
# (the plan cache's memo, parallel_for, the tune cache) under ThreadSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache keys on paths relative to the checkout, so every clone shares the cache.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
bash scripts/setup.sh
cmake -S . -B build/sanitize -G Ninja -DCMAKE_BUILD_TYPE=Debug -DFP4MOE_CPU_ONLY=ON -DFP4MOE_SANITIZE=ON
cmake --build build/sanitize -j"$(nproc)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build/sanitize --output-on-failure -j"$(nproc)"
cmake -S . -B build/tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DFP4MOE_CPU_ONLY=ON -DFP4MOE_SANITIZE_THREAD=ON
cmake --build build/tsan -j"$(nproc)" --target fp4moe_cpu_tests
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  ctest --test-dir build/tsan --output-on-failure -j"$(nproc)" -R 'ConcurrentMemo|ParallelFor|TuneCache'

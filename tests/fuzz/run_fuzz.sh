#!/usr/bin/env bash
# Builds the safetensors header fuzzer with clang and runs it for SECONDS
# (default 20) from the seed corpus. Usage: run_fuzz.sh BUILD_DIR [SECONDS] [extra libFuzzer flags]
# Exit status 0: no finding; a finding leaves its input as BUILD_DIR/crash-*.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$1 seconds=${2:-20}
shift $(( $# >= 2 ? 2 : 1 ))
CXX=${FUZZ_CXX:-clang++-14}
cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$CXX" >/dev/null
cmake --build "$build" >/dev/null
mkdir -p "$build/corpus"
cd "$build"
# The seeds stay read-only; new inputs go to corpus/.
./fuzz_safetensors_header -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 \
  -artifact_prefix="$build/" "$@" corpus "$here/seeds"

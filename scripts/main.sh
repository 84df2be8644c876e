#!/usr/bin/env bash
# Set up, build, and run the main job on the built-in default problem.
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache keys on paths relative to the checkout, so every clone shares the cache.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
bash scripts/setup.sh
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j"$(nproc)" --target fp4moe_cli
# The main job: the benchmark on the default model (GLM-5); without a GPU it
# says so and shows the planner and the CPU reference instead.
./build/release/bin/fp4moe bench "$@"

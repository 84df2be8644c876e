#!/usr/bin/env bash
# Every GPU test and benchmark in one call on the GPU machine; logs under $OUT,
# a short table last. Binaries come prebuilt (carry build/release/bin).
#   scripts/gpu-run.sh [tests|bench|layer|sanitize|all]   (bench: GEMM tiles; layer: fp4moe tune + fp4moe bench)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/fp4moe-out}
BIN=${BIN:-build/release/bin}
WHAT=${1:-all}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:$(python3 -c 'import nvidia.cublas, os; print(os.path.join(nvidia.cublas.__path__[0], "lib"))' 2>/dev/null)
summary=()
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
[ -x "$BIN/fp4moe" ] && "$BIN/fp4moe" info | tee "$OUT/info.txt"

if [ "$WHAT" = tests ] || [ "$WHAT" = all ]; then
  start=$(date +%s)
  "$BIN/fp4moe_gpu_tests" ${GTEST_FILTER:+--gtest_filter=$GTEST_FILTER} 2>&1 | tee "$OUT/gpu_tests.log"
  rc=${PIPESTATUS[0]}
  summary+=("gpu tests: rc=$rc, $(grep -c '^\[       OK \]' "$OUT/gpu_tests.log") ok, $(grep -c '^\[  FAILED  \]' "$OUT/gpu_tests.log") failed lines, $(( $(date +%s) - start )) s")
fi
if [ "$WHAT" = bench ] || [ "$WHAT" = all ]; then
  if [ -x "$BIN/bench_decode_gemm" ]; then
    "$BIN/bench_decode_gemm" --out "$OUT/bench_decode.json" 2>&1 | tee "$OUT/bench_decode.log"
    summary+=("bench_decode_gemm: rc=${PIPESTATUS[0]}")
    if python3 -c 'import torch' 2>/dev/null; then
      python3 bench/peers.py --in "$OUT/bench_decode.json" --out "$OUT/bench_peers.json" --table "$OUT/bench_table.txt" 2>&1 | tee "$OUT/bench_peers.log"
      summary+=("bench/peers.py: rc=${PIPESTATUS[0]}")
    fi
  fi
fi
if [ "$WHAT" = layer ] || [ "$WHAT" = all ]; then
  # the autotuner, then the whole-layer benchmark with the tuned tiles
  export FP4MOE_CACHE="$OUT/tune.json"
  "$BIN/fp4moe" tune --model glm5 > "$OUT/tune.log" 2>&1
  summary+=("fp4moe tune: rc=$?, $(tail -1 "$OUT/tune.log")")
  "$BIN/fp4moe" bench --model glm5 --out "$OUT/bench" --peers-script bench/peers.py > "$OUT/bench_layer.log" 2>&1
  summary+=("fp4moe bench: rc=$?")
  rm -f "$OUT/bench_layer.log.tmp"
fi
if [ "$WHAT" = sanitize ] || [ "$WHAT" = all ]; then
  # compute-sanitizer on small cases (memcheck and racecheck)
  for tool in memcheck racecheck; do
    compute-sanitizer --tool $tool --error-exitcode 9 "$BIN/fp4moe_gpu_tests" \
      --gtest_filter='GpuMoeLayer.SplitFinalize*:GpuDecodeGemm.SkewedRouting*:GpuDecodeGemm.WarpgroupTilesSmallCase' > "$OUT/sanitizer_$tool.log" 2>&1
    rc=$?
    summary+=("compute-sanitizer $tool: rc=$rc, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer_$tool.log" | tail -1)")
  done
fi
echo
echo "==== summary ===="
for s in "${summary[@]}"; do echo "$s"; done
[ -f "$OUT/bench_table.txt" ] && cat "$OUT/bench_table.txt"
[ -f "$OUT/tune.log" ] && tail -32 "$OUT/tune.log"
[ -f "$OUT/bench/bench.md" ] && cat "$OUT/bench/bench.md"

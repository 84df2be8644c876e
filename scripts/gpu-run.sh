#!/usr/bin/env bash
# Every GPU test and benchmark in one call on the GPU machine; logs under $OUT,
# a short table last. Binaries come prebuilt (carry build/release/bin).
#   scripts/gpu-run.sh [tests|bench|layer|sanitize|all]
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
  if [ -x "$BIN/bench_moe_layer" ]; then
    "$BIN/bench_moe_layer" --out "$OUT/bench_layer.json" 2>&1 | tee "$OUT/bench_layer.log"
    summary+=("bench_moe_layer: rc=${PIPESTATUS[0]}")
    python3 bench/peers_layer.py --in "$OUT/bench_layer.json" --out "$OUT/bench_layer_peers.json" --table "$OUT/bench_layer_table.txt" 2>&1 | tail -3
    rm -f "$OUT/bench_layer.json"
  fi
fi
if [ "$WHAT" = sanitize ] || [ "$WHAT" = all ]; then
  # compute-sanitizer on small cases (memcheck and racecheck)
  for tool in memcheck racecheck; do
    compute-sanitizer --tool $tool --error-exitcode 9 "$BIN/fp4moe_gpu_tests" \
      --gtest_filter='GpuMoeLayer.SplitFinalize*:GpuDecodeGemm.SkewedRouting*' > "$OUT/sanitizer_$tool.log" 2>&1
    rc=$?
    summary+=("compute-sanitizer $tool: rc=$rc, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer_$tool.log" | tail -1)")
  done
fi
echo
echo "==== summary ===="
for s in "${summary[@]}"; do echo "$s"; done
[ -f "$OUT/bench_table.txt" ] && cat "$OUT/bench_table.txt"
[ -f "$OUT/bench_layer_table.txt" ] && cat "$OUT/bench_layer_table.txt"

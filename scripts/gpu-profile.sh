#!/usr/bin/env bash
# Nsight Compute on one decode GEMM case: where the time goes (stall reasons,
# memory throughput). Usage: scripts/gpu-profile.sh GEMM TOKENS TILE [more ncu args]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/fp4moe-out}
BIN=${BIN:-build/release/bin}
gemm=$1 tokens=$2 tile=$3
shift 3
ncu --clock-control none --kernel-name regex:decode_grouped --launch-skip 4 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
    --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis "$@" \
    "$BIN/bench_decode_gemm" --gemm "$gemm" --tokens "$tokens" --tile "$tile" --reps 3 --no-peers --out /tmp/prof.json \
    > "$OUT/ncu_${gemm}_T${tokens}_tile${tile}.txt" 2>&1
echo "ncu rc=$? -> $OUT/ncu_${gemm}_T${tokens}_tile${tile}.txt"
grep -E "Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Issue Slots Busy|No Eligible|Stall|Warp Cycles Per Issued|Block Limit" "$OUT/ncu_${gemm}_T${tokens}_tile${tile}.txt" | head -40

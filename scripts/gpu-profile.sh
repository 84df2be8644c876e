#!/usr/bin/env bash
# Nsight Compute on chosen GEMM launches of bench_grouped_gemm (on the GPU machine):
# warp state, scheduler, source-level stall samples. Leaves $OUT/profile.tar.gz.
#   scripts/gpu-profile.sh NAME:GEMM:TOKENS:TILE [...]    e.g. g2t512:gemm2:512:26
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/fp4moe-out}
BIN=${BIN:-build/release/bin}
mkdir -p "$OUT/profile"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:$(python3 -c 'import nvidia.cublas, os; print(os.path.join(nvidia.cublas.__path__[0], "lib"))' 2>/dev/null)
[ $# -ge 1 ] || { echo "usage: $0 NAME:GEMM:TOKENS:TILE [...]   e.g. g2t512:gemm2:512:26" >&2; exit 2; }
for spec in "$@"; do
  IFS=: read -r name gemm tokens tile <<< "$spec"
  if ! [[ "$name" =~ ^[A-Za-z0-9_.-]+$ && "$gemm" =~ ^(gemm1|gemm1p|gemm2)$ && "$tokens" =~ ^[0-9]+$ && "$tile" =~ ^[0-9]+$ ]]; then
    echo "gpu-profile: '$spec' is not NAME:GEMM:TOKENS:TILE (GEMM gemm1, gemm1p or gemm2; TOKENS and TILE numbers)" >&2
    exit 2
  fi
  d="$OUT/profile/$name"
  ncu --clock-control none -k regex:grouped_gemm --launch-skip 6 --launch-count 1 \
    --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section SourceCounters \
    --section Occupancy --section InstructionStats --import-source no -o "$d" \
    "$BIN/bench_grouped_gemm" --tokens "$tokens" --gemm "$gemm" --tile "$tile" --no-peers --reps 3 > "$d.run.log" 2>&1
  ncu -i "$d.ncu-rep" --page details > "$d.details.txt" 2>&1
  ncu -i "$d.ncu-rep" --page source --csv --print-source sass > "$d.src.csv" 2>&1
  python3 bench/ncu_top_stalls.py "$d.src.csv" 45 > "$d.stalls.txt" 2>&1
  rm -f "$d.ncu-rep"
  echo "== $name: $(grep -E 'Duration|Issue Slots Busy|No Eligible' "$d.details.txt" | tr -s ' ' | tr '\n' ';')"
done
tar czf "$OUT/profile.tar.gz" -C "$OUT" profile && rm -rf "$OUT/profile"

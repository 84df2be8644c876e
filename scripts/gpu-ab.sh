#!/usr/bin/env bash
# A/B of two builds in one device call, interleaved (the H200's power cap moves
# timings between runs, so compare only within a call):
#   scripts/gpu-ab.sh DIR_A DIR_B ROUNDS PROGRAM [ARGS...]
# runs DIR_A/PROGRAM and DIR_B/PROGRAM ROUNDS times each, alternating, and prints
# each run's result lines (bench_grouped_gemm: "T=" lines; fp4moe bench: the layer table rows).
# Logs under $OUT/ab. Carry both binaries, e.g. build/release/bin/bench_grouped_gemm and build/b/bin/bench_grouped_gemm.
# One build with two settings: DIR_A = DIR_B, and A_ARGS / B_ARGS (more arguments for that side only),
# e.g. B_ARGS=--shared-expert-in-routed scripts/gpu-ab.sh .ab/run .ab/run 2 fp4moe bench --model glm5.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 4 ] || { echo "usage: $0 DIR_A DIR_B ROUNDS PROGRAM [ARGS...]" >&2; exit 2; }
A=$1 B=$2 ROUNDS=$3 PROG=$4
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "gpu-ab: ROUNDS = '$ROUNDS' is not a positive number" >&2; exit 2; }
shift 4
OUT=${OUT:-/tmp/fp4moe-out}
mkdir -p "$OUT/ab"
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:$(python3 -c 'import nvidia.cublas, os; print(os.path.join(nvidia.cublas.__path__[0], "lib"))' 2>/dev/null)
for dir in "$A" "$B"; do
  [ -x "$dir/$PROG" ] || { echo "gpu-ab: $dir/$PROG is not an executable (carry it)" >&2; exit 2; }
done
for r in $(seq 1 "$ROUNDS"); do
  for side in A B; do
    dir=$A; [ "$side" = B ] && dir=$B
    log="$OUT/ab/${side}_$r.log"
    extra=${A_ARGS:-}; [ "$side" = B ] && extra=${B_ARGS:-}
    # shellcheck disable=SC2086
    "$dir/$PROG" "$@" $extra > "$log" 2>&1
    echo "== $side ($dir${extra:+ $extra}) round $r: rc=$?"
    grep -E 'T=|^\| [0-9]+ \|' "$log" | cut -c1-160
  done
done

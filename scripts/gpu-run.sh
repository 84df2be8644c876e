#!/usr/bin/env bash
# Every GPU test and benchmark in one call on the GPU machine; logs under $OUT,
# a short table last. Binaries come prebuilt (carry build/release/bin).
#   scripts/gpu-run.sh [tests|python|bench|decode|prefill|rate|w4a8|layer-ab|timeline|layer|gpt-oss|host|parallel|modelopt|sanitize|soak|all]
#   (tests: the GPU tests (GTEST_FILTER to choose; killed after TESTS_TIMEOUT s, default 480) and the soak's short forms;
#    bench: GEMM tiles at decode and prefill sizes, the K loop's wgmma rate and W4A8 against W4A16; decode,
#    prefill: those sizes only; w4a8: the GEMM steps and the whole layer with e4m3 activations against bf16,
#    interleaved (bench_w4a8_gemm, bench_w4a8_layer; W4A8_TOKENS to choose T, W4A8_MODELS the presets,
#    W4A8_FORMAT=nvfp4 the layer's experts in NVFP4 with the rounded fold);
#    layer-ab: bench_layer_ab, the whole layer with one option (AB_CHANGE, default balanced-split) against
#    the defaults, interleaved (AB_WITH options on both sides, AB_TOKENS, AB_MODELS; not part of all);
#    timeline: bench_forward_timeline, each kernel of a forward's graph replay on the GPU's clock (CUPTI:
#    libcupti.so.13 carried beside the binary), TIMELINE_MODELS, TIMELINE_TOKENS (default 1,2,4,8),
#    TIMELINE_WITH layer options, TIMELINE_ARGS more flags (--activations fp8); part of decode and all;
#    rate: the decode K loop's math alone by token width, bench_wgmma_rate; layer: fp4moe tune + fp4moe bench;
#    gpt-oss: fp4moe tune, then fp4moe bench, --model GPT_OSS_MODEL (default gpt-oss-120b; GPT_OSS_CACHE: an
#    earlier tune cache; GPT_OSS_UNTUNED=1: none; GPT_OSS_TUNE_TOKENS the tuned counts, up to 8192 by default;
#    GPT_OSS_TOKENS to choose T; GLM5_TOKENS for layer);
#    both beside the peer engines of bench/peers.py (scripts/fetch-peers.sh puts them in .whl/peers);
#    LAYER_CACHE=tune.json: bench with that cache instead of tuning first; BENCH_ARGS: more fp4moe bench flags;
#    host: the router kernels by token count (bench_route) and a forward's host time (bench_host_overhead);
#    python: the Python package's torch tests and its op overhead, from a wheel in WHEELS (default .whl:
#    fp4moe-*.whl and apache_tvm_ffi-*.whl, installed under /tmp/site);
#    parallel: the layer across GPUs (fp4moe bench --ep/--tp): at one rank, what the parallel path adds over
#    the single-GPU layer (GLM-5 as one EP8 rank holds it, E/8 experts; as one TP8 rank, I/8), T = PARALLEL_TOKENS;
#    with several GPUs, each mode over 2, 4, 8 of them;
#    soak: bench_soak, SOAK_MODEL (default glm5; gpt-oss-120b for its second run) layers filling 80% of
#    device memory driven from 4 threads for SOAK_SECONDS (default 480) with bad requests interleaved,
#    SOAK_ARGS more flags (--activations fp8, --neighbours N, --plan-every-count; not part of all);
#    SOAK_API=torch: the same through torch.ops.fp4moe, bench/soak_torch.py, 16 layers (a wheel in WHEELS);
#    SOAK_TUNE=1,64,2048: fp4moe tune those counts' buckets first into $OUT/soak_tune.json, which the soak
#    reads (minutes: shorten SOAK_SECONDS so that the call stays within its 10);
#    sanitize: compute-sanitizer's memcheck, racecheck, synccheck (SANITIZE_TOOLS to choose) on small GPU
#    tests (SANITIZE_FILTER) and the soak's short forms, C++ and through torch.ops.fp4moe;
#    modelopt: NVFP4 test vectors from ModelOpt's own code, MODELOPT_WHEEL=path of the nvidia-modelopt wheel
#    (default .whl/nvidia_modelopt-*.whl), written to $OUT/modelopt_nvfp4_vectors.safetensors)
# PACK=1 leaves one file, $OUT/gpu-run.tar.gz, holding every log (the device tool returns at most 8 files).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/fp4moe-out}
BIN=${BIN:-build/release/bin}
WHAT=${1:-all}
case "$WHAT" in
  tests|python|bench|decode|prefill|rate|w4a8|layer-ab|timeline|layer|gpt-oss|host|parallel|modelopt|sanitize|soak|all) ;;
  *) echo "gpu-run: mode '$WHAT' is not one of tests, python, bench, decode, prefill, rate, w4a8, layer-ab, timeline, layer, gpt-oss, host, parallel, modelopt, sanitize, soak, all" >&2; exit 2 ;;
esac
mkdir -p "$OUT"
# cuBLAS and NCCL from PyTorch's wheels where the system has none on the loader's path
for pkg in cublas nccl; do
  export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:$(python3 -c "import nvidia.$pkg, os; print(os.path.join(list(nvidia.$pkg.__path__)[0], 'lib'))" 2>/dev/null)
done
summary=()
# The peer engines (scripts/fetch-peers.sh leaves them in .whl/peers): triton_kernels
# as a package directory, Humming's wheel installed beside it at first use
export FP4MOE_PEERS_DIR=${FP4MOE_PEERS_DIR:-$PWD/.whl/peers}
for wheel in "$FP4MOE_PEERS_DIR"/humming_kernels-*.whl; do
  [ -f "$wheel" ] && [ ! -d "$FP4MOE_PEERS_DIR/site/humming" ] &&
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$FP4MOE_PEERS_DIR/site" "$wheel" > "$OUT/peers_install.log" 2>&1
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
# SM clock, power and temperature every 250 ms while this runs: a timing that
# moves between runs can be read against them (summary at the end)
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 250 > "$OUT/clocks.csv" 2>/dev/null &
sampler=$!
trap 'kill $sampler 2>/dev/null' EXIT
[ -x "$BIN/fp4moe" ] && "$BIN/fp4moe" info | tee "$OUT/info.txt"

if [ "$WHAT" = tests ] || [ "$WHAT" = all ]; then
  start=$(date +%s)
  # (a hang, say a tensor copy that never completes its barrier, is killed in time for the logs to come back)
  timeout -s KILL "${TESTS_TIMEOUT:-480}" "$BIN/fp4moe_gpu_tests" ${GTEST_FILTER:+--gtest_filter=$GTEST_FILTER} 2>&1 |
    tee "$OUT/gpu_tests.log"
  rc=${PIPESTATUS[0]}
  [ "$rc" = 137 ] && summary+=("gpu tests: KILLED after ${TESTS_TIMEOUT:-480} s (TESTS_TIMEOUT); the last test started: $(grep -E '^\[ RUN' "$OUT/gpu_tests.log" | tail -1)")
  summary+=("gpu tests: rc=$rc, $(grep -c '^\[       OK \]' "$OUT/gpu_tests.log") ok, $(grep -c '^\[  FAILED  \]' "$OUT/gpu_tests.log") failed lines, $(( $(date +%s) - start )) s")
  summary+=("slowest gpu tests (ms): $(sed -nE 's/^\[       OK \] (\S+) \(([0-9]+) ms\)/\2 \1/p' "$OUT/gpu_tests.log" | sort -rn | head -6 | tr '\n' ' ')")
  # the soak's short form: small layers, two threads, bad requests, every check (docs/soak.md)
  if [ -x "$BIN/bench_soak" ] && [ -z "${GTEST_FILTER:-}" ]; then
    "$BIN/bench_soak" --model glm5-small --layers 4 --threads 2 --max-tokens 256 --seconds 20 --faults --fault-every 10 \
      --check-every 5 --reference-every 5 --out "$OUT/soak_short.json" > "$OUT/soak_short.log" 2>&1
    summary+=("soak, short form: rc=$?; $(grep -E '^bench_soak: [0-9]+ forwards' "$OUT/soak_short.log")")
    # decode sizes of full GLM-5 layers beside two threads streaming device memory: every tensor copy
    # slow, the form that showed a warp's rows differing run to run without the proxy fence (docs/soak.md)
    "$BIN/bench_soak" --model glm5 --layers 2 --threads 2 --neighbours 2 --max-tokens 16 --seconds 15 --check-every 1 \
      --reference-every 50 --out "$OUT/soak_neighbours.json" > "$OUT/soak_neighbours.log" 2>&1
    summary+=("soak, decode beside memory-streaming neighbours: rc=$?; $(grep -E '^bench_soak: [0-9]+ forwards' "$OUT/soak_neighbours.log")")
  fi
fi
if [ "$WHAT" = python ] || [ "$WHAT" = all ]; then
  WHEELS=${WHEELS:-.whl}
  if ls "$WHEELS"/fp4moe-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      "$WHEELS"/fp4moe-*.whl "$WHEELS"/apache_tvm_ffi-*.whl > "$OUT/python_install.log" 2>&1
    start=$(date +%s)
    FP4MOE_CLI="$(cd "$BIN" && pwd)/fp4moe" PYTHONPATH=/tmp/site python3 -m pytest -q -rP -p no:cacheprovider tests/python/gpu 2>&1 | tee "$OUT/python_tests.log"
    summary+=("python torch tests: rc=${PIPESTATUS[0]}, $(tail -1 "$OUT/python_tests.log"), $(( $(date +%s) - start )) s")
    PYTHONPATH=/tmp/site python3 bench/python_op_overhead.py --out "$OUT/python_op_overhead.json" > "$OUT/python_op_overhead.txt" 2>&1
    summary+=("bench/python_op_overhead.py: rc=$?")
    # the soak's short form through torch.ops.fp4moe (docs/soak.md)
    PYTHONPATH=/tmp/site python3 bench/soak_torch.py --model glm5-small --layers 4 --threads 2 --seconds 20 \
      --check-every 5 --fault-every 10 --out "$OUT/soak_torch.json" > "$OUT/soak_torch.log" 2>&1
    summary+=("bench/soak_torch.py, short form: rc=$?; $(grep -E '^soak_torch: [0-9]+ forwards' "$OUT/soak_torch.log")")
    # the C++ layer's forward on the same preset, timed the same way
    "$BIN/bench_host_overhead" --model glm5-small --tokens 1 >> "$OUT/python_op_overhead.txt" 2>&1
    # the layer through Python beside the PyTorch peers (the README's layer table from Python)
    PYTHONPATH=/tmp/site python3 bench/python_layer.py --out "$OUT/python_layer.json" > "$OUT/python_layer.txt" 2>&1
    summary+=("bench/python_layer.py: rc=$?")
  else
    summary+=("python: no fp4moe wheel in $WHEELS (scripts/build-wheel.sh builds one)")
  fi
fi
if [ "$WHAT" = bench ] || [ "$WHAT" = decode ] || [ "$WHAT" = prefill ] || [ "$WHAT" = all ]; then
  if [ -x "$BIN/bench_grouped_gemm" ]; then
    kinds=
    if [ "$WHAT" != prefill ]; then
      kinds=decode
      "$BIN/bench_grouped_gemm" --out "$OUT/bench_decode.json" > "$OUT/bench_decode.log" 2>&1
      summary+=("bench_grouped_gemm (decode): rc=$?")
    fi
    if [ "$WHAT" != decode ]; then
      kinds="$kinds prefill"
      # prefill sizes on rows already in expert order, as torch._grouped_mm takes them
      "$BIN/bench_grouped_gemm" --permuted-gemm1 --tokens 4096,8192,16384,32768 --reps 10 \
        --out "$OUT/bench_prefill.json" > "$OUT/bench_prefill.log" 2>&1
      summary+=("bench_grouped_gemm (prefill): rc=$?")
    fi
    if [ "$WHAT" = bench ] || [ "$WHAT" = all ]; then
      kinds="$kinds permuted"
      # GEMM1 at 16..64 tokens per expert with its rows already in expert order:
      # against the decode run's gemm1, what copying the gathered rows costs (docs/kernels.md)
      "$BIN/bench_grouped_gemm" --permuted-gemm1 --gemm gemm1p --tokens 512,1024,2048 --no-peers \
        --out "$OUT/bench_permuted.json" > "$OUT/bench_permuted.log" 2>&1
      summary+=("bench_grouped_gemm (GEMM1, rows in expert order): rc=$?")
    fi
    for kind in $kinds; do python3 bench/tile_summary.py "$OUT/bench_$kind.json" > "$OUT/bench_${kind}_tiles.txt" 2>&1; done
    if python3 -c 'import torch' 2>/dev/null; then
      for kind in $kinds; do
        [ "$kind" = permuted ] && continue
        python3 bench/peers.py --in "$OUT/bench_$kind.json" --out "$OUT/bench_${kind}_peers.json" \
          --table "$OUT/bench_${kind}_table.txt" > "$OUT/bench_${kind}_peers.log" 2>&1
        summary+=("bench/peers.py $kind: rc=$?")
      done
    fi
  fi
fi
if [ "$WHAT" = w4a8 ] || [ "$WHAT" = bench ] || [ "$WHAT" = all ]; then
  start=$(date +%s)
  "$BIN/bench_w4a8_gemm" ${W4A8_TOKENS:+--tokens $W4A8_TOKENS} ${W4A8_MODELS:+--models $W4A8_MODELS} \
    --out "$OUT/bench_w4a8_gemm.json" 2>&1 | tee "$OUT/bench_w4a8_gemm.log"
  summary+=("bench_w4a8_gemm: rc=${PIPESTATUS[0]}, $(( $(date +%s) - start )) s")
  summary+=("$(grep -E 'gemm[12] ' "$OUT/bench_w4a8_gemm.log" | awk '{printf "%s %s T=%s %s; ", $1, $2, $3, $NF}')")
  # the whole layer, W4A8 against W4A16 on the same FP4 weights (MXFP4, or W4A8_FORMAT; planner's tiles; LAYER_CACHE: both tuned)
  start=$(date +%s)
  ${LAYER_CACHE:+env FP4MOE_CACHE=$LAYER_CACHE} "$BIN/bench_w4a8_layer" ${W4A8_TOKENS:+--tokens $W4A8_TOKENS} \
    ${W4A8_MODELS:+--models $W4A8_MODELS} ${W4A8_FORMAT:+--format $W4A8_FORMAT} ${LAYER_CACHE:+--tune-cache} \
    --out "$OUT/bench_w4a8_layer.json" 2>&1 |
    tee "$OUT/bench_w4a8_layer.log"
  summary+=("bench_w4a8_layer: rc=${PIPESTATUS[0]}, $(( $(date +%s) - start )) s")
fi
if [ "$WHAT" = layer-ab ]; then
  start=$(date +%s)
  "$BIN/bench_layer_ab" --change "${AB_CHANGE:-balanced-split}" ${AB_WITH:+--with $AB_WITH} \
    ${AB_TOKENS:+--tokens $AB_TOKENS} ${AB_MODELS:+--models $AB_MODELS} ${AB_ROUNDS:+--rounds $AB_ROUNDS} \
    --out "$OUT/bench_layer_ab${AB_WITH:+_with_$AB_WITH}.json" 2>&1 | tee "$OUT/bench_layer_ab${AB_WITH:+_with_$AB_WITH}.log"
  summary+=("bench_layer_ab ${AB_CHANGE:-balanced-split}${AB_WITH:+ with $AB_WITH}: rc=${PIPESTATUS[0]}, $(( $(date +%s) - start )) s")
fi
if [ "$WHAT" = timeline ] || [ "$WHAT" = decode ] || [ "$WHAT" = all ]; then
  # where a small-batch forward's time goes: launches, the ramp to the first weight byte, the gaps
  if [ -x "$BIN/bench_forward_timeline" ]; then
    start=$(date +%s)
    # shellcheck disable=SC2086
    "$BIN/bench_forward_timeline" ${TIMELINE_MODELS:+--models $TIMELINE_MODELS} --tokens "${TIMELINE_TOKENS:-1,2,4,8}" \
      ${TIMELINE_WITH:+--with $TIMELINE_WITH} ${TIMELINE_ARGS:-} --out "$OUT/bench_forward_timeline.json" 2>&1 |
      tee "$OUT/bench_forward_timeline.log"
    summary+=("bench_forward_timeline: rc=${PIPESTATUS[0]}, $(( $(date +%s) - start )) s")
  elif [ "$WHAT" = timeline ]; then
    summary+=("bench_forward_timeline: not carried in $BIN")
  fi
fi
if [ "$WHAT" = rate ] || [ "$WHAT" = bench ] || [ "$WHAT" = all ]; then
  # the decode K loop's math alone (wgmma and dequantization, no loads) by token width
  if [ -x "$BIN/bench_wgmma_rate" ]; then
    "$BIN/bench_wgmma_rate" > "$OUT/bench_wgmma_rate.txt" 2>&1
    summary+=("bench_wgmma_rate: rc=$?")
  fi
fi
if [ "$WHAT" = host ] || [ "$WHAT" = all ]; then
  "$BIN/bench_route" > "$OUT/bench_route.txt" 2>&1
  summary+=("bench_route: rc=$?")
  "$BIN/bench_host_overhead" > "$OUT/bench_host_overhead.txt" 2>&1
  summary+=("bench_host_overhead: rc=$?")
fi
if [ "$WHAT" = modelopt ]; then
  wheel=${MODELOPT_WHEEL:-$(ls .whl/nvidia_modelopt-*.whl 2>/dev/null | head -1)}
  if [ -z "$wheel" ]; then
    summary+=("modelopt: no nvidia-modelopt wheel (MODELOPT_WHEEL or .whl/)")
  else
    python3 tests/tools/modelopt_nvfp4_vectors.py "$wheel" "$OUT/modelopt_nvfp4_vectors.safetensors" > "$OUT/modelopt.log" 2>&1
    summary+=("modelopt vectors ($(basename "$wheel")): rc=$?, $(tail -1 "$OUT/modelopt.log")")
  fi
fi
if [ "$WHAT" = layer ] || [ "$WHAT" = all ]; then
  # the autotuner, then the whole-layer benchmark with the tuned tiles
  export FP4MOE_CACHE="$OUT/tune.json"
  if [ -n "${LAYER_CACHE:-}" ]; then  # an earlier tune run's cache on this GPU model instead of tuning now
    cp "$LAYER_CACHE" "$FP4MOE_CACHE"
    summary+=("fp4moe tune: not run; the tune cache $LAYER_CACHE")
  else
    "$BIN/fp4moe" tune --model glm5 > "$OUT/tune.log" 2>&1
    summary+=("fp4moe tune: rc=$?, $(tail -1 "$OUT/tune.log")")
  fi
  # shellcheck disable=SC2086
  "$BIN/fp4moe" bench --model glm5 --out "$OUT/bench" --peers-script bench/peers.py ${GLM5_TOKENS:+--tokens $GLM5_TOKENS} \
    ${BENCH_ARGS:-} > "$OUT/bench_layer.log" 2>&1
  summary+=("fp4moe bench: rc=$?")
  rm -f "$OUT/bench_layer.log.tmp"
fi
if [ "$WHAT" = gpt-oss ] || [ "$WHAT" = all ]; then
  # gpt-oss's layer (GPT_OSS_MODEL, default gpt-oss-120b; MXFP4, biases, the clamped SwiGLU, H = I = 2880
  # padded) on its tuned tiles: fp4moe tune first into its own cache (GPT_OSS_CACHE: an earlier run's
  # instead; GPT_OSS_UNTUNED=1: the planner's tiles)
  model=${GPT_OSS_MODEL:-gpt-oss-120b}
  export FP4MOE_CACHE="$OUT/tune_$model.json"
  if [ -n "${GPT_OSS_CACHE:-}" ]; then
    cp "$GPT_OSS_CACHE" "$FP4MOE_CACHE" || { echo "gpu-run: GPT_OSS_CACHE = '$GPT_OSS_CACHE' could not be read" >&2; exit 2; }
    summary+=("fp4moe tune --model $model: not run; the tune cache $GPT_OSS_CACHE")
  elif [ -z "${GPT_OSS_UNTUNED:-}" ]; then
    "$BIN/fp4moe" tune --model "$model" --tokens "${GPT_OSS_TUNE_TOKENS:-1,8,32,128,512,1024,2048,4096,8192}" \
      > "$OUT/tune_$model.log" 2>&1
    summary+=("fp4moe tune --model $model: rc=$?, $(tail -1 "$OUT/tune_$model.log")")
  fi
  # shellcheck disable=SC2086
  "$BIN/fp4moe" bench --model "$model" --out "$OUT/bench_gpt_oss" --peers-script bench/peers.py \
    ${GPT_OSS_TOKENS:+--tokens $GPT_OSS_TOKENS} ${BENCH_ARGS:-} > "$OUT/bench_gpt_oss.log" 2>&1
  summary+=("fp4moe bench --model $model${GPT_OSS_UNTUNED:+ (untuned)}: rc=$?")
fi
if [ "$WHAT" = soak ] && [ -n "${SOAK_TUNE:-}" ]; then
  # a real tune cache for the soak to read and leave unchanged: the layer's buckets of SOAK_TUNE's token
  # counts, for the soak's layers (deterministic, split-K, bf16 or SOAK_ARGS' --activations fp8)
  export FP4MOE_CACHE="$OUT/soak_tune.json"
  fmt=nvfp4; case "${SOAK_MODEL:-glm5}" in gpt-oss*) fmt=mxfp4 ;; esac
  act=bf16; case " ${SOAK_ARGS:-} " in *" --activations fp8 "*) act=fp8 ;; esac
  "$BIN/fp4moe" tune --model "${SOAK_MODEL:-glm5}" --format $fmt --activations $act --deterministic \
    --tokens "$SOAK_TUNE" > "$OUT/soak_tune.log" 2>&1
  summary+=("fp4moe tune for the soak (tokens $SOAK_TUNE, $act): rc=$?, $(grep -c . "$OUT/soak_tune.log") lines")
fi
if [ "$WHAT" = soak ] && [ "${SOAK_API:-cpp}" = torch ]; then
  # the same load through torch.ops.fp4moe (bench/soak_torch.py): 16 layers of SOAK_MODEL from 4 Python
  # threads; 300 s by default, as building 16 GLM-5 layers and capturing their graphs takes about two minutes
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "${WHEELS:-.whl}"/fp4moe-*.whl "${WHEELS:-.whl}"/apache_tvm_ffi-*.whl > "$OUT/python_install.log" 2>&1
  start=$(date +%s)
  PYTHONPATH=/tmp/site python3 -u bench/soak_torch.py --model "${SOAK_MODEL:-glm5}" --layers 16 --threads 4 \
    --max-tokens 4096 --check-every 100 --fault-every 50 --seconds "${SOAK_SECONDS:-300}" --out "$OUT/soak_torch.json" 2>&1 |
    tee "$OUT/soak_torch.log"
  summary+=("soak_torch: rc=${PIPESTATUS[0]}, $(( $(date +%s) - start )) s; $(grep -E '^soak_torch: [0-9]+ forwards' "$OUT/soak_torch.log")")
elif [ "$WHAT" = soak ]; then
  start=$(date +%s)
  # shellcheck disable=SC2086
  "$BIN/bench_soak" --model "${SOAK_MODEL:-glm5}" --seconds "${SOAK_SECONDS:-480}" --faults --out "$OUT/bench_soak.json" \
    ${SOAK_ARGS:-} 2>&1 |
    tee "$OUT/bench_soak.log"
  summary+=("bench_soak: rc=${PIPESTATUS[0]}, $(( $(date +%s) - start )) s; $(grep -E '^bench_soak: [0-9]+ forwards' "$OUT/bench_soak.log")")
fi
if [ "$WHAT" = parallel ] || [ "$WHAT" = all ]; then
  TOK=${PARALLEL_TOKENS:-1,2,4,8,16,32,64,128,256,512,1024,2048}
  gpus=$(nvidia-smi -L | wc -l)
  runs=("ep1_allgather --ep 1 --dispatch allgather --experts 32" "ep1_alltoall --ep 1 --dispatch alltoall --experts 32"
        "tp1 --tp 1 --intermediate 256")
  for g in 2 4 8; do
    [ "$gpus" -ge "$g" ] && runs+=("ep${g}_allgather --ep $g --dispatch allgather" "ep${g}_alltoall --ep $g --dispatch alltoall"
                                   "tp$g --tp $g")
  done
  for r in "${runs[@]}"; do
    name=${r%% *}
    # shellcheck disable=SC2086
    "$BIN/fp4moe" bench --model glm5 --tokens "$TOK" --reps 20 --out "$OUT/parallel_$name" ${r#* } > "$OUT/parallel_$name.log" 2>&1
    summary+=("fp4moe bench ${r#* }: rc=$?")
  done
fi
if [ "$WHAT" = sanitize ] || [ "$WHAT" = all ]; then
  # compute-sanitizer on small cases (memcheck, racecheck, synccheck), the FP8 path's included
  if ls "${WHEELS:-.whl}"/fp4moe-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      "${WHEELS:-.whl}"/fp4moe-*.whl "${WHEELS:-.whl}"/apache_tvm_ffi-*.whl > "$OUT/python_install.log" 2>&1
  fi
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
    # racecheck runs about two forwards a second: 30 s of it checks about as many as 5 s of the others.
    # The soaks' device memory check counts the tool's own device allocations too (cudaMemGetInfo):
    # synccheck's grow by about 2 GB in the first seconds; memcheck's and racecheck's did not grow.
    soak_s=5; [ "$tool" = racecheck ] && soak_s=30
    slack=256; [ "$tool" = synccheck ] && slack=4096
    # the host memory the tool keeps inside the process: racecheck's grows by gigabytes
    host_slack=256; [ "$tool" = racecheck ] && host_slack=16384
    # each part runs where its program was carried (BIN's binaries, the wheel)
    if [ -x "$BIN/fp4moe_gpu_tests" ]; then
      compute-sanitizer --tool $tool --error-exitcode 9 "$BIN/fp4moe_gpu_tests" \
        --gtest_filter="${SANITIZE_FILTER:-GpuMoeLayer.SplitFinalize*:GpuGroupedGemm.SkewedRouting*:GpuGroupedGemm.WarpgroupTilesSmallCase:GpuGroupedGemm.SplitKSmallCase:GpuGroupedGemm.EarlyStartSeesOffsetsWrittenTwoLaunchesBack:GpuPrepareFp8.*:GpuQuantizeRowsFp8.*:GpuGroupedGemmFp8.SplitK*}" > "$OUT/sanitizer_$tool.log" 2>&1
      rc=$?
      summary+=("compute-sanitizer $tool: rc=$rc, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY' "$OUT/sanitizer_$tool.log" | tail -1)")
    fi
    # the soak's short form: two layers, two threads and streams, graphs, bad requests
    if [ -x "$BIN/bench_soak" ]; then
      compute-sanitizer --tool $tool --error-exitcode 9 "$BIN/bench_soak" --model glm5-small --layers 2 --threads 2 \
        --max-tokens 64 --seconds $soak_s --faults --fault-every 5 --check-every 3 --reference-every 5 --device-slack-mb $slack \
        --host-slack-mb $host_slack --out "$OUT/sanitizer_soak_$tool.json" > "$OUT/sanitizer_soak_$tool.log" 2>&1
      rc=$?
      summary+=("compute-sanitizer $tool, soak short form: rc=$rc, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY' "$OUT/sanitizer_soak_$tool.log" | tail -1)")
    fi
    # the same through torch.ops.fp4moe; only fp4moe's kernels are checked (PyTorch's own are not ours)
    if [ -d /tmp/site/fp4moe ]; then
      PYTHONPATH=/tmp/site compute-sanitizer --tool $tool --error-exitcode 9 --kernel-name kns=fp4moe \
        python3 -u bench/soak_torch.py --model glm5-small --layers 2 --threads 2 --max-tokens 64 --seconds $soak_s \
        --check-every 3 --fault-every 5 --device-slack-mb $slack --out "$OUT/sanitizer_soak_torch_$tool.json" > "$OUT/sanitizer_soak_torch_$tool.log" 2>&1
      rc=$?
      summary+=("compute-sanitizer $tool, torch-op soak short form: rc=$rc, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY' "$OUT/sanitizer_soak_torch_$tool.log" | tail -1)")
    fi
  done
fi
kill $sampler 2>/dev/null
wait $sampler 2>/dev/null
summary+=("$(python3 - "$OUT/clocks.csv" <<'PY'
import statistics, sys
rows = []
for line in open(sys.argv[1]):
    try:
        row = [float(v) for v in line.split(",")]
    except ValueError:
        continue
    if len(row) == 3:  # a line cut short by the kill is dropped
        rows.append(row)
if rows:
    clk, pw, temp = zip(*rows)
    print(f"clocks over {len(rows)} samples: SM {min(clk):.0f}..{max(clk):.0f} MHz (median {statistics.median(clk):.0f}), "
          f"power up to {max(pw):.0f} W, temperature up to {max(temp):.0f} C")
else:
    print("clocks: no samples")
PY
)")
echo
echo "==== summary ===="
for s in "${summary[@]}"; do echo "$s"; done
for kind in decode prefill permuted; do
  if [ -f "$OUT/bench_${kind}_tiles.txt" ]; then cat "$OUT/bench_${kind}_tiles.txt"; fi
  if [ -f "$OUT/bench_${kind}_table.txt" ]; then cat "$OUT/bench_${kind}_table.txt"; fi
done
if [ -f "$OUT/bench_wgmma_rate.txt" ]; then cat "$OUT/bench_wgmma_rate.txt"; fi
for f in bench_route bench_host_overhead python_op_overhead python_layer; do [ -f "$OUT/$f.txt" ] && cat "$OUT/$f.txt"; done
[ -f "$OUT/bench_forward_timeline.log" ] && grep -E '^[a-z0-9.-]+ T=[0-9]+: ' "$OUT/bench_forward_timeline.log"
if [ -f "$OUT/tune.log" ]; then tail -32 "$OUT/tune.log"; fi
if [ -f "$OUT/bench/bench.md" ]; then cat "$OUT/bench/bench.md"; fi
if [ -f "$OUT/bench_gpt_oss/bench.md" ]; then cat "$OUT/bench_gpt_oss/bench.md"; fi
for f in "$OUT"/parallel_*.log; do [ -f "$f" ] && { echo; echo "$(basename "$f" .log):"; grep -E '^(\||fp4moe --)' "$f"; }; done
if [ "${PACK:-0}" = 1 ]; then
  tar czf /tmp/gpu-run.tar.gz -C "$OUT" . && rm -rf "${OUT:?}"/* && mv /tmp/gpu-run.tar.gz "$OUT/gpu-run.tar.gz"
  echo "packed: $OUT/gpu-run.tar.gz"
fi

#!/usr/bin/env bash
# Fetches the peer engines' code that fp4moe's benchmarks time beside it, pinned by
# version and sha256, into DIR (default .whl/peers, git-ignored: their code never
# enters the repository):
#   DIR/humming_kernels-0.1.19-*.whl  Humming, kept as the wheel (the harness installs it
#                                     with --no-deps --target on the GPU machine)
#   DIR/triton_kernels/               OpenAI's triton_kernels as vLLM 0.33.0 ships it
#                                     (vllm/third_party/triton_kernels), with a VERSION file;
#                                     its modules import `triton_kernels.` absolutely, so it
#                                     must be a top-level package: put DIR on sys.path and
#                                     `import triton_kernels`
# vLLM's wheel (336 MB) is downloaded, verified, cut down to that folder and deleted.
# Idempotent: what is already there and verified is kept. Needs PyPI (pip) and python3.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-$ROOT/.whl/peers}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)

HUMMING_REQ="humming-kernels==0.1.19"
HUMMING_WHL="humming_kernels-0.1.19-cp310-abi3-manylinux_2_28_x86_64.whl"
HUMMING_SHA256="16ad0c8e9c2d5a8db739bdb97bcc510cedc9dc4c4c111098cbb2d7ac9c1dd973"
VLLM_REQ="vllm==0.33.0"
VLLM_WHL="vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"
VLLM_SHA256="4b6bdec4ab269990bf70d45a3c1e94c3760a27064513760193b26d6f0da883aa"
TK_VERSION="vllm 0.33.0 third_party/triton_kernels"

die() { echo "fetch-peers: $*" >&2; exit 1; }

sha_ok() {  # FILE SHA256
  [[ -f $1 ]] && [[ $(sha256sum "$1" | cut -d' ' -f1) == "$2" ]]
}

# pip_get REQ SHA256 WHL DEST: downloads exactly that wheel (the GPU machine's target:
# CPython 3.12, manylinux_2_28 x86_64) into DEST, pip checking the hash, then checks it again.
pip_get() {
  local req=$1 sha=$2 whl=$3 dest=$4
  local reqfile log
  reqfile=$(mktemp) log=$(mktemp)
  echo "$req --hash=sha256:$sha" >"$reqfile"
  echo "fetch-peers: downloading $req ..."
  if ! python3 -m pip download --no-deps --require-hashes --only-binary=:all: \
      --implementation cp --python-version 3.12 --platform manylinux_2_28_x86_64 \
      --progress-bar off -d "$dest" -r "$reqfile" >"$log" 2>&1; then
    tail -n 15 "$log" >&2
    rm -f "$reqfile"
    if grep -q "DO NOT MATCH THE HASHES" "$log"; then
      rm -f "$log"
      die "$req: the downloaded file does not have the pinned sha256 $sha (changed upstream, or a bad mirror)"
    fi
    rm -f "$log"
    die "$req: pip download failed (no network or PyPI unreachable? the lines above say)"
  fi
  rm -f "$reqfile" "$log"
  sha_ok "$dest/$whl" "$sha" || die "$req: expected $dest/$whl with sha256 $sha after the download; not there"
}

# --- Humming: the wheel itself ---------------------------------------------------------
if sha_ok "$DIR/$HUMMING_WHL" "$HUMMING_SHA256"; then
  echo "fetch-peers: $HUMMING_WHL already there, sha256 verified"
else
  rm -f "$DIR/$HUMMING_WHL"
  pip_get "$HUMMING_REQ" "$HUMMING_SHA256" "$HUMMING_WHL" "$DIR"
fi

# --- triton_kernels: one folder of vLLM's wheel ----------------------------------------
stamp="$TK_VERSION (from $VLLM_WHL, sha256 $VLLM_SHA256)"
if [[ -f $DIR/triton_kernels/VERSION && $(head -n 1 "$DIR/triton_kernels/VERSION") == "$TK_VERSION" \
      && $(sed -n 2p "$DIR/triton_kernels/VERSION") == "$stamp" && -f $DIR/triton_kernels/matmul_ogs.py ]]; then
  echo "fetch-peers: triton_kernels ($TK_VERSION) already there"
else
  work=$(mktemp -d "$DIR/.vllm.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  pip_get "$VLLM_REQ" "$VLLM_SHA256" "$VLLM_WHL" "$work"
  python3 - "$work/$VLLM_WHL" "$work/out" <<'EOF' || die "could not extract vllm/third_party/triton_kernels from $VLLM_WHL"
import sys, zipfile
whl, out = sys.argv[1], sys.argv[2]
prefix = "vllm/third_party/triton_kernels/"
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if n.startswith(prefix) and not n.endswith("/")]
    if not any(n == prefix + "matmul_ogs.py" for n in names):
        sys.exit(f"{whl} has no {prefix}matmul_ogs.py")
    for n in names:
        z.extract(n, out)
print(f"fetch-peers: extracted {len(names)} files of {prefix}")
EOF
  rm -rf "$DIR/triton_kernels"
  mv "$work/out/vllm/third_party/triton_kernels" "$DIR/triton_kernels"
  printf '%s\n%s\n' "$TK_VERSION" "$stamp" >"$DIR/triton_kernels/VERSION"
  rm -rf "$work"   # the vLLM wheel goes with it
  trap - EXIT
fi

echo "fetch-peers: in $DIR:"
(cd "$DIR" && du -sh -- * | sed 's/^/  /')
echo "fetch-peers: for triton_kernels put $DIR on sys.path (then: import triton_kernels)"

#!/usr/bin/env bash
# Installs every build and test dependency of fp4moe, pinned, unattended.
# Idempotent: a second run on a set-up machine does nothing but check.
# The CUDA 13 toolkit is expected at /usr/local/cuda (present on this machine kind).
set -euo pipefail

APT_PACKAGES=(
  "libgtest-dev=1.12.1-0.2"
  "googletest=1.12.1-0.2"
  "libcli11-dev=2.1.2+ds-1"
  "nlohmann-json3-dev=3.11.2-2"
  "libfmt-dev=9.1.0+ds1-2"
  "ccache=4.8+really4.7.5-1"
  "ninja-build=1.11.1-2~deb12u1"
  "clang-14=1:14.0.6-12"                # the libFuzzer target (tests/fuzz) is built with clang
  "libclang-rt-14-dev=1:14.0.6-12"      # libFuzzer and clang's sanitizer runtimes
)
PIP_PACKAGES=(
  "nvidia-cutlass==4.2.0.0"   # CUTLASS/CuTe headers only (--no-deps); pyproject.toml pins the same for pip builds
  "safetensors==0.4.5"        # interop tests write/read checkpoints with it
  "numpy==1.26.4"
  # cuobjdump (and the nvdisasm it runs) for the SASS check in tests/tools/check_kernel_resources.py:
  # the CUDA 13.0 toolkit here has neither. 13.2.51 is the oldest version on PyPI, and it reads
  # nvcc 13.0's sm_90a and sm_120a objects (checked on both when it was pinned).
  "nvidia-cuda-cuobjdump==13.2.51"
  "nvidia-cuda-nvdisasm==13.2.51"
  # the Python package: its build backend and binding (pyproject.toml pins the same), and pytest
  "scikit-build-core==0.11.6"
  "packaging==24.2"
  "pathspec==0.12.1"
  "apache-tvm-ffi==0.1.15.post2"
  "typing_extensions==4.15.0"
  "pytest==8.3.4"
  "iniconfig==2.0.0"
  "pluggy==1.5.0"
)

need_apt=0
for p in "${APT_PACKAGES[@]}"; do
  name=${p%%=*}; want=${p#*=}
  have=$(dpkg-query -W -f='${Version}' "$name" 2>/dev/null || true)
  [ "$have" = "$want" ] || need_apt=1
done
if [ "$need_apt" = 1 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${APT_PACKAGES[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
export PIP_ROOT_USER_ACTION=ignore
for p in "${PIP_PACKAGES[@]}"; do
  name=${p%%==*}; want=${p#*==}
  have=$("$PY" -m pip show "$name" 2>/dev/null | awk "/^Version:/{print \$2}" || true)
  if [ "$have" != "$want" ]; then
    "$PY" -m pip install -q --no-deps --disable-pip-version-check "$p"
  fi
done

command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
command -v nvcc >/dev/null || { echo "setup: nvcc not found (expected the CUDA 13 toolkit at /usr/local/cuda)" >&2; exit 1; }
echo "setup: dependencies ready ($(nvcc --version | tail -1))"

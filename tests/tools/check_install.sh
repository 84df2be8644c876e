#!/usr/bin/env bash
# Installs the built fp4moe into a temporary prefix and builds a consumer with find_package(fp4moe).
set -euo pipefail
build=$1 src=$2
prefix=$(mktemp -d) work=$(mktemp -d)
trap 'rm -rf "$prefix" "$work"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
cmake -S "$src/tests/consumer" -B "$work" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work" >/dev/null
"$work/consumer"
test -x "$prefix/bin/fp4moe"
"$prefix/bin/fp4moe" --help >/dev/null
echo "check_install: find_package(fp4moe) from $prefix works"

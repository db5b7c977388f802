#!/usr/bin/env bash
# README's test command: installs dependencies, builds, runs every test through ctest.
#   scripts/test.sh [--sanitize] [CTEST ARGS...]
# --sanitize builds into build-asan with AddressSanitizer + UBSan on the programs and tests (not on
# what gets preloaded: the hook and the simulated driver) and runs the same tests there.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake_args=()
if [ "${1:-}" = "--sanitize" ]; then
  shift
  export FIKIT_BUILD_DIR=${FIKIT_BUILD_DIR:-build-asan} FIKIT_PREFIX=${FIKIT_PREFIX:-.dist-asan}
  cmake_args+=(-DFIKIT_SANITIZE=ON)
fi
scripts/setup.sh
scripts/build.sh "${cmake_args[@]}"
ctest --test-dir "${FIKIT_BUILD_DIR:-build}" --output-on-failure -j"$(nproc)" "$@"

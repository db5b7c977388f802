#!/usr/bin/env bash
# README's test command: installs dependencies, builds, runs every test through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
ctest --test-dir "${FIKIT_BUILD_DIR:-build}" --output-on-failure -j"$(nproc)" "$@"

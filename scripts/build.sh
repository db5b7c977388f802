#!/usr/bin/env bash
# Configures and builds FIKIT into build/ (or $FIKIT_BUILD_DIR) and installs it into .dist/ (or
# $FIKIT_PREFIX).
# Extra arguments go to cmake's configure step, e.g. scripts/build.sh -DFIKIT_SANITIZE=ON
set -euo pipefail
cd "$(dirname "$0")/.."
build=${FIKIT_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
cmake --install "$build" --prefix "${FIKIT_PREFIX:-.dist}" >/dev/null

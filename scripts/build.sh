#!/usr/bin/env bash
# Configures and builds FIKIT into build/ (or $FIKIT_BUILD_DIR) and installs it into .dist/ (or
# $FIKIT_PREFIX). One line a step; the compiler's output (warnings included) goes to
# BUILD/fikit-build.log, and its tail is shown when the build fails.
#   scripts/build.sh [--programs] [CMAKE CONFIGURE ARGS...]
# --programs builds only what is installed (the tools, the hook, the examples and the simulated
# driver): what scripts/demo.sh runs, without the Kubernetes device plugin. Without it everything is
# built, tests, benchmarks and the device plugin too.
set -euo pipefail
case "${1:-}" in -h|--help) cat <<'EOF'
Usage: scripts/build.sh [--programs] [CMAKE CONFIGURE ARGS...]
Configures and builds FIKIT into build/ (or $FIKIT_BUILD_DIR) with CMake and Ninja, and installs it
into .dist/ (or $FIKIT_PREFIX). One line a step; the compiler's output goes to BUILD/fikit-build.log.
  --programs   only what is installed (the tools, the hook, the examples, the simulated driver)
EOF
  exit 0 ;;
esac
cd "$(dirname "$0")/.."
build=${FIKIT_BUILD_DIR:-build}
prefix=${FIKIT_PREFIX:-.dist}
targets=()
# Stated either way: the demo and the tests may share a build folder, whose cache keeps the last one.
plugin=(-DFIKIT_DEVICE_PLUGIN=ON)
if [ "${1:-}" = "--programs" ]; then
  shift
  targets=(fikit-run fikit-scheduler fikit-profile fikit_hook fikit-example-infer fikit-example-train
           fikit_simcuda fikit-simgpu)
  plugin=(-DFIKIT_DEVICE_PLUGIN=OFF)   # gRPC is only for Kubernetes (setup.sh --programs omits it)
fi
mkdir -p "$build"
log="$build/fikit-build.log"
start=$(date +%s)
echo "build: configuring $build (compiler output: $log)"
if ! cmake -S . -B "$build" -G Ninja "${plugin[@]}" "$@" >"$log" 2>&1; then
  echo "build: error: cmake failed; the end of $log:" >&2; tail -n 30 "$log" >&2; exit 1
fi
if [ ${#targets[@]} -gt 0 ]; then what="the programs"; else what="everything (tests and benchmarks too)"; fi
# Ninja says how much is left to do before it starts: the first build is minutes on 2 cores, a
# rebuild after a small change seconds.
steps=$(ninja -C "$build" -n "${targets[@]}" 2>/dev/null | grep -c '^\[' || true)
echo "build: compiling $what: $steps steps on $(nproc) cores"
target_args=()
[ ${#targets[@]} -gt 0 ] && target_args=(--target "${targets[@]}")
if ! cmake --build "$build" -j"$(nproc)" "${target_args[@]}" >>"$log" 2>&1; then
  echo "build: error: the build failed; its errors:" >&2
  grep -E 'error|FAILED' "$log" | head -n 20 >&2 || tail -n 30 "$log" >&2
  exit 1
fi
warnings=$(grep -c 'warning:' "$log" || true)
if ! cmake --install "$build" --prefix "$prefix" >>"$log" 2>&1; then
  echo "build: error: installing into $prefix failed; the end of $log:" >&2; tail -n 20 "$log" >&2; exit 1
fi
[ "$warnings" = 0 ] && note="" || note=" ($warnings compiler warnings: $log)"
echo "build: installed into $prefix in $(( $(date +%s) - start )) s$note"

#!/usr/bin/env bash
# README's test command: installs dependencies, builds, runs every test through ctest.
#   scripts/test.sh [--sanitize] [CTEST ARGS...]
# --sanitize builds into build-asan with AddressSanitizer + UBSan on the programs and tests (not on
# what gets preloaded: the hook and the simulated driver) and runs the same tests there.
set -euo pipefail
case "${1:-}" in -h|--help) cat <<'EOF'
Usage: scripts/test.sh [--sanitize] [CTEST ARGS...]
Installs FIKIT's dependencies (scripts/setup.sh: Debian packages, needs root or sudo once), builds
everything into build/ (scripts/build.sh) and runs every test through ctest, two at a time; the
timing-sensitive ones run alone. CI runs exactly this (.ci/run).
  --sanitize   build into build-asan with AddressSanitizer and UBSan, and run the same tests there
  CTEST ARGS   passed to ctest, e.g. -R e2e (only the end-to-end tests) or --rerun-failed
Exit status: ctest's (0: every test passed).
EOF
  exit 0 ;;
esac
cd "$(dirname "$0")/.."
cmake_args=()
if [ "${1:-}" = "--sanitize" ]; then
  shift
  export FIKIT_BUILD_DIR=${FIKIT_BUILD_DIR:-build-asan} FIKIT_PREFIX=${FIKIT_PREFIX:-.dist-asan}
  cmake_args+=(-DFIKIT_SANITIZE=ON)
fi
scripts/setup.sh
scripts/build.sh "${cmake_args[@]}"
build=${FIKIT_BUILD_DIR:-build}
# While the suite runs, a listener on fikit-scheduler's default port proves that no test reaches a
# daemon a user runs there; and the simulated GPUs this build tree's tests made are removed at the
# end, whatever happened (their names carry the tree's token: tests/CMakeLists.txt).
guard="$build/default-port-guard"
guarded=0
python3 tests/default_port_guard.py start "$guard" && guarded=1
cleanup() {
  rc=$?
  token=$(cat "$build/fikit-test-token" 2>/dev/null || true)
  if [ -n "$token" ]; then rm -f /dev/shm/fikit-test-"$token"-* /dev/shm/fikit-test-"$token"-*-*; fi
  if [ "$guarded" = 1 ] && ! python3 tests/default_port_guard.py stop "$guard"; then rc=1; fi
  exit "$rc"
}
trap cleanup EXIT
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" "$@"

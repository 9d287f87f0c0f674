#!/usr/bin/env bash
# Installs the Debian 12 packages Sentier's Bazel build needs, then Sentier's
# LibTorch (tools/setup_torch.sh: pip torch==2.11.0 in <repo>/.venv). Idempotent:
# checks each package with `dpkg -s` and only runs apt-get (update + install)
# when something is missing, so it is a quick no-op on a ready machine.
#
# Usage: tools/setup_deps.sh [--with-clang]   (run as root or with sudo)
set -euo pipefail

PACKAGES=(
  bazel-bootstrap        # Bazel 4.2.3
  build-essential        # gcc/g++
  python3-venv           # .venv for pip torch (tools/setup_torch.sh)
  libabsl-dev
  libgflags-dev
  libgoogle-glog-dev
  libre2-dev
  libgtest-dev
  libgmock-dev
  libbenchmark-dev
  nlohmann-json3-dev
  libcpp-httplib-dev
  libssl-dev
  libtcmalloc-minimal4   # gperftools' tcmalloc, linked by the optimizing binaries
  prometheus-cpp-dev     # sentierd's /metrics (prometheus-cpp core)
  prometheus             # the real scraper of the metrics test
  python3-yaml           # the deployment manifests' test
  buildah                # the OCI image of deploy/image (built, never run: no container starts here)
  systemd                # systemd-analyze: the unit's test (deploy/deploy_test.sh)
)
if [[ "${1:-}" == "--with-clang" ]]; then
  PACKAGES+=(clang-14 libclang-rt-14-dev)   # for bazel build --config=fuzz
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg -s "$pkg" 2>/dev/null | grep -q '^Status: install ok installed'; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup_deps: all ${#PACKAGES[@]} packages already installed."
else
  echo "setup_deps: installing: ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then
    SUDO="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  echo "setup_deps: done."
fi

# LibTorch: pip torch in the project's .venv (fast no-op when present).
"$(dirname "$0")/setup_torch.sh"

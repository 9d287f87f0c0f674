#!/usr/bin/env bash
# setup_torch.sh — Sentier's LibTorch: pip torch==2.11.0 (with its dependencies as PyPI gives
# them; on linux x86_64 the CUDA 13 build and its nvidia-* wheels, a few GB) in the project's
# own environment <repo>/.venv. Bazel's @libtorch (third_party/torch/torch_repository.bzl) and
# the CMake mirror build against .venv/lib/python3*/site-packages/torch, and @libtorch//:python
# runs the environment's Python.
#
# Idempotent: when .venv's torch already reports 2.11.0 it exits 0 at once (one `import torch`).
# Otherwise it creates .venv (python3 -m venv) if needed and pip-installs the pin into it.
# pip's own settings apply, e.g. PIP_FIND_LINKS=/dir/with/wheels to take a downloaded wheel.
#
# Usage: tools/setup_torch.sh        (exit 0: ready; non-zero with the reason on stderr)
set -euo pipefail

TORCH_PIN=2.11.0
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.venv"
py="$venv/bin/python"

installed_version() {  # prints .venv's torch.__version__, or nothing
  [[ -x "$py" ]] || return 0
  "$py" -c 'import torch, sys; sys.stdout.write(torch.__version__)' 2>/dev/null || true
}

pinned() { [[ "$1" == "$TORCH_PIN" || "$1" == "$TORCH_PIN+"* ]]; }

have="$(installed_version)"
if pinned "$have"; then
  echo "setup_torch: torch $have in $venv"
  exit 0
fi

die() { echo "setup_torch: error: $*" >&2; exit 1; }

if [[ ! -x "$py" ]]; then
  command -v python3 >/dev/null || die "python3 not found (Debian: apt-get install python3 python3-venv)"
  echo "setup_torch: creating $venv"
  python3 -m venv "$venv" ||
    die "python3 -m venv $venv failed (Debian: apt-get install python3-venv; then remove $venv and retry)"
fi
echo "setup_torch: installing torch==$TORCH_PIN into $venv${have:+ (it has torch $have)} (a few GB from PyPI)"
"$py" -m pip install --disable-pip-version-check "torch==$TORCH_PIN" ||
  die "pip install torch==$TORCH_PIN into $venv failed (network? disk space?)"

have="$(installed_version)"
pinned "$have" ||
  die "after the install, $py -c 'import torch' gives '${have:-an error}', not $TORCH_PIN"
echo "setup_torch: torch $have in $venv"

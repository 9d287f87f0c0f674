#!/usr/bin/env bash
# python_smoke_test.sh — @libtorch//:python runs the Python of the LibTorch Bazel builds against,
# and its torch is the version tools/setup_torch.sh pins (TORCH_PIN), and computes.
set -u
RUN="${TEST_SRCDIR:?run under bazel test}"
PY="$RUN/libtorch/python"
pin=$(sed -n 's/^TORCH_PIN=\([0-9.]*\)$/\1/p' "$RUN/sentier/tools/setup_torch.sh")
[[ -n "$pin" ]] || { echo "FAIL: no TORCH_PIN=... in tools/setup_torch.sh"; exit 1; }
out=$("$PY" -c 'import torch; print(torch.__version__); print(int(torch.arange(5).sum()))' 2>"$TEST_TMPDIR/err")
rc=$?
[[ $rc -eq 0 ]] || { echo "FAIL: @libtorch//:python exited $rc"; cat "$TEST_TMPDIR/err"; exit 1; }
version=$(sed -n 1p <<<"$out")
sum=$(sed -n 2p <<<"$out")
echo "@libtorch//:python: torch $version (pin $pin)"
[[ "$version" == "$pin" || "$version" == "$pin+"* ]] || { echo "FAIL: torch $version, not the pin $pin"; exit 1; }
[[ "$sum" == 10 ]] || { echo "FAIL: torch.arange(5).sum() is '$sum', not 10"; exit 1; }
echo "PASS"

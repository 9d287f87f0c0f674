#!/usr/bin/env bash
# code_shape_test.sh — the source tree keeps code as a page (tools/check_code_shape.py): no
# non-test source file over 700 lines, no function over 80 lines but one table.
set -u
# Under `bazel test` the CMakeLists.txt in the runfiles is a link into the source tree: follow it.
if [[ -n "${TEST_SRCDIR:-}" && -e "$TEST_SRCDIR/sentier/CMakeLists.txt" ]]; then
  ROOT="$(dirname "$(readlink -f "$TEST_SRCDIR/sentier/CMakeLists.txt")")"
else
  ROOT="$(cd "$(dirname "$0")/.." && pwd)"
fi
cd "$ROOT" && exec python3 tools/check_code_shape.py

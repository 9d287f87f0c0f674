#!/usr/bin/env bash
# test.sh — installs what is missing and runs the whole test suite (bazel test //...).
# Prints a closing line "tests: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup_deps.sh || exit 1
log=$(mktemp)
bazel test //... "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)' "$log")
rm -f "$log"
echo "tests: ${passed} passed, ${failed} failed"
exit "$rc"

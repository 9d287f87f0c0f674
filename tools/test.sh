#!/usr/bin/env bash
# test.sh — installs what is missing and runs the whole test suite: `bazel test //...` (gcc), then
# the fuzz smoke (testing/fuzz_smoke.sh: each libFuzzer target, built with clang-14 and
# ASan/UBSan, runs $SENTIER_FUZZ_SECONDS seconds, default 15, on its seed corpus; set
# SENTIER_FUZZ_SECONDS=0 to skip it). Extra arguments go to `bazel test`.
# Prints a closing line "tests: N passed, M failed; fuzz smoke: ok|FAILED|skipped".
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup_deps.sh || exit 1
# bazel-* links into the fuzz smoke's output base (left by a run before it stopped making them)
# would be read as source folders by `bazel test //...`: they go.
fuzz_ob=${SENTIER_FUZZ_OUTPUT_BASE:-$HOME/.cache/sentier-fuzz-ob}
for link in bazel-*; do
  [[ -L "$link" && "$(readlink "$link")" == "$fuzz_ob"* ]] && rm -f "$link"
done
log=$(mktemp)
bazel test //... "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)' "$log")
rm -f "$log"
fuzz=skipped
secs=${SENTIER_FUZZ_SECONDS:-15}
if [[ "$secs" != 0 ]]; then
  if testing/fuzz_smoke.sh "$secs"; then fuzz=ok; else fuzz=FAILED; rc=1; fi
fi
echo "tests: ${passed} passed, ${failed} failed; fuzz smoke: ${fuzz}"
exit "$rc"

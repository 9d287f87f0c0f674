#!/usr/bin/env bash
# fuzz_smoke.sh — builds the libFuzzer targets (clang-14, ASan/UBSan) and runs each for a short
# time on its seed corpus (testdata/fuzz/<target>/). Exit 1 when a target fails to build or
# crashes (the reproducer is left in $WORK/<target>/crash-*).
#
#   testing/fuzz_smoke.sh [SECONDS_PER_TARGET=20] [TARGET...]
#
# Uses its own Bazel output base ($SENTIER_FUZZ_OUTPUT_BASE, default ~/.cache/sentier-fuzz-ob) so
# that switching compilers never invalidates the main (gcc) build.
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(rule_parser_fuzz daemon_state_fuzz rule_compile_fuzz ir_parser_fuzz sample_inputs_fuzz
           archive_check_fuzz pt2_reader_fuzz)
fi
ob=${SENTIER_FUZZ_OUTPUT_BASE:-$HOME/.cache/sentier-fuzz-ob}
command -v clang-14 >/dev/null || tools/setup_deps.sh --with-clang || exit 1
labels=()
for t in "${targets[@]}"; do labels+=("//testing/fuzz:$t"); done
# -fno-sanitize=vptr: Debian's libtorch does not export typeinfo for c10::DynamicType, which
# UBSan's vptr checks reference (undefined reference at link time).
flags=(--config=fuzz --copt=-fno-sanitize=vptr)
# --symlink_prefix=/: no bazel-* links in the checkout; links into this output base would be
# read as source folders by the main build's `bazel test //...` (it skips only its own).
bazel --output_base="$ob" build "${flags[@]}" --symlink_prefix=/ "${labels[@]}" || exit 1
bin=$(bazel --output_base="$ob" info "${flags[@]}" bazel-bin 2>/dev/null)
work=${WORK:-$(mktemp -d)}
rc=0
for t in "${targets[@]}"; do
  mkdir -p "$work/$t/corpus" "$work/$t/seeds"
  # sample_inputs_fuzz and pt2_reader_fuzz write binary seeds (valid archives) at start-up.
  LSAN_OPTIONS="suppressions=$PWD/testing/fuzz/lsan_suppressions.txt:print_suppressions=0" \
  SENTIER_FUZZ_SEED_DIR="$work/$t/seeds" "$bin/testing/fuzz/$t" \
    -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$work/$t/" \
    "$work/$t/corpus" "$work/$t/seeds" "testdata/fuzz/$t" >"$work/$t/log" 2>&1
  st=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/$t/log" | grep -o '[0-9]*$')
  cov=$(grep -oE 'cov: [0-9]+' "$work/$t/log" | tail -1)
  if [ $st -ne 0 ]; then
    echo "FAIL $t (exit $st): $(ls "$work/$t"/crash-* "$work/$t"/timeout-* "$work/$t"/oom-* 2>/dev/null | head -1)"
    grep -m1 -E 'ERROR: (AddressSanitizer|libFuzzer)|runtime error' "$work/$t/log"
    rc=1
  else
    echo "ok   $t: ${execs:-?} execs, ${cov:-?}"
  fi
done
echo "fuzz logs: $work"
exit $rc

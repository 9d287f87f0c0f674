#!/usr/bin/env bash
# check_bench_suite.sh — the validator on the bench suite: every correct Sentier artifact must be
# accepted and every planted bug rejected, in float32 and bfloat16.
#
#   bench/check_bench_suite.sh [--bin=DIR] [--device=cuda|cpu] [EXPORT_DIR]
#
# EXPORT_DIR (default build/bench-models) holds <model>/{original,optimized,inputs}.pt as written
# by `model_bench --export_dir`. For each model: sentier_check original vs optimized (fp32 and
# bf16, must exit 0); then each rule file of testdata/planted/ (wrong on purpose) is applied
# alone with sentier_opt, and where it fired, sentier_check must exit 1 in fp32 and in bf16.
# Writes a markdown table to ${OUT:-build}/check_bench_suite.md. Exit 0 when every verdict is
# right, 1 otherwise, 2 on bad usage.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=build/cmake
device=cuda
dir=build/bench-models
for a in "$@"; do
  case "$a" in
    --bin=*) bin="${a#--bin=}" ;;
    --device=*) device="${a#--device=}" ;;
    -*) echo "unknown flag $a" >&2; exit 2 ;;
    *) dir="$a" ;;
  esac
done
[[ -x "$bin/sentier_check" && -x "$bin/sentier_opt" ]] || { echo "no sentier_check/sentier_opt in $bin" >&2; exit 2; }
[[ -d "$dir" ]] || { echo "no export directory $dir" >&2; exit 2; }
out="${OUT:-build}"
mkdir -p "$out"
table="$out/check_bench_suite.md"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
wrong=0

check() {  # model_dir candidate dtype -> prints exit code and the verdict line
  "$bin/sentier_check" --reference="$1/original.pt" --candidate="$2" --inputs="$1/inputs.pt" \
    --device="$device" --dtype="$3" --trials=2 --mode=both >"$work/check.log" 2>&1
  local rc=$?
  echo "$rc $(grep '^sentier_check' "$work/check.log" | tail -1 | sed 's/^sentier_check: //' | cut -c1-420)"
}

{
  echo "| model | artifact | fp32 | bf16 | verdicts |"
  echo "|---|---|---|---|---|"
} >"$table"
for m in $(ls "$dir"); do
  md="$dir/$m"
  [[ -f "$md/original.pt" && -f "$md/optimized.pt" && -f "$md/inputs.pt" ]] || continue
  read -r rc32 msg32 <<<"$(check "$md" "$md/optimized.pt" float32)"
  read -r rc16 msg16 <<<"$(check "$md" "$md/optimized.pt" bfloat16)"
  verdict=ok
  [[ $rc32 == 0 && $rc16 == 0 ]] || { verdict="WRONG (correct artifact rejected)"; wrong=$((wrong + 1)); }
  echo "| $m | Sentier (correct) | exit $rc32 | exit $rc16: $msg16 | $verdict |" >>"$table"
  for rules in testdata/planted/*.rules; do
    name=$(basename "$rules" .rules)
    cand="$work/$m-$name.pt"
    "$bin/sentier_opt" --input="$md/original.pt" --output="$cand" --inputs="$md/inputs.pt" \
      --rules="$rules" >"$work/opt.log" 2>&1 || { echo "| $m | planted $name | sentier_opt failed | | |" >>"$table"; continue; }
    grep -q " 0 rewrites" "$work/opt.log" && continue  # the planted rule does not apply here
    read -r rc32 msg32 <<<"$(check "$md" "$cand" float32)"
    read -r rc16 msg16 <<<"$(check "$md" "$cand" bfloat16)"
    verdict=ok
    [[ $rc32 == 1 && $rc16 == 1 ]] || { verdict="WRONG (planted bug accepted or check failed)"; wrong=$((wrong + 1)); }
    echo "| $m | planted $name | exit $rc32 | exit $rc16: $msg16 | $verdict |" >>"$table"
  done
done
cat "$table"
echo "check_bench_suite: $wrong wrong verdicts"
[[ $wrong == 0 ]]

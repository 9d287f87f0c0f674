#!/bin/bash
# Minimal lcov merger: cat all *.dat under --coverage_dir (or the files listed
# in --reports_file) into --output_file. Other flags are accepted and ignored.
set -u
out="" dir="" reports=""
for arg in "$@"; do
  case "$arg" in
    --output_file=*) out="${arg#*=}" ;;
    --coverage_dir=*) dir="${arg#*=}" ;;
    --reports_file=*) reports="${arg#*=}" ;;
  esac
done
[[ -n "$out" ]] || exit 0
: > "$out"
if [[ -n "$dir" && -d "$dir" ]]; then
  find "$dir" -name '*.dat' ! -path "$out" -type f -exec cat {} + >> "$out" 2>/dev/null || true
fi
if [[ -n "$reports" && -f "$reports" ]]; then
  while IFS= read -r f; do [[ -f "$f" ]] && cat "$f" >> "$out"; done < "$reports"
fi
exit 0

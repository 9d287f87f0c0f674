#!/usr/bin/env bash
# sentier_check_self_test.sh — sentier_check of every archive of the model corpus and the Optimus
# conformance set (testdata/*/torch1.13, and the exported programs of testdata/*/pt2) against
# itself says "equivalent": the checker never
# blames a candidate for what its reference cannot do (a model that pins float32 itself is judged
# in float32, and the output says so).
set -u
RUN="${TEST_SRCDIR:-.}/sentier"
[[ -d "$RUN/tools" ]] || RUN="$(cd "$(dirname "$0")/.." && pwd)"
CHECK="$RUN/tools/sentier_check"
[[ -x "$CHECK" ]] || CHECK="$RUN/bazel-bin/tools/sentier_check"
passes=0 fails=0
# self_check NAME ARCHIVE [--inputs=...]: the archive against itself must be equivalent.
self_check() {
  local name="$1" archive="$2"; shift 2
  local out
  out=$("$CHECK" --reference="$archive" --candidate="$archive" "$@" --device=cpu --trials=1 2>&1)
  if [[ $? == 0 && "$out" == *"sentier_check: equivalent"* ]]; then
    passes=$((passes + 1))
  else
    fails=$((fails + 1))
    echo "FAIL $name against itself:"; echo "$out" | tail -3
  fi
}
for set in models optimus_conformance; do
  for dir in "$RUN/testdata/$set/torch1.13"/*/; do
    for kind in scripted traced; do
      [[ -e "$dir$kind.pt" ]] && self_check "$set/$(basename "$dir")/$kind.pt" "$dir$kind.pt" --inputs="${dir}inputs.pt"
    done
  done
  for archive in "$RUN/testdata/$set/pt2"/*.pt2; do  # their sample inputs are inside
    self_check "$set/pt2/$(basename "$archive")" "$archive"
  done
done
echo "$passes passed, $fails failed"
(( fails == 0 && passes > 300 ))

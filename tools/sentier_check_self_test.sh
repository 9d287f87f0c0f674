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
for set in models optimus_conformance; do
  for dir in "$RUN/testdata/$set/torch1.13"/*/; do
    for kind in scripted traced; do
      archive="$dir$kind.pt"
      [[ -e "$archive" ]] || continue
      out=$("$CHECK" --reference="$archive" --candidate="$archive" --inputs="${dir}inputs.pt" --device=cpu \
            --trials=1 2>&1)
      if [[ $? == 0 && "$out" == *"sentier_check: equivalent"* ]]; then
        passes=$((passes + 1))
      else
        fails=$((fails + 1))
        echo "FAIL $set/$(basename "$dir")/$kind.pt against itself:"; echo "$out" | tail -3
      fi
    done
  done
  for archive in "$RUN/testdata/$set/pt2"/*.pt2; do  # their sample inputs are inside
    out=$("$CHECK" --reference="$archive" --candidate="$archive" --device=cpu --trials=1 2>&1)
    if [[ $? == 0 && "$out" == *"sentier_check: equivalent"* ]]; then
      passes=$((passes + 1))
    else
      fails=$((fails + 1))
      echo "FAIL $set/pt2/$(basename "$archive") against itself:"; echo "$out" | tail -3
    fi
  done
done
echo "$passes passed, $fails failed"
(( fails == 0 && passes > 300 ))

#!/usr/bin/env bash
# sentierd_corpus_test.sh — the real sentierd over a registry of the whole Python-authored corpus
# (testdata/models, saved by torch 1.13): each model's scripted archive is version 1, its traced
# twin version 2. With the rule selection on (--select_rules=on, timed on the CPU), every version
# must be published optimized or unchanged with a reason — none rejected — every report must
# follow runtime/report_schema.json, and every published artifact must load and match the
# original (sentier_check: outputs and parameter gradients).
set -u
RUN="${TEST_SRCDIR:-$PWD/bazel-bin/tools/sentierd_corpus_test.runfiles}/sentier"
source "$RUN/tools/sentierd_test_lib.sh"
CORPUS="$RUN/testdata/models/torch1.13"
CHECK="$RUN/tools/sentier_check"
T="${TEST_TMPDIR:-$(mktemp -d)}/corpus"
rm -rf "$T"; mkdir -p "$T/reg"
R="$T/reg"; O="$T/out"
versions=0
for dir in "$CORPUS"/*/; do
  m=$(basename "$dir")
  v=1
  for kind in scripted traced; do
    [[ -f "$dir/$kind.pt" ]] || continue
    mkdir -p "$R/$m/tmp-$v"
    cp "$dir/$kind.pt" "$R/$m/tmp-$v/model.pt"
    cp "$dir/inputs.pt" "$R/$m/tmp-$v/inputs.pt"
    mv "$R/$m/tmp-$v" "$R/$m/$v"
    versions=$((versions + 1))
    v=$((v + 1))
  done
done
start=$(date +%s)
"$D" --once --registry="$R" --output="$O" --device=cpu --select_rules=on --workers=2 \
  --poll_interval_ms=50 >"$T/log" 2>&1
rc=$?
[[ $rc == 0 ]] && ok "pass over $versions versions completed in $(( $(date +%s) - start )) s" \
  || { fail "sentierd exit $rc"; tail -20 "$T/log"; }
published=0
for rep in "$O"/*/*/report.json; do
  [[ -f "$rep" ]] || continue
  published=$((published + 1))
  mv_=${rep#"$O/"}; mv_=${mv_%/report.json}
  s=$(status_of "$rep")
  reason=$(grep -o '"reason": "[^"]*' "$rep" | head -1 | cut -c12-)
  case "$s" in
    optimized|unchanged)
      if [[ -n "$reason" ]]; then ok "$mv_ $s: ${reason:0:100}"; else fail "$mv_ $s without a reason"; fi ;;
    *) fail "$mv_ $s: $reason" ;;
  esac
  if [[ "$s" == optimized ]]; then
    m=${mv_%/*}; v=${mv_#*/}
    "$CHECK" --reference="$R/$m/$v/model.pt" --candidate="$O/$m/$v/model.pt" \
      --inputs="$R/$m/$v/inputs.pt" --device=cpu --mode=both --trials=2 >"$T/check.txt" 2>&1 \
      && ok "$mv_ artifact equivalent" || { fail "$mv_ artifact not equivalent"; cat "$T/check.txt"; }
  fi
done
[[ $published == "$versions" ]] && ok "$published of $versions versions published" \
  || fail "only $published of $versions versions published"
"$RUN/tools/check_report" --schema="$RUN/runtime/report_schema.json" "$O"/*/*/report.json \
  && ok "reports follow the schema" || fail "reports do not follow runtime/report_schema.json"
echo "sentierd corpus: $passes passed, $fails failed"
[[ $fails == 0 ]]

#!/usr/bin/env bash
# sentierd_corpus_test.sh [SET [SELECT [layouts|no_layouts]]] — the real sentierd over a registry
# of a whole Python-authored set: SET is a directory of the runfiles holding <model>/scripted.pt,
# traced.pt and inputs.pt (default testdata/models/torch1.13, the corpus; the Optimus conformance
# set is testdata/optimus_conformance/torch1.13); each model's scripted archive is version 1, its
# traced twin version 2. With the rule selection SELECT (--select_rules=, default on: timed on the
# CPU), every version must be published optimized or unchanged with a reason — none rejected —
# every report must follow runtime/report_schema.json, and every published artifact must load and
# match the original (sentier_check: outputs and parameter gradients). `layouts` (the default)
# adds the per-model options on the corpus' towers model (sentier.json).
set -u
SET="${1:-testdata/models/torch1.13}"
SELECT="${2:-on}"
LAYOUTS="${3:-layouts}"
RUN="${TEST_SRCDIR:-$PWD/bazel-bin/tools/sentierd_corpus_test.runfiles}/sentier"
source "$RUN/tools/sentierd_test_lib.sh"
CORPUS="$RUN/$SET"
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
"$D" --once --registry="$R" --output="$O" --device=cpu --select_rules="$SELECT" --workers=2 \
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
if [[ "$LAYOUTS" != layouts ]]; then
  echo "sentierd over $SET: $passes passed, $fails failed"
  [[ $fails == 0 ]]
  exit
fi
# Per-model options: REG/<model>/sentier.json. The towers model with stacked parameters and its
# own mode (training) is published optimized with the layout and the mode in its report, its
# artifact equivalent; a bad file rejects the model's versions with the reason.
R2="$T/reg_layout"; O2="$T/out_layout"
mkdir -p "$R2/towers/1" "$R2/typo/1" "$R2/margin_typo/1" "$R2/mode_typo/1" "$R2/timed/1"
cp "$CORPUS/towers/scripted.pt" "$R2/towers/1/model.pt"; cp "$CORPUS/towers/inputs.pt" "$R2/towers/1/inputs.pt"
cp "$CORPUS/towers/scripted.pt" "$R2/typo/1/model.pt"; cp "$CORPUS/towers/inputs.pt" "$R2/typo/1/inputs.pt"
echo '{"param_layout": "stacked", "memory_margin": 1.5, "mode": "training"}' >"$R2/towers/sentier.json"
cp "$CORPUS/towers/scripted.pt" "$R2/margin_typo/1/model.pt"; cp "$CORPUS/towers/inputs.pt" "$R2/margin_typo/1/inputs.pt"
echo '{"param_layout": "flat"}' >"$R2/typo/sentier.json"
echo '{"memory_margin": "50%"}' >"$R2/margin_typo/sentier.json"
cp "$CORPUS/towers/scripted.pt" "$R2/mode_typo/1/model.pt"; cp "$CORPUS/towers/inputs.pt" "$R2/mode_typo/1/inputs.pt"
echo '{"mode": "train"}' >"$R2/mode_typo/sentier.json"
cp "$CORPUS/towers/scripted.pt" "$R2/timed/1/model.pt"; cp "$CORPUS/towers/inputs.pt" "$R2/timed/1/inputs.pt"
echo '{"timing": "executor"}' >"$R2/timed/sentier.json"
"$D" --once --registry="$R2" --output="$O2" --device=cpu --poll_interval_ms=50 >"$T/log2" 2>&1 \
  || { fail "sentierd exit $? (layouts)"; tail -20 "$T/log2"; }
rep="$O2/towers/1/report.json"
if [[ "$(status_of "$rep")" == optimized ]] && grep -q '"param_layout": "stacked"' "$rep" \
    && grep -q '"memory_margin": 1.5' "$rep" && grep -q '"name": "l1.stacked_weight"' "$rep" \
    && grep -q '^  "mode": "training"' "$rep"; then
  ok "towers published with stacked parameters, validated in its own mode (training)"
  "$CHECK" --reference="$R2/towers/1/model.pt" --candidate="$O2/towers/1/model.pt" \
    --inputs="$R2/towers/1/inputs.pt" --device=cpu --mode=both --trials=2 >"$T/check2.txt" 2>&1 \
    && ok "stacked artifact equivalent" || { fail "stacked artifact not equivalent"; cat "$T/check2.txt"; }
else
  fail "towers with sentier.json: $(status_of "$rep")"; grep '"reason"' "$rep"
fi
for m in typo margin_typo mode_typo; do
rep="$O2/$m/1/report.json"
[[ "$(status_of "$rep")" == rejected ]] && grep -q 'bad sentier.json.*\(param_layout\|memory_margin\|mode\) must be' "$rep" \
  && ok "bad sentier.json rejected: $(grep -o '"reason": "[^"]*' "$rep" | cut -c12-140)" \
  || { fail "bad sentier.json ($m): $(status_of "$rep")"; grep '"reason"' "$rep"; }
done
# Timing as users run artifacts needs LibTorch 2.x: on 1.13 the model's versions are rejected
# with that reason; on 2.x they are processed.
rep="$O2/timed/1/report.json"
if grep -q "needs LibTorch 2.x" "$rep" 2>/dev/null; then
  [[ "$(status_of "$rep")" == rejected ]] && ok "timing executor on LibTorch 1.x rejected with the reason" \
    || fail "timing executor on 1.x: $(status_of "$rep")"
else
  s=$(status_of "$rep")
  [[ "$s" == optimized || "$s" == unchanged ]] && ok "timing executor ($s)" || { fail "timing executor: $s"; grep '"reason"' "$rep"; }
fi
"$RUN/tools/check_report" --schema="$RUN/runtime/report_schema.json" "$O2"/*/*/report.json \
  && ok "layout reports follow the schema" || fail "layout reports do not follow the schema"

echo "sentierd corpus: $passes passed, $fails failed"
[[ $fails == 0 ]]

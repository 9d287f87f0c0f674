#!/usr/bin/env bash
# sentierd_defaults_test.sh — what a user gets from sentierd without flags, on the CPU at a
# launch-bound batch (32): the corpus towers model (64 per-feature towers), an 8-tower model and
# ten linears on one input are published optimized, by the defaults and with the gate on (its
# default memory policy: time x peak memory may not grow, or the peak grows within 1/1024 of the
# device's memory); every report states the policy and
# the clause that decided. Then weekly versions: a retrained version (same architecture, other
# weights) reuses the earlier decision (no gate; the report says from which version and why),
# and a version of another architecture gets the full search. A model whose sentier.json asks for
# param_layout auto is published in the layout chosen, and keeps it from version to version.
set -u
RUN="${TEST_SRCDIR:-$PWD/bazel-bin/tools/sentierd_defaults_test.runfiles}/sentier"
source "$RUN/tools/sentierd_test_lib.sh"
SCHEMA="$RUN/runtime/report_schema.json"
T="${TEST_TMPDIR:-$(mktemp -d)}/defaults"
rm -rf "$T"; mkdir -p "$T"
key() { grep -o "\"$2\": [^,}]*" "$1" | head -1 | cut -d' ' -f2- | tr -d '"'; }
stage() {  # stage REG MODEL VERSION EXAMPLE SEED: an example model at batch 32
  mkdir -p "$1/$2/tmp-$3"
  "$MAKE" --model="$4" --seed="$5" --batch=32 --out_model="$1/$2/tmp-$3/model.pt" \
    --out_inputs="$1/$2/tmp-$3/inputs.pt" || { echo "cannot make model"; exit 1; }
  mv "$1/$2/tmp-$3" "$1/$2/$3"
}
registry() {  # registry REG: the three models as version 1
  mkdir -p "$1/towers/tmp-1"
  cp "$RUN/testdata/models/torch1.13/towers/scripted.pt" "$1/towers/tmp-1/model.pt"
  cp "$RUN/testdata/models/torch1.13/towers/inputs.pt" "$1/towers/tmp-1/inputs.pt"
  mv "$1/towers/tmp-1" "$1/towers/1"
  stage "$1" towers8 1 feature_towers 1
  stage "$1" linears 1 same_input_linears 1
}
expect_optimized() {  # expect_optimized OUT WHAT [TIMED]
  for m in towers towers8 linears; do
    rep="$1/$m/1/report.json"
    local s d
    s=$(status_of "$rep"); d=$(key "$rep" decision)
    if [[ "$s" == optimized && "$d" == optimized ]]; then
      ok "$2: $m optimized ($(key "$rep" aten_ops_per_forward_before) -> $(key "$rep" aten_ops_per_forward_after) aten ops)"
    elif [[ -n "${3:-}" && "$m" != towers && "$s" == unchanged && ( "$d" == gate_not_confirmed || "$d" == gate_nothing_pays ) ]]; then
      # A gain of a few tenths of a millisecond that the gate's confirmation did not see again on
      # a busy 2-core machine: the timing decided, not the memory policy.
      ok "$2: $m kept by the gate's timing ($d), not by memory"
    else
      fail "$2: $m: $s ($d): $(key "$rep" reason)"
    fi
    "$RUN/tools/check_report" --schema="$SCHEMA" "$rep" >/dev/null || fail "$2: $m report schema"
  done
}

# 1. sentierd's defaults (no flags but where to read and write).
registry "$T/reg1"
"$D" --once --registry="$T/reg1" --output="$T/out1" --poll_interval_ms=50 >"$T/log1" 2>&1 \
  || { fail "defaults: exit $?"; tail -20 "$T/log1"; }
expect_optimized "$T/out1" defaults
# The owner of a towers model published in the original layout is told what the stacked layout
# would give: in report.json (with the setting that publishes it), in the log and on /metrics.
adv="$T/out1/towers/1/report.json"
grep -q '"stacked_layout_advice"' "$adv" && grep -q '"setting": "{\\"param_layout\\": \\"stacked\\"}"' "$adv" \
  && ok "the report names the stacked layout's gain and its setting" || fail "no stacked_layout_advice in $(cat "$adv")"
grep -q '\[towers/1\] job: the stacked parameter layout (.*kernel launches per training step against the original' "$T/log1" \
  && ok "the log says what the stacked layout would give" || fail "no stacked-layout line in the log"

# 2. The gate on, with its default memory policy.
registry "$T/reg2"
"$D" --once --registry="$T/reg2" --output="$T/out2" --select_rules=on --poll_interval_ms=50 >"$T/log2" 2>&1 \
  || { fail "gate: exit $?"; tail -20 "$T/log2"; }
expect_optimized "$T/out2" gate timed
[[ $(grep -c -- "--select_rules is an old name of --gate: use --gate=on" "$T/log2") == 1 ]] \
  && ok "--select_rules (the gate's old name) is said once in the log" || fail "no one alias notice in the log"
grep -q '"gate": "on"' "$T/out2/towers8/1/report.json" \
  && ok "the report's options name the gate" || fail "no options.gate in the report"
grep -q '"policy": "time_memory_product+small_growth+device_share"' "$T/out2/towers8/1/report.json" \
  && ok "the report states the memory policy" || fail "no memory_policy in $(cat "$T/out2/towers8/1/report.json")"
grep -q '"clause": "[a-z_]*"' "$T/out2/towers8/1/report.json" \
  && ok "the report names the clause that bounded the peak" || fail "no memory clause"

# 3. Weekly versions under the same rules: towers8/2 retrained (other weights), linears/2 another
# architecture. The first reuses version 1's decision, the second is searched again.
stage "$T/reg2" towers8 2 feature_towers 7
stage "$T/reg2" linears 2 split_linears 1
"$D" --once --registry="$T/reg2" --output="$T/out2" --select_rules=on --poll_interval_ms=50 >"$T/log3" 2>&1 \
  || { fail "weekly: exit $?"; tail -20 "$T/log3"; }
rep="$T/out2/towers8/2/report.json"
if grep -q '"from_version": 1' "$rep" && grep -q '"reused": true' "$rep" &&
   grep -q '"reason": "Decision reused from version 1' "$rep" && ! grep -q '"selection"' "$rep" &&
   [[ "$(status_of "$rep")" == "$(status_of "$T/out2/towers8/1/report.json")" ]]; then
  ok "towers8/2 reused version 1's decision ($(status_of "$rep")) without the gate: $(key "$rep" note)"
else
  fail "towers8/2 did not reuse: $(cat "$rep")"
fi
rep="$T/out2/linears/2/report.json"
grep -q '"reused": false' "$rep" && grep -q 'the architecture changed' "$rep" && grep -q '"selection"' "$rep" \
  && ok "linears/2 (another architecture) searched again" || fail "linears/2: $(cat "$rep")"
for rep in "$T"/out2/*/2/report.json; do
  "$RUN/tools/check_report" --schema="$SCHEMA" "$rep" >/dev/null || fail "schema: $rep"
done
# 4. An owner who accepts renamed parameters asks for {"param_layout": "auto"}: towers (clearly
# fewer launches stacked) is published stacked, the report and the log say why, and nothing but
# the artifact and its report is published; version 2 (the same archive) keeps the layout by
# reusing the decision.
mkdir -p "$T/reg4/towers/tmp-1"
cp "$RUN/testdata/models/torch1.13/towers/scripted.pt" "$T/reg4/towers/tmp-1/model.pt"
cp "$RUN/testdata/models/torch1.13/towers/inputs.pt" "$T/reg4/towers/tmp-1/inputs.pt"
mv "$T/reg4/towers/tmp-1" "$T/reg4/towers/1"
printf '{"param_layout": "auto"}\n' >"$T/reg4/towers/sentier.json"
"$D" --once --registry="$T/reg4" --output="$T/out4" --poll_interval_ms=50 >"$T/log4" 2>&1 \
  || { fail "auto: exit $?"; tail -20 "$T/log4"; }
rep="$T/out4/towers/1/report.json"
if [[ "$(status_of "$rep")" == optimized ]] && grep -q '"param_layout": "stacked"' "$rep" &&
   grep -q '"param_layout": "auto"' "$rep" && grep -q '"chosen": "stacked"' "$rep" &&
   grep -q '\[towers/1\] job: param_layout auto: stacked: ' "$T/log4"; then
  ok "auto: towers published stacked ($(grep -o '"why": "[^"]*' "$rep" | cut -c9-))"
else
  fail "auto: $(cat "$rep")"
fi
"$RUN/tools/check_report" --schema="$SCHEMA" "$rep" >/dev/null || fail "auto: report schema"
left=$(ls -A "$T/out4/towers/1" | grep -v -x -e model.pt -e report.json)
[[ -z "$left" ]] && ok "auto: only model.pt and report.json published" || fail "auto: also published: $left"
mkdir -p "$T/reg4/towers/tmp-2"
cp "$T/reg4/towers/1/model.pt" "$T/reg4/towers/1/inputs.pt" "$T/reg4/towers/tmp-2/"
mv "$T/reg4/towers/tmp-2" "$T/reg4/towers/2"
"$D" --once --registry="$T/reg4" --output="$T/out4" --poll_interval_ms=50 >"$T/log5" 2>&1 \
  || { fail "auto v2: exit $?"; tail -20 "$T/log5"; }
rep="$T/out4/towers/2/report.json"
grep -q '"from_version": 1' "$rep" && grep -q '"param_layout": "stacked"' "$rep" &&
  grep -q '"why": "stacked: the layout of version 1' "$rep" && ! grep -q '"original": {' "$rep" \
  && ok "auto: towers/2 reused version 1's decision and layout" || fail "auto v2: $(cat "$rep")"

# The memory policy's flags: a bad word is bad flags (exit 2), naming the flag; nothing written.
"$D" --once --registry="$T/reg1" --output="$T/out_bad" --memory_margin=lots >"$T/bad.log" 2>&1
rc=$?
[[ $rc == 2 ]] && grep -q -- "--memory_margin: memory margin must be auto or a number" "$T/bad.log" && [[ ! -e "$T/out_bad" ]] \
  && ok "--memory_margin=lots: exit 2" || fail "--memory_margin=lots: exit $rc: $(cat "$T/bad.log")"
"$D" --once --registry="$T/reg1" --output="$T/out_bad" --max_memory_share=1.5 >"$T/bad.log" 2>&1
rc=$?
[[ $rc == 2 ]] && grep -q -- "--max_memory_share must be in (0, 1]" "$T/bad.log" \
  && ok "--max_memory_share=1.5: exit 2" || fail "--max_memory_share=1.5: exit $rc: $(cat "$T/bad.log")"
echo "sentierd_defaults_test: $passes passed, $fails failed"
[[ $fails == 0 ]]

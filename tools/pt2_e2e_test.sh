#!/usr/bin/env bash
# pt2_e2e_test.sh — exported programs (.pt2) through the three tools, Python-free:
#  - sentier_opt writes .pt2 from .pt2 (and refuses .pt from .pt2); sentier_check compares two
#    programs on the archive's own sample inputs; the planted wrong rules (testdata/planted) are
#    caught on a program as on TorchScript (outputs or the named parameter's gradient);
#  - sentierd: a version holding model.pt2 is optimized, validated and published as model.pt2
#    with its report; hostile archives are rejected naming the program; a version holding both
#    model.pt and model.pt2 is refused;
#  - with Python torch at hand (@libtorch//:python, or $SENTIER_PYTHON), the published artifact
#    loads with torch.export.load and matches the original (outputs, gradients, 20 steps of SGD
#    and of Adam), the stacked one through its renamed parameters.
set -u
RUN="${TEST_SRCDIR:-$PWD/bazel-bin/tools/pt2_e2e_test.runfiles}/sentier"
source "$RUN/tools/sentierd_test_lib.sh"
T="${TEST_TMPDIR:-$(mktemp -d)}/pt2"
rm -rf "$T"; mkdir -p "$T"
R="$T/reg"; O="$T/out"
mkdir -p "$R/towers/1" "$R/hostile/1" "$R/both/1" "$R/truncated/1"
cp "$RUN/runtime/pt2/testdata/towers.pt2" "$R/towers/1/model.pt2"
echo "not a zip archive" >"$R/hostile/1/model.pt2"
head -c 20000 "$RUN/runtime/pt2/testdata/towers.pt2" >"$R/truncated/1/model.pt2"
cp "$RUN/runtime/pt2/testdata/towers.pt2" "$R/both/1/model.pt2"
"$MAKE" --model=towers --seed=1 --batch=8 --out_model="$R/both/1/model.pt" --out_inputs="$R/both/1/inputs.pt"

OPT="$RUN/tools/sentier_opt"; CHECK="$RUN/tools/sentier_check"; PLANTED="$RUN/testdata/planted"
SRC="$RUN/runtime/pt2/testdata/towers.pt2"
"$OPT" --input="$SRC" --output="$T/opt.pt2" --report="$T/opt.json" >"$T/opt.txt" 2>&1 \
  && grep -q "rewrites" "$T/opt.txt" && [[ -s "$T/opt.pt2" ]] && ok "sentier_opt .pt2 -> .pt2" || { fail "sentier_opt .pt2"; tail -3 "$T/opt.txt"; }
"$OPT" --input="$SRC" --output="$T/opt.pt" >"$T/opt2.txt" 2>&1
[[ $? == 2 ]] && grep -q "in its input's format" "$T/opt2.txt" && ok "sentier_opt .pt2 -> .pt refused (2)" || fail ".pt from .pt2"
"$CHECK" --reference="$SRC" --candidate="$T/opt.pt2" --trials=2 >"$T/check.txt" 2>&1 \
  && grep -q "^sentier_check: equivalent" "$T/check.txt" && ok "sentier_check: artifact equivalent" || { fail "sentier_check"; tail -3 "$T/check.txt"; }
# drop_relu and dropped_bias on towers; the gradient-only ones on feature_towers (towers' batch
# norm makes its linears' bias gradients zero: halving them changes nothing).
FT="$RUN/runtime/pt2/testdata/feature_towers.pt2"
for planted in drop_relu:$SRC dropped_bias:$SRC detach_weight:$FT halve_bias_gradient:$FT; do
  model="${planted#*:}"; planted="${planted%%:*}"
  "$OPT" --input="$model" --output="$T/planted_$planted.pt2" --rules="$PLANTED/$planted.rules" --allow_growth >"$T/p.txt" 2>&1 \
    && grep -q "planted_$planted x" "$T/p.txt" || { fail "planted $planted not applied"; tail -3 "$T/p.txt"; continue; }
  "$CHECK" --reference="$model" --candidate="$T/planted_$planted.pt2" --trials=1 >"$T/pc.txt" 2>&1
  rc=$?
  [[ $rc == 1 ]] && grep -qE "^sentier_check: (output|grad of param [a-z0-9_.]+) (differs|on samples)" "$T/pc.txt" \
    && ok "planted $planted caught on .pt2" || { fail "planted $planted: exit $rc"; tail -3 "$T/pc.txt"; }
done

# The stacked layout on a program: equivalent through the layout's record, and checkpoints convert
# to the original names and back (sentier_state reads the record from the archive).
STATE="$RUN/tools/sentier_state"
"$OPT" --input="$FT" --output="$T/stacked.pt2" --param_layout=stacked >"$T/st.txt" 2>&1 \
  && grep -q "stacked" "$T/st.txt" && ok "sentier_opt --param_layout=stacked on .pt2" || { fail "stacked .pt2"; tail -3 "$T/st.txt"; }
"$CHECK" --reference="$FT" --candidate="$T/stacked.pt2" --trials=1 >"$T/sc.txt" 2>&1 \
  && ok "stacked .pt2 equivalent (gradients by original names)" || { fail "stacked .pt2 check"; tail -3 "$T/sc.txt"; }
"$STATE" --artifact="$T/stacked.pt2" --export --out="$T/sd.pt" >/dev/null 2>&1 \
  && "$STATE" --artifact="$T/stacked.pt2" --to_original --in="$T/sd.pt" --out="$T/orig_sd.pt" >"$T/ss.txt" 2>&1 \
  && "$STATE" --artifact="$T/stacked.pt2" --from_original --in="$T/orig_sd.pt" --out="$T/back_sd.pt" >>"$T/ss.txt" 2>&1 \
  && grep -q "original names" "$T/ss.txt" && ok "sentier_state converts a .pt2 artifact's checkpoints both ways" \
  || { fail "sentier_state on .pt2"; tail -3 "$T/ss.txt"; }
cmp -s "$T/sd.pt" "$T/back_sd.pt" && ok "checkpoint round trip is byte-identical" || fail "checkpoint round trip differs"

"$D" --registry="$R" --output="$O" --rules="$RUN/patterns" --once >"$T/log.txt" 2>&1
rc=$?
[[ $rc == 0 ]] && ok "sentierd --once exits 0" || { fail "sentierd --once: exit $rc"; tail -20 "$T/log.txt"; }

s=$(status_of "$O/towers/1/report.json" 2>/dev/null)
[[ "$s" == optimized ]] && ok "towers/1 optimized" || { fail "towers/1 status '$s'"; cat "$O/towers/1/report.json" 2>/dev/null | head -20; }
[[ -f "$O/towers/1/model.pt2" && ! -e "$O/towers/1/model.pt" ]] && ok "published as model.pt2" || fail "no model.pt2 published"
sha=$(sha256sum "$O/towers/1/model.pt2" 2>/dev/null | cut -d' ' -f1)
grep -q "\"artifact_sha256\": \"$sha\"" "$O/towers/1/report.json" 2>/dev/null && ok "sha256 matches" || fail "sha256"
grep -q '"result": "outputs and gradients match"' "$O/towers/1/report.json" 2>/dev/null && ok "validated equivalent" || fail "not validated"
"$RUN/tools/check_report" --schema="$RUN/runtime/report_schema.json" "$O/towers/1/report.json" >/dev/null \
  && ok "report follows the schema" || fail "report schema"

for m in hostile truncated; do
  s=$(status_of "$O/$m/1/report.json" 2>/dev/null)
  [[ "$s" == rejected ]] && ok "$m/1 rejected" || fail "$m/1 status '$s'"
  grep -q "cannot read exported program" "$O/$m/1/report.json" 2>/dev/null && ok "$m/1 reason names the program" || fail "$m/1 reason"
  [[ ! -e "$O/$m/1/model.pt2" ]] && ok "$m/1 has no artifact" || fail "$m/1 artifact published"
done
grep -q "both model.pt and model.pt2" "$T/log.txt" "$O"/both/1/report.json 2>/dev/null && ok "both/1 refused" || fail "both/1 not refused"
[[ ! -e "$O/both/1/model.pt" && ! -e "$O/both/1/model.pt2" ]] && ok "both/1 has no artifact" || fail "both/1 artifact"

# Python torch: $SENTIER_PYTHON, else the build's own (@libtorch//:python, the pinned pip torch).
SENTIER_PYTHON="${SENTIER_PYTHON:-${TEST_SRCDIR:-}/libtorch/python}"
if [[ -x "$SENTIER_PYTHON" ]]; then
  if "$SENTIER_PYTHON" "$RUN/tools/check_pt2_artifact.py" "$R/towers/1/model.pt2" "$O/towers/1/model.pt2" >"$T/py.txt" 2>&1; then
    ok "torch.export.load: same outputs, gradients and 20 training steps"
  else
    fail "artifact differs in Python torch"; tail -5 "$T/py.txt"
  fi
  if "$SENTIER_PYTHON" "$RUN/tools/check_pt2_artifact.py" --renamed-ok "$FT" "$T/stacked.pt2" >"$T/py2.txt" 2>&1; then
    ok "torch.export.load: the stacked .pt2 trains like the original"
  else
    fail "stacked artifact differs in Python torch"; tail -5 "$T/py2.txt"
  fi
else
  echo "note: no Python torch at '$SENTIER_PYTHON': the artifacts were not loaded in torch.export"
fi
echo "$passes passed, $fails failed"
(( fails == 0 ))

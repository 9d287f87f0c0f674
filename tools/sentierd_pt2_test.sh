#!/usr/bin/env bash
# sentierd_pt2_test.sh — exported programs in the registry: a version holding model.pt2 (its
# sample inputs in the archive) is optimized, validated and published as model.pt2 with its
# report; a hostile .pt2 is rejected naming the archive's entry; a version holding both model.pt
# and model.pt2 is refused; with Python torch at hand ($SENTIER_PYTHON), the published artifact
# loads with torch.export.load and matches the original (outputs, gradients, 20 training steps).
set -u
RUN="${TEST_SRCDIR:-$PWD/bazel-bin/tools/sentierd_pt2_test.runfiles}/sentier"
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

if [[ -n "${SENTIER_PYTHON:-}" && -x "${SENTIER_PYTHON}" ]]; then
  if "$SENTIER_PYTHON" "$RUN/tools/check_pt2_artifact.py" "$R/towers/1/model.pt2" "$O/towers/1/model.pt2" >"$T/py.txt" 2>&1; then
    ok "torch.export.load: same outputs, gradients and 20 training steps"
  else
    fail "artifact differs in Python torch"; tail -5 "$T/py.txt"
  fi
fi
echo "$passes passed, $fails failed"
(( fails == 0 ))

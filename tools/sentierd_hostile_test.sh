#!/usr/bin/env bash
# sentierd_hostile_test.sh — the real sentierd on hostile registries: planted wrong rules (every
# affected version rejected by validation, nothing published), random-byte and empty archives,
# sample inputs of the wrong arity or shape, and entry names that are not model names (spaces,
# non-ASCII, control characters). The daemon must finish its pass (exit 0) and publish nothing
# it could not validate.
set -u
RUN="${TEST_SRCDIR:-$PWD/bazel-bin/tools/sentierd_hostile_test.runfiles}/sentier"
source "$RUN/tools/sentierd_test_lib.sh"
T="${TEST_TMPDIR:-$(mktemp -d)}/hostile"
rm -rf "$T"; mkdir -p "$T"

# 1. Planted wrong rule: relu(x) -> x. Every version with a relu must be rejected by validation.
R="$T/reg1"; O="$T/out1"; mkdir -p "$R" "$T/wrong"
cat >"$T/wrong/wrong.rules" <<'RULES'
rule planted_drop_relu
  family vertical
  description a wrong rule: relu(x) is not x
  match
    %y = aten::relu(%x)
  rewrite
    replace %y with %x
end
RULES
put "$R" ranker 1 waste 1
put "$R" towers 1 towers 1
"$D" --once --registry="$R" --output="$O" --rules="$T/wrong" --poll_interval_ms=100 >"$T/log1" 2>&1
rc=$?
[[ $rc == 0 ]] && ok "pass completed with wrong rules" || { fail "exit $rc with wrong rules"; tail -5 "$T/log1"; }
for v in ranker/1 towers/1; do
  s=$(status_of "$O/$v/report.json" 2>/dev/null)
  if [[ "$s" == rejected ]] && grep -q "validation failure" "$O/$v/report.json" && [[ ! -e "$O/$v/model.pt" ]]; then
    ok "$v rejected by validation, nothing published"
  else
    fail "$v: status '$s'"; cat "$O/$v/report.json" 2>/dev/null | head -20
  fi
done

# 2. Hostile files and names, with the shipped rules.
R="$T/reg2"; O="$T/out2"; mkdir -p "$R"
put "$R" good 1 waste 1
mkdir -p "$R/random/1" "$R/empty/1" "$R/arity/1" "$R/shape/1"
head -c 65536 /dev/urandom >"$R/random/1/model.pt"; cp "$R/good/1/inputs.pt" "$R/random/1/"
: >"$R/empty/1/model.pt"; cp "$R/good/1/inputs.pt" "$R/empty/1/"
"$MAKE" --model=waste --batch=8 --out_model="$R/arity/1/model.pt" --out_inputs="$T/unused.pt"
"$MAKE" --model=unbind_mix --batch=8 --out_model="$T/um.pt" --out_inputs="$R/shape/1/inputs.pt"
cp "$R/arity/1/model.pt" "$R/shape/1/model.pt"
"$MAKE" --model=towers --batch=8 --out_model="$T/tw.pt" --out_inputs="$T/tw_in.pt"
cp "$T/tw_in.pt" "$R/arity/1/inputs.pt"   # towers' inputs have another width than waste's
mkdir -p "$R/my model/1" "$R/modèle/1" "$R/$(printf 'bad\tname')/1" "$R/good/01"
for d in "$R/my model/1" "$R/modèle/1" "$R/$(printf 'bad\tname')/1" "$R/good/01"; do
  cp "$R/good/1/model.pt" "$R/good/1/inputs.pt" "$d/"
done
"$D" --once --registry="$R" --output="$O" --poll_interval_ms=100 >"$T/log2" 2>&1
rc=$?
[[ $rc == 0 ]] && ok "pass completed on a hostile registry" || { fail "exit $rc on a hostile registry"; tail -5 "$T/log2"; }
s=$(status_of "$O/good/1/report.json" 2>/dev/null)
[[ "$s" == optimized || "$s" == unchanged ]] && ok "good/1 $s" || fail "good/1 status '$s'"
for m in random empty arity shape; do
  s=$(status_of "$O/$m/1/report.json" 2>/dev/null)
  if [[ "$s" == rejected && ! -e "$O/$m/1/model.pt" ]]; then
    ok "$m/1 rejected: $(grep -o '"reason": "[^"]*' "$O/$m/1/report.json" | cut -c12-90)"
  else
    fail "$m/1 status '$s'"
  fi
done
for bad in "my model" "modèle" "$(printf 'bad\tname')"; do
  [[ ! -e "$O/$bad" ]] && ok "ignored name '$bad'" || fail "published '$bad'"
done
[[ ! -e "$O/good/01" ]] && ok "ignored version 01" || fail "published version 01"
ls "$O" | grep -q '^\.tmp' && fail "temp dir left behind" || ok "no temp dirs"

echo "hostile registry: $passes passed, $fails failed"
(( fails == 0 ))

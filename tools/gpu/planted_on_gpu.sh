#!/usr/bin/env bash
# planted_on_gpu.sh — on the GPU machine (after build/cmake is built): sentierd --device=cuda with
# each planted gradient-only rule of testdata/planted over the corpus towers model. Every version
# must be rejected by validation, naming the parameter whose gradient is lost. (The selection is
# off: with it on, a wrong rule that does not pay is never applied, and nothing is validated.)
set -uo pipefail
cd "$(dirname "$0")/../.."
work=build/planted-gpu
rm -rf "$work"; mkdir -p "$work"
fails=0
for planted in detach_weight halve_bias_gradient stack_detached_weights; do
  mkdir -p "$work/$planted/reg/towers/1" "$work/$planted/rules"
  cp testdata/models/torch2.11/towers/scripted.pt "$work/$planted/reg/towers/1/model.pt"
  cp testdata/models/torch2.11/towers/inputs.pt "$work/$planted/reg/towers/1/inputs.pt"
  cp "testdata/planted/$planted.rules" "$work/$planted/rules/"
  build/cmake/sentierd --once --registry="$work/$planted/reg" --output="$work/$planted/out" \
    --rules="$work/$planted/rules" --device=cuda --select_rules=off >"$work/$planted/log" 2>&1
  rep="$work/$planted/out/towers/1/report.json"
  if grep -q '"status": "rejected"' "$rep" && grep -q 'validation failure on cuda: grad of param' "$rep"; then
    echo "ok   $planted rejected on cuda: $(grep -o 'grad of param [^ ]*' "$rep" | head -1)"
  else
    echo "FAIL $planted: $(grep -o '"reason": "[^"]*' "$rep" | cut -c1-200)"; fails=$((fails + 1))
  fi
done
[[ $fails == 0 ]]

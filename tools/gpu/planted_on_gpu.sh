#!/usr/bin/env bash
# planted_on_gpu.sh — on the GPU machine (after build/cmake is built): sentierd --device=cuda with
# each planted gradient-only rule of testdata/planted over the corpus towers model. Every version
# must be rejected by validation, naming the parameter whose gradient is lost. (The selection is
# off: with it on, a wrong rule that does not pay is never applied, and nothing is validated.)
# --format=pt2: the same over the model as an exported program (testdata/models/pt2/towers.pt2,
# its own sample inputs), with the forward-changing planted rules drop_relu and dropped_bias too
# (rejected on an output or on a gradient).
set -uo pipefail
cd "$(dirname "$0")/../.."
format=pt
for a in "$@"; do
  case "$a" in
    --format=pt|--format=pt2) format="${a#--format=}" ;;
    *) echo "planted_on_gpu: unknown argument '$a'" >&2; exit 2 ;;
  esac
done
planted_rules="detach_weight halve_bias_gradient stack_detached_weights"
[[ $format == pt2 ]] && planted_rules="$planted_rules drop_relu dropped_bias"
expected="validation failure on ${PLANTED_DEVICE:-cuda}: grad of param"
[[ $format == pt2 ]] && expected="validation failure on ${PLANTED_DEVICE:-cuda}: "
work=build/planted-gpu
rm -rf "$work"; mkdir -p "$work"
fails=0
for planted in $planted_rules; do
  mkdir -p "$work/$planted/reg/towers/1" "$work/$planted/rules"
  if [[ $format == pt2 ]]; then
    cp testdata/models/pt2/towers.pt2 "$work/$planted/reg/towers/1/model.pt2"
  else
    cp testdata/models/torch2.11/towers/scripted.pt "$work/$planted/reg/towers/1/model.pt"
    cp testdata/models/torch2.11/towers/inputs.pt "$work/$planted/reg/towers/1/inputs.pt"
  fi
  cp "testdata/planted/$planted.rules" "$work/$planted/rules/"
  build/cmake/sentierd --once --registry="$work/$planted/reg" --output="$work/$planted/out" \
    --rules="$work/$planted/rules" --device="${PLANTED_DEVICE:-cuda}" --select_rules=off >"$work/$planted/log" 2>&1
  rep="$work/$planted/out/towers/1/report.json"
  if grep -q '"status": "rejected"' "$rep" && grep -qF "$expected" "$rep"; then
    echo "ok   $planted ($format) rejected on ${PLANTED_DEVICE:-cuda}: $(grep -o "validation failure on ${PLANTED_DEVICE:-cuda}: [^,;]*" "$rep" | head -1 | cut -c1-120)"
  else
    echo "FAIL $planted ($format): $(grep -o '"reason": "[^"]*' "$rep" | cut -c1-200)"; fails=$((fails + 1))
  fi
done
[[ $fails == 0 ]]

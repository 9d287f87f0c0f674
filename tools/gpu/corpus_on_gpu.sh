#!/usr/bin/env bash
# corpus_on_gpu.sh — on the GPU machine, after tools/gpu/build_and_test.sh built build/cmake:
# sentierd --device=cuda over a registry of the Python-authored corpus, then a plain Python client
# (tools/gpu/train_client.py) that loads, trains and times every published artifact.
#
#   tools/gpu/corpus_on_gpu.sh [--batch=4096] [--archives=torch2.11] [--models=a,b] [--no_client]
#                              [--param_layout=original|stacked] [--select_rules=auto|on|off]
#                              [--memory_margin=F] [--mode=inference|training|both]
#                              [--timing=auto|interpreter|executor] [--job_timeout_s=600]
#                              [--config_for=a,b --config=JSON]
#                              [--client_timeout=SECONDS] [--client_optimizer=sgd|adagrad|sparse_adam]
#
# --config_for/--config: writes JSON as REG/<model>/sentier.json for the listed models (per-model
# options over the daemon's flags, e.g. --config='{"param_layout": "stacked", "memory_margin": 2}').
#
# The registry: REG/<model>/1 = testdata/models/<archives>/<model>/scripted.pt (saved on the CPU;
# traced.pt for a model that does not script),
# with sample inputs at --batch drawn by make_corpus.py --inputs_only (the GPU machine's torch).
# Writes to ${OUT:-build}: corpus-sentierd.log, corpus-client.{md,json,log}, corpus-reports.tar.gz
# and corpus-reports.md (tools/gpu/report_table.py: what each report says, one row per version).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-build}"
batch=4096
archives=torch2.11
models=""
client=1
layout=original
select=auto
margin=auto
mode=both
timing=auto  # sentierd's default: executor on torch 2.x
job_timeout=600
config_for=""
config=""
client_timeout=240
client_optimizer=sgd
for a in "$@"; do
  case "$a" in
    --batch=*) batch="${a#--batch=}" ;;
    --archives=*) archives="${a#--archives=}" ;;
    --models=*) models="${a#--models=}" ;;
    --no_client) client=0 ;;
    --param_layout=*) layout="${a#--param_layout=}" ;;
    --select_rules=*) select="${a#--select_rules=}" ;;
    --memory_margin=*) margin="${a#--memory_margin=}" ;;
    --mode=*) mode="${a#--mode=}" ;;
    --timing=*) timing="${a#--timing=}" ;;
    --job_timeout_s=*) job_timeout="${a#--job_timeout_s=}" ;;
    --config_for=*) config_for="${a#--config_for=}" ;;
    --config=*) config="${a#--config=}" ;;
    --client_timeout=*) client_timeout="${a#--client_timeout=}" ;;
    --client_optimizer=*) client_optimizer="${a#--client_optimizer=}" ;;
    *) echo "corpus_on_gpu: unknown argument '$a'" >&2; exit 2 ;;
  esac
done
if [[ ! -x build/cmake/sentierd ]]; then
  tools/gpu/build_and_test.sh --build_only || exit 1
fi
work=build/corpus-gpu
rm -rf "$work"; mkdir -p "$work/inputs" "$work/reg" "$out"
python3 testdata/models/make_corpus.py --out "$work/inputs" --batch "$batch" --inputs_only \
  ${models:+--models "$models"} >"$out/corpus-inputs.log" 2>&1 || { tail -20 "$out/corpus-inputs.log"; exit 1; }
for dir in testdata/models/"$archives"/*/; do
  m=$(basename "$dir")
  [[ -f "$work/inputs/$m/inputs.pt" ]] || continue
  mkdir -p "$work/reg/$m/1"
  archive="$dir/scripted.pt"
  [[ -f "$archive" ]] || archive="$dir/traced.pt"  # a model that does not script: traced only
  cp "$archive" "$work/reg/$m/1/model.pt"
  cp "$work/inputs/$m/inputs.pt" "$work/reg/$m/1/inputs.pt"
  if [[ ",$config_for," == *",$m,"* ]]; then
    printf '%s\n' "$config" >"$work/reg/$m/sentier.json"
    echo "$m: sentier.json $config"
  fi
done
echo "registry: $(ls "$work/reg" | wc -l) models at batch $batch ($archives archives)"
start=$(date +%s)
SENTIER_RULES_DIR="$PWD/patterns" build/cmake/sentierd --once --registry="$work/reg" \
  --output="$work/out" --device=cuda --workers=1 --rules="$PWD/patterns" --param_layout="$layout" \
  --gate="$select" --memory_margin="$margin" --mode="$mode" --timing="$timing" \
  --job_timeout_s="$job_timeout" \
  >"$out/corpus-sentierd.log" 2>&1
rc=$?
echo "sentierd --device=cuda: exit $rc in $(( $(date +%s) - start )) s"
grep -E "^sentierd: [a-z_0-9]+: " "$out/corpus-sentierd.log" | head -40
tar -C "$work/out" -czf "$out/corpus-reports.tar.gz" --exclude=model.pt --exclude=.sentierd .
python3 tools/gpu/report_table.py "$work/out" "$out/corpus-reports.md" | grep "^|"
[[ $client == 1 ]] || exit "$rc"
python3 tools/gpu/train_client.py --registry "$work/reg" --output "$work/out" --device cuda \
  --version_timeout "$client_timeout" --optimizer "$client_optimizer" \
  --json "$out/corpus-client.json" --markdown "$out/corpus-client.md" >"$out/corpus-client.log" 2>&1
crc=$?
tail -3 "$out/corpus-client.log"
cat "$out/corpus-client.md"
[[ $rc == 0 && $crc == 0 ]]

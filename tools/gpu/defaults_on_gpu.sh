#!/usr/bin/env bash
# defaults_on_gpu.sh — on the GPU machine, after tools/gpu/build_and_test.sh built build/cmake:
# what sentierd's defaults publish (no flags but --device=cuda), then weekly versions: every
# model again as version 2 with other weights (the same architecture), whose decision is reused.
#
#   tools/gpu/defaults_on_gpu.sh [--batch=4096] [--models=a,b] [--corpus=towers,highway]
#                                [--bench=wide_branches] [--versions=2]
#
# The registry: example models (tools/make_example_model: feature_towers = 8 towers,
# feature_towers_64 = 64 towers, same_input_linears, highway) and corpus models (torch2.11
# archives, inputs at --batch). Version 2 of an example model is the same model with another
# seed; of a corpus model, the same archive (weights unchanged). --versions=1 stops after the
# first version (what the defaults publish, without the reuse). Bench-suite models
# (bench/models.h, e.g. wide_branches: 256 branches) come from `model_bench --export_dir` on the
# CPU (original.pt, inputs.pt at --batch); version 2 is the same archive. Writes to
# ${OUT:-build}: defaults-sentierd-{1,2}.log, defaults.md (status, decision, memory clause, step
# times and peaks, kernels, job times of both versions and where each job's time went).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-build}"
batch=4096
models=feature_towers,feature_towers_64,same_input_linears,highway
corpus=towers,highway,list_input
bench=""
versions=2
for a in "$@"; do
  case "$a" in
    --batch=*) batch="${a#--batch=}" ;;
    --models=*) models="${a#--models=}" ;;
    --corpus=*) corpus="${a#--corpus=}" ;;
    --bench=*) bench="${a#--bench=}" ;;
    --versions=*) versions="${a#--versions=}" ;;
    *) echo "defaults_on_gpu: unknown argument '$a'" >&2; exit 2 ;;
  esac
done
[[ "$versions" =~ ^[1-9][0-9]*$ ]] || { echo "defaults_on_gpu: --versions must be a positive integer, not '$versions'" >&2; exit 2; }
[[ -x build/cmake/sentierd ]] || tools/gpu/build_and_test.sh --build_only || exit 1
work=build/defaults-gpu
rm -rf "$work"; mkdir -p "$work/reg" "$work/inputs" "$out"
stage() {  # stage VERSION: every model as that version
  local v=$1
  for m in ${models//,/ }; do
    mkdir -p "$work/reg/$m/tmp-$v"
    build/cmake/make_example_model --model="$m" --seed="$v" --batch="$batch" \
      --out_model="$work/reg/$m/tmp-$v/model.pt" --out_inputs="$work/reg/$m/tmp-$v/inputs.pt" || exit 1
    mv "$work/reg/$m/tmp-$v" "$work/reg/$m/$v"
  done
  for m in ${corpus//,/ }; do
    [[ -f "$work/inputs/$m/inputs.pt" ]] || continue
    mkdir -p "$work/reg/corpus_$m/tmp-$v"
    cp "testdata/models/torch2.11/$m/scripted.pt" "$work/reg/corpus_$m/tmp-$v/model.pt"
    cp "$work/inputs/$m/inputs.pt" "$work/reg/corpus_$m/tmp-$v/inputs.pt"
    mv "$work/reg/corpus_$m/tmp-$v" "$work/reg/corpus_$m/$v"
  done
  for m in ${bench//,/ }; do
    mkdir -p "$work/reg/bench_$m/tmp-$v"
    cp "$work/bench/$m/original.pt" "$work/reg/bench_$m/tmp-$v/model.pt"
    cp "$work/bench/$m/inputs.pt" "$work/reg/bench_$m/tmp-$v/inputs.pt"
    mv "$work/reg/bench_$m/tmp-$v" "$work/reg/bench_$m/$v"
  done
}
if [[ -n "$bench" ]]; then
  [[ -x build/cmake/model_bench ]] || tools/gpu/build_and_test.sh --build_only --targets=model_bench || exit 1
  build/cmake/model_bench --device=cpu --gate=off --batch="$batch" --models="$bench" \
    --export_dir="$work/bench" --benchmark_filter=NONE >"$out/defaults-bench.log" 2>&1 ||
    { tail -5 "$out/defaults-bench.log"; exit 1; }
fi
if [[ -n "$corpus" ]]; then
  python3 testdata/models/make_corpus.py --out "$work/inputs" --batch "$batch" --inputs_only \
    --models "$corpus" >"$out/defaults-inputs.log" 2>&1 || { tail -20 "$out/defaults-inputs.log"; exit 1; }
fi
for v in $(seq 1 "$versions"); do
  stage "$v"
  start=$(date +%s)
  SENTIER_RULES_DIR="$PWD/patterns" build/cmake/sentierd --once --registry="$work/reg" \
    --output="$work/out" --device=cuda --rules="$PWD/patterns" >"$out/defaults-sentierd-$v.log" 2>&1
  echo "version $v: sentierd exit $? in $(( $(date +%s) - start )) s"
done
python3 tools/gpu/report_table.py "$work/out" "$out/defaults.md"

#!/usr/bin/env bash
# opt_ab.sh — on the GPU machine, after tools/gpu/build_and_test.sh built build/cmake: what
# `sentier_opt` with its default settings (every rule, no gate) does to a model's speed on CUDA,
# as users run artifacts (tools/gpu/ab_time.py: executor defaults, A/B alternated), forward and
# training step. Models: corpus models (torch2.11 archives, inputs at --batch) and example models
# (tools/make_example_model, e.g. highway: 20 layers, g * x + (1 - g) * x * 0.5) and bench-suite
# models (bench/models.h, written by `model_bench --export_dir` on the CPU without the gate: its
# original.pt and inputs.pt at --batch).
#
#   tools/gpu/opt_ab.sh [--batch=4096] [--corpus=highway,towers] [--examples=highway]
#                       [--bench=dlrm,dcn,mmoe,highway256,split_cat_chains,wide_branches]
#                       [--rounds=6] [--steps=10] [--opt_flags='--disable=^lerp.*']
#                       [--label=NAME] [--kernels] [--ab_timeout=150]
#
# --opt_flags: more sentier_opt flags (a rule ablation, say); --label: the table's and files'
# name for that variant; --kernels: CUDA kernels per training step of both models
# (tools/gpu/step_profile.py --kernels); --ab_timeout: seconds each A/B (forward, training step)
# may take before it is reported as "no result". Writes ${OUT:-build}/opt-ab[-LABEL].md (one row per
# model: what sentier_opt rewrote, forward and training-step speed-ups, median and range over the
# rounds).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-build}"
batch=4096; corpus=highway,towers,wide,mmoe,dlrm; examples=highway; bench=""; rounds=6; steps=10
opt_flags=""; label=""; kernels=""; ab_timeout=150
for a in "$@"; do
  case "$a" in
    --batch=*) batch="${a#--batch=}" ;;
    --corpus=*) corpus="${a#--corpus=}" ;;
    --examples=*) examples="${a#--examples=}" ;;
    --bench=*) bench="${a#--bench=}" ;;
    --rounds=*) rounds="${a#--rounds=}" ;;
    --steps=*) steps="${a#--steps=}" ;;
    --opt_flags=*) opt_flags="${a#--opt_flags=}" ;;
    --label=*) label="${a#--label=}" ;;
    --kernels) kernels=1 ;;
    --ab_timeout=*) ab_timeout="${a#--ab_timeout=}" ;;
    *) echo "opt_ab: unknown argument '$a'" >&2; exit 2 ;;
  esac
done
[[ -x build/cmake/sentier_opt ]] || tools/gpu/build_and_test.sh --build_only || exit 1
work=build/opt-ab; rm -rf "$work"; mkdir -p "$work/inputs" "$out"
[[ -z "$corpus" ]] || python3 testdata/models/make_corpus.py --out "$work/inputs" --batch "$batch" \
  --inputs_only --models "$corpus" >"$work/inputs.log" 2>&1 || { tail -5 "$work/inputs.log"; exit 1; }
rows="| model${label:+ ($label)} | sentier_opt | forward speed-up | training-step speed-up |${kernels:+ CUDA kernels per training step |}
|---|---|---|---|${kernels:+---|}"
# kernels_of ARCHIVE INPUTS: CUDA kernels and copies per training step.
kernels_of() {
  timeout 120 python3 tools/gpu/step_profile.py --archive "$1" --inputs "$2" --kernels 2>&1 |
    grep -o '[0-9.]* CUDA kernels and copies per step' | cut -d' ' -f1
}
# speedup A B INPUTS [--infer]: ab_time.py's median speed-up and range, "1.23x (1.10-1.30)".
speedup() {
  timeout "$ab_timeout" python3 tools/gpu/ab_time.py --a "$1" --b "$2" --inputs "$3" "${@:4}" \
    --rounds "$rounds" --steps "$steps" 2>&1 | grep '^AB ' | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()[3:]); print("%.2fx (%.2f-%.2f)" % (r["speedup_median"], r["speedup_min"], r["speedup_max"]))' 2>/dev/null
}
ab() {  # ab NAME ORIGINAL INPUTS
  local name=$1 a=$2 in=$3 b="$work/${1// /_}${label:+.$label}.opt.pt" line fwd train k=""
  local flags=()
  read -ra flags <<<"$opt_flags"  # several flags, split on spaces, not globbed
  line=$(SENTIER_RULES_DIR="$PWD/patterns" build/cmake/sentier_opt --input="$a" --inputs="$in" \
    --output="$b" "${flags[@]}" 2>&1 | grep -o "[0-9]* rewrites (.*\|unchanged.*" | head -1)
  fwd=$(speedup "$a" "$b" "$in" --infer)
  train=$(speedup "$a" "$b" "$in")
  [[ -z $kernels ]] || k=" $(kernels_of "$a" "$in") -> $(kernels_of "$b" "$in") |"
  rows="$rows
| $name | ${line:-?} | ${fwd:-no result} | ${train:-no result} |$k"
  echo "$name${label:+ ($label)}: $line; forward ${fwd:-?}; training ${train:-?}$k"
}
for m in ${examples//,/ }; do
  build/cmake/make_example_model --model="$m" --batch="$batch" --out_model="$work/ex_$m.pt" \
    --out_inputs="$work/ex_$m.inputs.pt" || exit 1
  ab "example $m" "$work/ex_$m.pt" "$work/ex_$m.inputs.pt"
done
for m in ${corpus//,/ }; do
  ab "corpus $m" "testdata/models/torch2.11/$m/scripted.pt" "$work/inputs/$m/inputs.pt"
done
if [[ -n "$bench" ]]; then
  [[ -x build/cmake/model_bench ]] || tools/gpu/build_and_test.sh --build_only --targets=model_bench || exit 1
  SENTIER_RULES_DIR="$PWD/patterns" build/cmake/model_bench --device=cpu --gate=off --batch="$batch" \
    --models="$bench" --export_dir="$work/bench" --benchmark_filter=NONE >"$work/bench.log" 2>&1 ||
    { tail -5 "$work/bench.log"; exit 1; }
  for m in ${bench//,/ }; do
    ab "bench $m" "$work/bench/$m/original.pt" "$work/bench/$m/inputs.pt"
  done
fi
printf '%s\n' "$rows" | tee "$out/opt-ab${label:+-$label}.md"

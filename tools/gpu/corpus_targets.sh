#!/usr/bin/env bash
# corpus_targets.sh — on the GPU machine, after tools/gpu/build_and_test.sh built build/cmake:
# corpus models optimized by sentier_opt (every rule, no gate) in both parameter layouts, then
# timed side by side with eager PyTorch, TorchScript (the executor at its defaults, as users run
# archives) and torch.compile with and without Optimus (bench/compare_torch_compile.py
# --corpus_dir): training step, inference, CUDA kernels, peak memory, compile time.
#
#   tools/gpu/corpus_targets.sh [--models=towers,wide,highway] [--batch=4096]
#                               [--archives=torch2.11] [--modes=...] [--timeout=200]
#
# Writes to ${OUT:-build}: corpus-targets.{md,json,log}, corpus-targets-opt.log (sentier_opt's
# summaries: optimization time, aten ops before/after).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-build}"
models=towers,wide,highway
batch=4096
archives=torch2.11
modes=eager,ts_original,ts_sentier,ts_sentier_stacked,compile,compile_optimus
timeout=200
for a in "$@"; do
  case "$a" in
    --models=*) models="${a#--models=}" ;;
    --batch=*) batch="${a#--batch=}" ;;
    --archives=*) archives="${a#--archives=}" ;;
    --modes=*) modes="${a#--modes=}" ;;
    --timeout=*) timeout="${a#--timeout=}" ;;
    *) echo "corpus_targets: unknown argument '$a'" >&2; exit 2 ;;
  esac
done
if [[ ! -x build/cmake/sentier_opt ]]; then
  tools/gpu/build_and_test.sh --build_only || exit 1
fi
work=build/corpus-targets
rm -rf "$work"; mkdir -p "$work/inputs" "$work/export" "$out"
python3 testdata/models/make_corpus.py --out "$work/inputs" --batch "$batch" --inputs_only \
  --models "$models" >"$out/corpus-targets-inputs.log" 2>&1 || { tail -20 "$out/corpus-targets-inputs.log"; exit 1; }
: >"$out/corpus-targets-opt.log"
for m in ${models//,/ }; do
  d="$work/export/$m"
  mkdir -p "$d"
  src="testdata/models/$archives/$m/scripted.pt"
  [[ -f "$src" ]] || src="testdata/models/$archives/$m/traced.pt"  # a model that does not script
  cp "$src" "$d/original.pt"
  cp "$work/inputs/$m/inputs.pt" "$d/inputs.pt"
  for layout in original stacked; do
    suffix=""; [[ $layout == stacked ]] && suffix=_stacked
    start=$(date +%s.%N)
    build/cmake/sentier_opt --input="$d/original.pt" --inputs="$d/inputs.pt" --rules="$PWD/patterns" \
      --param_layout="$layout" --output="$d/optimized$suffix.pt" --report="$d/report$suffix.json" \
      >>"$out/corpus-targets-opt.log" 2>&1 || { echo "sentier_opt failed on $m ($layout)"; tail -5 "$out/corpus-targets-opt.log"; }
    python3 - "$m" "$layout" "$d/report$suffix.json" "$start" <<'EOF'
import json, sys, time
m, layout, path, start = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
try:
    r = json.load(open(path))
except Exception as e:  # noqa: BLE001
    print("  %s %s: no report (%s)" % (m, layout, e)); sys.exit(0)
print("  %s %s: aten ops/fwd %s -> %s, sentier_opt wall %.2f s" % (
    m, layout, r.get("aten_ops_per_forward_before"), r.get("aten_ops_per_forward_after"), time.time() - start))
EOF
  done
done
python3 bench/compare_torch_compile.py --export_dir="$work/export" --corpus_dir=testdata/models \
  --models="$models" --modes="$modes" --timeout="$timeout" --ts_executor=default \
  --markdown="$out/corpus-targets.md" --json="$out/corpus-targets.json" 2>&1 | tee "$out/corpus-targets.log"

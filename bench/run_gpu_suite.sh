#!/usr/bin/env bash
# run_gpu_suite.sh — the GPU benchmark suite, on the GPU machine, after tools/gpu/build_and_test.sh
# has built the CMake mirror in build/cmake (model_bench included).
#
#   bench/run_gpu_suite.sh [all|bench|compare] [extra compare_torch_compile.py flags]
#
#   bench    build/cmake/model_bench: original vs Sentier-optimized on every bench model
#            (inference and training-step rows/s, aten ops, peak memory, optimization time); it
#            also exports the models (archives, artifacts, inputs, forward source) to
#            $SENTIER_BENCH_EXPORT (default build/bench-models) for the comparison. ~1-3 min.
#   compare  bench/compare_torch_compile.py: eager, TorchScript original/Sentier, torch.compile,
#            torch.compile + Optimus, with CUDA kernel counts (torch.profiler). Every compile has
#            its own 240 s limit; all six models can take longer than 10 minutes, so split it:
#              bench/run_gpu_suite.sh compare --models=dlrm,dcn,mmoe
#              bench/run_gpu_suite.sh compare --models=highway256,split_cat_chains,wide_branches
#   all      bench, then compare (default).
#
# Logs and tables go to ${OUT:-build}: model_bench.log/.json, compare_torch_compile*.{log,md,json},
# gpu-info.log.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-build}"
export_dir="${SENTIER_BENCH_EXPORT:-build/bench-models}"
what="${1:-all}"
shift || true
mkdir -p "$out" "$export_dir"
rc=0

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || true
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' 2>&1
  git rev-parse HEAD 2>/dev/null
  git status --short 2>/dev/null | head -20
} >"$out/gpu-info.log" 2>&1

if [[ "$what" == all || "$what" == bench ]]; then
  if [[ ! -x build/cmake/model_bench ]]; then
    echo "build/cmake/model_bench missing: run tools/gpu/build_and_test.sh first (needs Google Benchmark)" >&2
    exit 1
  fi
  echo "== model_bench (log: $out/model_bench.log)"
  SENTIER_RULES_DIR="$PWD/patterns" timeout 540 build/cmake/model_bench --benchmark_min_time=0.2 \
      --export_dir="$export_dir" --benchmark_out="$out/model_bench.json" --benchmark_out_format=json \
      >"$out/model_bench.log" 2>&1
  r=$?
  [[ $r -ne 0 ]] && { echo "model_bench failed (exit $r)"; rc=$r; }
  # The summary table (and the set-up lines on stderr: optimization time, equivalence).
  grep -E "^  [a-z0-9_]+: batch|^## |^\| |^aten ops|^- " "$out/model_bench.log"
fi

if [[ "$what" == all || "$what" == compare ]]; then
  if ! ls "$export_dir"/*/forward.py >/dev/null 2>&1; then
    echo "no exported models in $export_dir: run 'bench/run_gpu_suite.sh bench' first" >&2
    exit 1
  fi
  tag=""
  for a in "$@"; do [[ "$a" == --models=* ]] && tag="-$(echo "${a#--models=}" | tr ',' '_')"; done
  echo "== compare_torch_compile (log: $out/compare_torch_compile$tag.log)"
  python3 bench/compare_torch_compile.py --export_dir="$export_dir" --timeout=240 \
      --markdown="$out/compare_torch_compile$tag.md" --json="$out/compare_torch_compile$tag.json" "$@" \
      2>&1 | tee "$out/compare_torch_compile$tag.log"
  r=${PIPESTATUS[0]}
  [[ $r -ne 0 ]] && { echo "compare_torch_compile failed (exit $r)"; rc=$r; }
fi
exit "$rc"

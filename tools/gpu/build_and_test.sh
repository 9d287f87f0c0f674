#!/usr/bin/env bash
# build_and_test.sh — on the GPU machine (pip torch with CUDA, nvcc, cmake, ninja, GoogleTest):
# unpacks build/gpu-deps.tar.gz, builds the CMake mirror against the Python torch's LibTorch,
# runs the test suite (CUDA tests included; $SENTIER_CTEST_JOBS at once, default 4) and, with
# --bench, the benchmarks; --build_only stops after the build; --targets=a,b (with --build_only)
# builds only those CMake targets (e.g. sentierd,sentier_opt: a few minutes less than the
# tests). Logs go to ${OUT:-build}/gpu-*.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
logs="${OUT:-build}"
mkdir -p "$logs" build
tar -C build -xzf build/gpu-deps.tar.gz
prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")'
cmake -S . -B build/cmake -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
      -DSENTIER_DEPS_DIR="$PWD/build/gpu-deps" >"$logs/gpu-cmake.log" 2>&1 || { tail -40 "$logs/gpu-cmake.log"; exit 1; }
targets=""
for a in "$@"; do [[ "$a" == --targets=* ]] && targets="${a#--targets=}"; done
ninja -C build/cmake ${targets//,/ } >"$logs/gpu-build.log" 2>&1 || { grep -E "error|Error" "$logs/gpu-build.log" | head -40; exit 1; }
echo "build ok"
if [[ "${1:-}" == "--build_only" ]]; then exit 0; fi
(cd build/cmake && ctest --output-on-failure -j "${SENTIER_CTEST_JOBS:-4}" 2>&1 | tee "$logs/gpu-ctest.log" | tail -25)
rc=${PIPESTATUS[0]}
if [[ "${1:-}" == "--bench" ]]; then
  SENTIER_RULES_DIR=$PWD/patterns build/cmake/optimize_benchmark --benchmark_min_time=0.1 2>&1 | tee "$logs/gpu-bench.log" | tail -30
fi
exit "$rc"

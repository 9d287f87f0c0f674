#!/usr/bin/env bash
# demo.sh — installs what is missing, builds, and optimizes the bundled example model:
# a scripted model full of split/cat waste (tools/example_models.cc), written with its sample
# inputs to build/example/, optimized by sentier_opt with the shipped rule library.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup_deps.sh
bazel build //tools:sentier_opt //tools:make_example_model
mkdir -p build/example
bazel-bin/tools/make_example_model --model=waste --batch=64 \
  --out_model=build/example/model.pt --out_inputs=build/example/inputs.pt
bazel-bin/tools/sentier_opt --input=build/example/model.pt --inputs=build/example/inputs.pt \
  --output=build/example/model.opt.pt --report=build/example/report.json \
  --rules=patterns "$@"
echo "demo: optimized artifact build/example/model.opt.pt, report build/example/report.json"

#!/usr/bin/env bash
# demo.sh — installs what is missing, builds, and runs the daemon once over the bundled example
# registry (tools/make_example_registry.sh: two models, two versions each, one architecture
# change): every version is loaded, optimized, validated and published under build/out with a
# report, and a per-model summary is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup_deps.sh
bazel build //tools:sentierd //tools:make_example_model //tools:sentier_opt //tools:sentier_check
[[ -d build/registry ]] || tools/make_example_registry.sh build/registry
bazel-bin/tools/sentierd --once --registry=build/registry --output=build/out --rules=patterns "$@"
echo "demo: artifacts and reports under build/out/<model>/<version>/ (model.pt, report.json)"

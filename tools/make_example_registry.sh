#!/usr/bin/env bash
# make_example_registry.sh OUT_DIR — writes the example registry described in
# testdata/registry/README.md (two models, two versions each, one architecture change) with
# bazel-bin/tools/make_example_model (override with $MAKE_EXAMPLE_MODEL). Each version is staged
# under OUT_DIR/<model>/tmp-<version> and renamed into place, as registry writers should.
set -euo pipefail
out="${1:?usage: make_example_registry.sh OUT_DIR}"
make="${MAKE_EXAMPLE_MODEL:-$(dirname "$0")/../bazel-bin/tools/make_example_model}"
[[ -x "$make" ]] || { echo "make_example_registry: $make not built (bazel build //tools:make_example_model)" >&2; exit 2; }
put() {  # put MODEL VERSION EXAMPLE SEED
  local dir="$out/$1" tmp="$out/$1/tmp-$2"
  mkdir -p "$dir"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  "$make" --model="$3" --seed="$4" --batch=16 --out_model="$tmp/model.pt" --out_inputs="$tmp/inputs.pt"
  rm -rf "${dir:?}/$2"
  mv "$tmp" "$dir/$2"
}
put ranker 1 waste 1
put ranker 2 waste 2           # same architecture, new weights
put towers 1 towers 1
put towers 2 feature_towers 1  # architecture change
echo "make_example_registry: wrote $out (ranker/1 ranker/2 towers/1 towers/2)"

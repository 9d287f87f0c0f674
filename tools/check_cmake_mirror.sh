#!/usr/bin/env bash
# check_cmake_mirror.sh — every .cc file named in a Bazel BUILD file must also appear in
# CMakeLists.txt (compiled there, or listed in its comment of Bazel-only sources), so the CMake
# mirror used on the GPU machine cannot silently drift from the Bazel build.
set -u
# Under `bazel test` the CMakeLists.txt in the runfiles is a link into the source tree: follow it.
if [[ -n "${TEST_SRCDIR:-}" && -e "$TEST_SRCDIR/sentier/CMakeLists.txt" ]]; then
  ROOT="$(dirname "$(readlink -f "$TEST_SRCDIR/sentier/CMakeLists.txt")")"
else
  ROOT="$(cd "$(dirname "$0")/.." && pwd)"
fi
missing=0
checked=0
while IFS= read -r build; do
  pkg=$(dirname "${build#$ROOT/}")
  for src in $(grep -oE '"[A-Za-z0-9_./-]+\.cc"' "$build" | tr -d '"'); do
    path="$pkg/$src"
    checked=$((checked + 1))
    if ! grep -qF "$path" "$ROOT/CMakeLists.txt"; then
      echo "missing from CMakeLists.txt: $path (named in ${build#$ROOT/})"
      missing=$((missing + 1))
    fi
  done
done < <(find -L "$ROOT" -name BUILD -not -path "*/bazel-*" -not -path "*/third_party/rules_*" -not -path "*/build/*")
echo "$checked sources checked, $missing missing"
(( checked > 0 && missing == 0 ))

#!/usr/bin/env bash
# pack_deps.sh — packs Debian's static Abseil/RE2/gflags/glog libraries and the headers of those
# and of nlohmann-json, cpp-httplib and prometheus-cpp (core) into build/gpu-deps.tar.gz (a few
# MB), for a machine that has LibTorch with CUDA, CMake and GoogleTest but not these libraries
# (see README, section "GPU").
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build/gpu-deps
rm -rf "$out"
mkdir -p "$out/include" "$out/lib"
cp -r /usr/include/absl /usr/include/re2 /usr/include/gflags /usr/include/glog \
      /usr/include/nlohmann "$out/include/"
# cpp-httplib (sentierd's /metrics): Debian compiles it, so its library and the brotli
# libraries it needs travel too (CMakeLists.txt uses them only where ldd resolves them all).
cp -r /usr/include/httplib.h /usr/include/brotli /usr/include/zlib.h /usr/include/zconf.h "$out/include/"
cp -L /usr/lib/x86_64-linux-gnu/libcpp-httplib.so "$out/lib/libcpp-httplib.so"
cp -L /usr/lib/x86_64-linux-gnu/libcpp-httplib.so.0.11 "$out/lib/" 2>/dev/null || true
for b in common dec enc; do cp -L /usr/lib/x86_64-linux-gnu/libbrotli$b.so.1 "$out/lib/"; done
# prometheus-cpp's core (sentierd's metrics): headers and the shared library (Debian ships no
# static one); the pull and push parts are not used.
cp -r /usr/include/prometheus "$out/include/"
cp -L /usr/lib/x86_64-linux-gnu/libprometheus-cpp-core.so "$out/lib/libprometheus-cpp-core.so"
cp -L /usr/lib/x86_64-linux-gnu/libprometheus-cpp-core.so.1.0 "$out/lib/"
cp /usr/lib/x86_64-linux-gnu/libabsl_*.a /usr/lib/x86_64-linux-gnu/libre2.a \
   /usr/lib/x86_64-linux-gnu/libgflags.a /usr/lib/x86_64-linux-gnu/libglog.a "$out/lib/"
# Debian's static glog unwinds with libunwind, which decompresses debug info with liblzma.
cp /usr/lib/x86_64-linux-gnu/libunwind.a /usr/lib/x86_64-linux-gnu/liblzma.a "$out/lib/"
# libunwind.a also carries a second implementation of the C++ unwinder ABI (_Unwind_Resume,
# _Unwind_RaiseException, ...). Linked statically, it would serve the program's own cleanup
# landing pads while libstdc++ throws through libgcc_s: two unwinders on one exception, which
# aborts or crashes as soon as an exception crosses a destructor. glog needs only the unw_*
# API, so those members are dropped.
abi_members=$(nm -A --defined-only "$out/lib/libunwind.a" 2>/dev/null |
  awk '$NF ~ /^_Unwind_/ {split($1, p, ":"); print p[2]}' | sort -u)
if [[ -n "$abi_members" ]]; then
  # shellcheck disable=SC2086
  ar d "$out/lib/libunwind.a" $abi_members
fi
if nm --defined-only "$out/lib/libunwind.a" 2>/dev/null | grep -q ' T _Unwind_'; then
  echo "pack_deps: libunwind.a still defines _Unwind_* symbols" >&2
  exit 1
fi
tar -C build -czf build/gpu-deps.tar.gz gpu-deps
echo "pack_deps: $(du -h build/gpu-deps.tar.gz | cut -f1) in build/gpu-deps.tar.gz"

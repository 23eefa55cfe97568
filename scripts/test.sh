#!/usr/bin/env bash
# test.sh — set up, build and run every test: the normal build, then the ASan+UBSan build.
# Prints ctest's summary line for each ("100% tests passed, 0 tests failed out of N").
set -euo pipefail
cd "$(dirname "$0")/.."

PIPER_CMAKE_ARGS="-DPIPER_WERROR=ON ${PIPER_CMAKE_ARGS:-}" scripts/setup.sh

echo "== tests (release build)"
ctest --test-dir build --output-on-failure -j"$(nproc)"
# Whether exec/cuda was built, and why not (written by exec/cuda/detect.cmake at configure time).
echo "CUDA backend: $(cat build/cuda_backend.txt 2>/dev/null || echo 'unknown (build/cuda_backend.txt is missing)')"

echo "== tests (AddressSanitizer + UndefinedBehaviorSanitizer build)"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DPIPER_WERROR=ON -DPIPER_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$(nproc)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j"$(nproc)"

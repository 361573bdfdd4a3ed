#!/usr/bin/env bash
# Install what is missing, build, and run the whole test suite.
#   scripts/test.sh              the suite (build/)
#   scripts/test.sh --sanitize   the suite built with ASan + UBSan (build-asan/)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --test

dir=build flags=(-DPL_BUILD_TESTS=ON -DPL_SANITIZE=OFF)
if [ "${1:-}" = "--sanitize" ]; then
  dir=build-asan flags=(-DPL_BUILD_TESTS=ON -DPL_SANITIZE=ON)
fi
cmake -S . -B "$dir" "${flags[@]}" >/dev/null
cmake --build "$dir" -j"$(nproc)"
ctest --test-dir "$dir" --output-on-failure -j"$(nproc)"

#!/usr/bin/env bash
# Install what is missing, build, and run the whole test suite.
#   scripts/test.sh              the suite (build/)
#   scripts/test.sh --sanitize   the suite built with ASan + UBSan (build-asan/)
#   scripts/test.sh --tsan       the threads' stress test under ThreadSanitizer
#                                (build-tsan/; Criterion cannot run under it)
#   scripts/test.sh --minimal    the suite built without libpq and libcurl
#                                (build-min/; what needs them is left out)
# The browser tests of ledger-web (tests/web/) run in build/ alone.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --test

dir=build flags=(-DPL_BUILD_TESTS=ON -DPL_SANITIZE=OFF)
case "${1:-}" in
  "") ;;
  --sanitize) dir=build-asan flags=(-DPL_BUILD_TESTS=ON -DPL_SANITIZE=ON
                                    -DPL_BROWSER_TESTS=OFF) ;;
  --tsan) dir=build-tsan flags=(-DPL_BUILD_TESTS=ON -DPL_TSAN=ON
                                -DPL_BROWSER_TESTS=OFF) ;;
  --minimal) dir=build-min flags=(-DPL_BUILD_TESTS=ON -DPL_SANITIZE=OFF
                                  -DPL_WITH_POSTGRESQL=OFF -DPL_WITH_CURL=OFF
                                  -DPL_WITH_WEB=OFF -DPL_BROWSER_TESTS=OFF) ;;
  *) echo "usage: scripts/test.sh [--sanitize | --tsan | --minimal]" >&2
     exit 2 ;;
esac
cmake -S . -B "$dir" "${flags[@]}" >/dev/null
cmake --build "$dir" -j"$(nproc)"
ctest --test-dir "$dir" --output-on-failure -j"$(nproc)"

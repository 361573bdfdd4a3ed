#!/usr/bin/env bash
# Install what is missing, build, and run the whole test suite.
#   scripts/test.sh              the suite (build/), but for the tests
#                                labelled "sanitized", which --sanitize runs
#   scripts/test.sh --sanitize   the suite built with ASan + UBSan, by clang 19
#                                (build-asan/)
#   scripts/test.sh --tsan       the threads' stress test under ThreadSanitizer
#                                (build-tsan/; Criterion cannot run under it)
#   scripts/test.sh --minimal    the suite built without libpq and libcurl,
#                                as a Release (-O3, NDEBUG) build (build-min/;
#                                what needs them is left out, and so are the
#                                tests labelled "long", which the default
#                                and sanitizer builds run on the same code)
# The browser tests of ledger-web (tests/web/) run in build/ alone, and so
# does the benchmark (build/bench/pl-bench): the other builds leave it out,
# and the TSan build makes only its one test's program.
# With PL_NPM_REQUIRED=1 (.ci/run sets it when the npm registry answers), a
# test that would skip for want of its npm helpers fails instead
# (tests/npm_setup.sh).
# With PL_TEST_BUILD_ONLY=1 it stops once the suite is built, and installs
# only what building it needs (.ci/run builds the default tree while the
# rest of the tests' packages install).
set -euo pipefail
cd "$(dirname "$0")/.."
# one mode at most, checked before anything is installed or built
case "$*" in
  "" | --sanitize | --tsan | --minimal) ;;
  *) echo "usage: scripts/test.sh [--sanitize | --tsan | --minimal]" >&2
     exit 2 ;;
esac
build_only=${PL_TEST_BUILD_ONLY:-0}
if [ "$build_only" = 1 ]; then scripts/deps.sh --test-build; else scripts/deps.sh --test; fi

dir=build flags=(-DPL_BUILD_TESTS=ON -DPL_SANITIZE=OFF) targets=() ctest_args=()
case "${1:-}" in
  # the tests labelled "sanitized" (the bit flips) run under --sanitize
  # alone: the same code and checks, with ASan and UBSan
  "") ctest_args=(-LE sanitized) ;;
  --sanitize) dir=build-asan flags=(-DPL_BUILD_TESTS=ON -DPL_SANITIZE=ON
                                    -DPL_BROWSER_TESTS=OFF -DPL_BUILD_BENCH=OFF
                                    -DCMAKE_C_COMPILER=clang-19
                                    -DCMAKE_CXX_COMPILER=clang++-19)
              # clang 19's ASan runtime, not GCC 12's: it holds its
              # allocator's locks across fork(), so a test's process forked
              # while another thread allocates (Criterion's runner forks
              # every test's worker so) cannot wait forever on a lock held
              # by a thread the child does not have (docs/testing.md)
              ;;
  --tsan) dir=build-tsan flags=(-DPL_BUILD_TESTS=ON -DPL_TSAN=ON
                                -DPL_BROWSER_TESTS=OFF -DPL_BUILD_BENCH=OFF)
          targets=(--target stress_threads) ;;
  # (its configuration in scripts/minimal.cmake, which
  # tests/release_build.sh reads too)
  --minimal) dir=build-min flags=(-C scripts/minimal.cmake)
             ctest_args=(-LE long) ;;
  *) echo "usage: scripts/test.sh [--sanitize | --tsan | --minimal]" >&2
     exit 2 ;;
esac
cmake -S . -B "$dir" "${flags[@]}" >/dev/null
cmake --build "$dir" -j"$(nproc)" "${targets[@]}"
[ "$build_only" = 1 ] && exit 0
# The npm packages the default suite's setups installed in build/ (the
# reference MCP servers, cron-parser) are copied, not installed again: the
# setups here find them, as they would find their own (tests/npm_setup.sh).
if [ "$dir" != build ]; then
  for m in npm npm-cron; do
    if [ -d "build/$m/node_modules" ] && [ ! -e "$dir/$m" ]; then
      cp -a "build/$m" "$dir/$m"
    fi
  done
fi
# Twice as many tests at once as there are CPUs: a third of a test's time
# is spent waiting (on the disk's flushes, its servers, its children), and
# none asserts a time. PL_TEST_JOBS=N to choose.
ctest --test-dir "$dir" --output-on-failure \
      -j"${PL_TEST_JOBS:-$(($(nproc) * 2))}" "${ctest_args[@]}"

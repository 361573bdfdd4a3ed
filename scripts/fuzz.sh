#!/usr/bin/env bash
# Build the libFuzzer harnesses (fuzz/, clang, ASan + UBSan, build-fuzz/)
# and run each for SECONDS (default 30), as many at once as there are cores,
# on its seed corpus (fuzz/corpus/NAME/; new inputs go to a scratch folder).
# A finding fails the script: the input is left as build-fuzz/NAME-crash-*
# (add it to the corpus once fixed).
#   scripts/fuzz.sh [SECONDS]          build and run every harness
#   scripts/fuzz.sh SECONDS NAME...    only these harnesses
#   scripts/fuzz.sh --seeds            rewrite the seeds that come from a
#                                      real store (the step, run-record and
#                                      store harnesses')
#   scripts/fuzz.sh --build            build them, and run none (.ci/run
#                                      builds them in the background)
set -euo pipefail
cd "$(dirname "$0")/.."
all=(fuzz_step_record fuzz_run_record fuzz_payload fuzz_store
     fuzz_llm_response fuzz_cli_args fuzz_llm_stream fuzz_calendar fuzz_mcp
     fuzz_schema fuzz_import fuzz_web)
# the arguments, checked before anything is installed or built
usage() {
  echo "usage: scripts/fuzz.sh [SECONDS [NAME...]] | --seeds | --build" >&2
  exit 2
}
case "${1:-}" in
  --seeds | --build) [ $# -eq 1 ] || usage ;;
  *) [[ ${1:-30} =~ ^[0-9]+$ ]] || usage
     for n in "${@:2}"; do
       [[ " ${all[*]} " == *" $n "* ]] ||
         { echo "fuzz.sh: no harness '$n' (${all[*]})" >&2; exit 2; }
     done ;;
esac
scripts/deps.sh --fuzz

cc=$(command -v clang-19 || command -v clang)
dir=build-fuzz
cmake -S . -B "$dir" -DCMAKE_C_COMPILER="$cc" -DPL_FUZZ=ON \
  -DPL_BUILD_TESTS=OFF -DPL_BUILD_EXAMPLES=OFF -DPL_BUILD_BENCH=OFF >/dev/null
cmake --build "$dir" -j"$(nproc)" --target "${all[@]}" >/dev/null
[ "${1:-}" = "--build" ] && exit 0

if [ "${1:-}" = "--seeds" ]; then
  for n in fuzz_step_record fuzz_run_record fuzz_store; do
    rm -f fuzz/corpus/$n/seed-*
    mkdir -p fuzz/corpus/$n
  done
  PL_FUZZ_SEEDS="$PWD/fuzz/corpus" "$dir/fuzz/fuzz_store" -runs=0 \
    fuzz/corpus/fuzz_store >/dev/null 2>&1
  exit 0
fi

secs=${1:-30}
shift || true
names=("$@")
[ ${#names[@]} -eq 0 ] && names=("${all[@]}")
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# one harness: new inputs go to a scratch folder; the seeds are only read
fuzz_one() {
  local n=$1 work log=$scratch/$1.log max=4096
  # an export's seeds are whole runs, 3 to 8 KB
  [ "$n" = fuzz_import ] && max=16384
  work=$(mktemp -d "$scratch/$n.XXXXXX")
  # stderr of the code under test (the tools' messages) is closed; the
  # fuzzer's own output and any report still print
  if ! "$dir/fuzz/$n" -max_total_time="$secs" -max_len=$max -timeout=20 \
       -rss_limit_mb=2048 -close_fd_mask=2 -print_final_stats=1 \
       -artifact_prefix="$dir/$n-" "$work" "fuzz/corpus/$n" >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz: $n found a fault; the input is $dir/$n-crash-* (or leak-, timeout-)" >&2
    return 1
  fi
  echo "fuzz: $n for ${secs}s: $(grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "$log" | tr '\n' ' ')$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -n 1)"
  rm -rf "$work"
}
# as many harnesses at once as there are cores, each for SECONDS
echo "fuzz: ${#names[@]} harnesses, $(nproc) at a time, ${secs}s each"
pids=() failed=0
for n in "${names[@]}"; do
  fuzz_one "$n" &
  pids+=($!)
  if [ ${#pids[@]} -ge "$(nproc)" ]; then
    wait "${pids[0]}" || failed=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do
  wait "$p" || failed=1
done
exit "$failed"

#!/usr/bin/env bash
# Soak: 1,000 concurrent runs of 100 calls on a pl_pool (tests/soak.c),
# round after round for SECONDS (default 300), the process SIGKILLed at a
# random instant every 1 to 4 seconds and restarted.  Then a last clean
# restart, built with AddressSanitizer (LeakSanitizer at its exit), finishes
# the runs begun, and the check: every run completed and verifies, every
# call made its effect, none that finished made it twice; and memory flat
# across restarts (each killed process's peak RSS, compared).
#   scripts/soak.sh [SECONDS]      PL_SEED=n repeats a sequence of kills
# Builds build/ and build-asan/ (their pl-soak only); not part of the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-300}
for d in build:OFF build-asan:ON; do
  cmake -S . -B "${d%%:*}" -DPL_BUILD_TESTS=ON -DPL_SANITIZE="${d##*:}" >/dev/null
  cmake --build "${d%%:*}" -j"$(nproc)" --target pl-soak >/dev/null
done

work=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"' EXIT
store=$work/store.db effects=$work/effects
seed=${PL_SEED:-$$}
RANDOM=$seed
echo "soak: ${secs}s, seed $seed (PL_SEED=$seed repeats the kill delays)"

start=$(date +%s)
deadline=$((start + secs))
gen=0 kills=0 peaks=()
while [ "$(date +%s)" -lt "$deadline" ]; do
  build/tests/pl-soak run "$store" "$effects" "$gen" "$deadline" &
  pid=$!
  ms=$((1000 + RANDOM % 3000))
  sleep "$((ms / 1000)).$(printf %03d $((ms % 1000)))"
  if kill -0 "$pid" 2>/dev/null; then
    peak=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    kills=$((kills + 1))
    [ -n "$peak" ] && [ "$peak" -gt 0 ] && peaks+=("$peak")
    echo "soak: restart $gen killed after ${ms} ms, peak RSS ${peak:-?} KiB"
  else
    if ! wait "$pid"; then
      echo "soak: restart $gen failed" >&2
      exit 1
    fi
  fi
  pid=
  gen=$((gen + 1))
done

echo "soak: last restart ($gen), under AddressSanitizer, finishes the runs begun"
ASAN_OPTIONS=detect_leaks=1 build-asan/tests/pl-soak run "$store" "$effects" \
  "$gen" 0
build/tests/pl-soak check "$store" "$effects"

# memory flat: no restart's peak more than twice the smallest
if [ ${#peaks[@]} -gt 0 ]; then
  min=${peaks[0]} max=${peaks[0]}
  for p in "${peaks[@]}"; do
    [ "$p" -lt "$min" ] && min=$p
    [ "$p" -gt "$max" ] && max=$p
  done
  echo "soak: peak RSS over ${#peaks[@]} killed restarts: ${min}..${max} KiB"
  if [ "$max" -gt $((2 * min)) ]; then
    echo "soak: memory grew across restarts" >&2
    exit 1
  fi
fi
echo "soak: $(( $(date +%s) - start ))s, $kills kills, $gen restarts: passed"
